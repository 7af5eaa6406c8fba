import SleepProxyWire

/// Identifies a sleeping host: the interface it registered on and its primary MAC (the Owner option's HMAC).
/// Apple's proxy groups records the same way (sps-protocol §4.1: "per (interface, HMAC)").
public struct OwnerKey: Hashable, Comparable, Sendable, CustomStringConvertible {
    public var interface: String
    public var primaryMAC: MACAddress

    public init(interface: String, primaryMAC: MACAddress) {
        self.interface = interface
        self.primaryMAC = primaryMAC
    }

    public static func < (lhs: OwnerKey, rhs: OwnerKey) -> Bool {
        (lhs.interface, lhs.primaryMAC) < (rhs.interface, rhs.primaryMAC)
    }

    public var description: String { "\(self.primaryMAC)%\(self.interface)" }
}

/// One record a sleeping host handed over, as the proxy keeps it.
public struct ProxiedRecord: Hashable, Sendable {
    /// Class IN; `cacheFlush` marks a unique record (sps-protocol §4.1 step 2); TTL as registered, capped.
    public var record: DNSResourceRecord
    /// When the registration part that carried it arrived.
    public var registeredAt: Timestamp

    public init(record: DNSResourceRecord, registeredAt: Timestamp) {
        self.record = record
        self.registeredAt = registeredAt
    }

    public var isUnique: Bool { self.record.cacheFlush }

    /// RFC 6762 §8.1 "identical": same name, type, class and rdata (TTL and cache-flush bit aside).
    func isIdentical(to other: DNSResourceRecord) -> Bool {
        self.record.name == other.name && self.record.rrclass == other.rrclass && self.record.rdata == other.rdata
    }

    /// Apple's keepalive records: type NULL whose second label is `_keepalive` (sps-protocol §6).
    public var isKeepalive: Bool {
        guard self.record.type == .null else { return false }
        let labels = self.record.name.labels
        return labels.count >= 2 && DNSName.asciiLowercased(label: labels[1]) == Array("_keepalive".utf8)
    }
}

/// Everything the proxy holds for one sleeping host in its current sleep epoch.
public struct OwnerRegistration: Hashable, Sendable {
    public var key: OwnerKey
    /// Sequence, wake MAC and SecureOn password from the latest part (version is always 0 here).
    public var owner: OwnerOption
    public var records: [ProxiedRecord]
    /// When the first part of this sleep epoch arrived; hand-back after 60 s counts from here (sps-protocol §5.1).
    public var registeredAt: Timestamp
    /// When the latest part arrived.
    public var updatedAt: Timestamp
    /// One lease for the whole host: every part refreshes it (each part carries the same requested lease in
    /// practice, and Apple's clients renew by re-sending everything).
    public var leaseExpiry: Timestamp
    /// The lease granted to the latest part, in seconds.
    public var grantedLease: UInt32
    /// The DNS ID of the latest part: parts of one registration share it (sps-protocol §2.3).
    public var lastMessageID: UInt16

    public init(
        key: OwnerKey, owner: OwnerOption, records: [ProxiedRecord], registeredAt: Timestamp, updatedAt: Timestamp,
        leaseExpiry: Timestamp, grantedLease: UInt32, lastMessageID: UInt16
    ) {
        self.key = key
        self.owner = owner
        self.records = records
        self.registeredAt = registeredAt
        self.updatedAt = updatedAt
        self.leaseExpiry = leaseExpiry
        self.grantedLease = grantedLease
        self.lastMessageID = lastMessageID
    }

    public var summary: OwnerSummary { OwnerSummary(records: self.records.map(\.record)) }
}

/// What the proxy derives from a host's records: who it is, which addresses to take over, which services wake it.
public struct OwnerSummary: Hashable, Sendable {
    public struct Service: Hashable, Sendable {
        public enum TransportProtocol: String, Hashable, Sendable {
            case tcp, udp
        }

        /// `Inst._svc._tcp.local.`
        public var instance: DNSName
        /// `_svc._tcp.local.`
        public var type: DNSName
        /// From the third label of the instance name (sps-protocol §4.4: `_tcp` or `_udp`); nil for anything else.
        public var transport: TransportProtocol?
        public var port: UInt16
        public var target: DNSName
        public var txt: [[UInt8]]
    }

    /// The host name the reverse PTRs and address records point at.
    public var hostName: DNSName?
    /// Addresses to take over: named by a reverse-mapping PTR (as Apple does) and confirmed by an A/AAAA record
    /// of that PTR's target, sorted.
    public var addresses: [IPAddress]
    /// Reverse-mapping PTRs whose address no A/AAAA record of the target confirms: answered, never claimed.
    public var unconfirmedAddresses: [IPAddress]
    public var services: [Service]
    public var keepalives: [KeepaliveInfo]

    public init(records: [DNSResourceRecord]) {
        var addressRecords: [DNSName: Set<IPAddress>] = [:]
        var reverse: [(IPAddress, DNSName)] = []
        var txtByName: [DNSName: [[UInt8]]] = [:]
        var srvs: [(DNSName, SRVRecord)] = []
        var keepalives: [KeepaliveInfo] = []
        for record in records {
            switch record.rdata {
            case .a(let a): addressRecords[record.name, default: []].insert(.v4(a.address))
            case .aaaa(let aaaa): addressRecords[record.name, default: []].insert(.v6(aaaa.address))
            case .ptr(let ptr):
                if let address = ReverseMapping.address(from: record.name) { reverse.append((address, ptr.target)) }
            case .txt(let txt): txtByName[record.name] = txt.strings
            case .srv(let srv): srvs.append((record.name, srv))
            case .null(let null):
                if ProxiedRecord(record: record, registeredAt: Timestamp(nanoseconds: 0)).isKeepalive,
                    let info = KeepaliveInfo(rdata: null.data)
                {
                    keepalives.append(info)
                }
            default: break
            }
        }
        var confirmed: Set<IPAddress> = []
        var unconfirmed: Set<IPAddress> = []
        var hostVotes: [DNSName: Int] = [:]
        for (address, target) in reverse {
            hostVotes[target, default: 0] += 1
            if addressRecords[target]?.contains(address) == true {
                confirmed.insert(address)
            } else {
                unconfirmed.insert(address)
            }
        }
        for (name, addresses) in addressRecords { hostVotes[name, default: 0] += addresses.count }
        self.hostName = hostVotes.max { ($0.value, $1.key) < ($1.value, $0.key) }?.key
        self.addresses = confirmed.sorted()
        self.unconfirmedAddresses = unconfirmed.subtracting(confirmed).sorted()
        self.services = srvs.map { name, srv in
            let labels = name.labels
            var transport: Service.TransportProtocol? = nil
            if labels.count >= 3 {
                switch DNSName.asciiLowercased(label: labels[2]) {
                case Array("_tcp".utf8): transport = .tcp
                case Array("_udp".utf8): transport = .udp
                default: transport = nil
                }
            }
            return Service(instance: name, type: name.parent, transport: transport, port: srv.port, target: srv.target, txt: txtByName[name] ?? [])
        }.sorted { ($0.instance, $0.port) < ($1.instance, $1.port) }
        self.keepalives = keepalives
    }
}
