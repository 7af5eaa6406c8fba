import SleepProxyWire

/// Identifies a sleeping host: the interface it registered on and its primary MAC (the Owner option's HMAC).
/// Apple's proxy groups records the same way (docs/protocol.md §4.1: "per (interface, HMAC)").
public struct OwnerKey: Hashable, Comparable, Sendable, CustomStringConvertible {
    public var interface: String
    public var primaryMAC: MACAddress

    public init(interface: String, primaryMAC: MACAddress) {
        self.interface = interface
        self.primaryMAC = primaryMAC
    }

    /// Hashes the MAC only: the interface name is a String, whose hashing normalises Unicode, and two hosts
    /// with one MAC on different interfaces are rare enough that equality alone can tell them apart.
    public func hash(into hasher: inout Hasher) { hasher.combine(self.primaryMAC) }

    public static func < (lhs: OwnerKey, rhs: OwnerKey) -> Bool {
        (lhs.interface, lhs.primaryMAC) < (rhs.interface, rhs.primaryMAC)
    }

    public var description: String { "\(self.primaryMAC)%\(self.interface)" }
}

/// One record a sleeping host handed over, as the proxy keeps it.
public struct ProxiedRecord: Hashable, Sendable {
    /// Class IN; `cacheFlush` marks a unique record (docs/protocol.md §4.1 step 2); TTL as registered, capped.
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

    /// Apple's keepalive records: type NULL whose second label is `_keepalive` (docs/protocol.md §6).
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
    /// Changing the records recomputes `addresses` and `hostName`.
    public var records: [ProxiedRecord] {
        didSet { self.deriveClaims() }
    }
    /// Set for a host the proxy adopted instead of one that registered (docs/adoption.md): the addresses its own
    /// frames gave, claimed besides those its reverse mappings name (a Windows PC publishes none). Nil for a
    /// registration, whose addresses its records alone name (docs/protocol.md §4.3).
    public var adoptedAddresses: [IPAddress]? {
        didSet { self.deriveClaims() }
    }

    /// Whether the proxy adopted the host rather than the host registering.
    public var isAdopted: Bool { self.adoptedAddresses != nil }
    /// An adopted Windows PC's (or Samba host's) names, answered for over NetBIOS and LLMNR while it sleeps
    /// (docs/windows.md); nil for a host that showed none.
    public var windows: WindowsIdentity?
    /// When the first part of this sleep epoch arrived; hand-back after 60 s counts from here (docs/protocol.md §5.1).
    public var registeredAt: Timestamp
    /// When the latest part arrived.
    public var updatedAt: Timestamp
    /// One lease for the whole host: every part refreshes it (each part carries the same requested lease in
    /// practice, and Apple's clients renew by re-sending everything).
    public var leaseExpiry: Timestamp
    /// The lease granted to the latest part, in seconds.
    public var grantedLease: UInt32
    /// The DNS ID of the latest part: parts of one registration share it (docs/protocol.md §2.3).
    public var lastMessageID: UInt16

    /// `claims`, when given, must be `OwnerSummary.claims(of: records)` (a caller that knows the records did
    /// not change passes the previous ones instead of deriving them again).
    public init(
        key: OwnerKey, owner: OwnerOption, records: [ProxiedRecord], registeredAt: Timestamp, updatedAt: Timestamp,
        leaseExpiry: Timestamp, grantedLease: UInt32, lastMessageID: UInt16,
        claims: (hostName: DNSName?, addresses: [IPAddress])? = nil, adoptedAddresses: [IPAddress]? = nil,
        windows: WindowsIdentity? = nil
    ) {
        self.windows = windows
        self.key = key
        self.owner = owner
        self.records = records
        self.adoptedAddresses = adoptedAddresses
        (self.hostName, self.addresses) = claims ?? OwnerSummary.claims(of: records.map(\.record))
        if let adoptedAddresses { self.addresses = Self.merged(self.addresses, adoptedAddresses) }
        self.registeredAt = registeredAt
        self.updatedAt = updatedAt
        self.leaseExpiry = leaseExpiry
        self.grantedLease = grantedLease
        self.lastMessageID = lastMessageID
    }

    /// This registration with `records`, equal to its own (the same names spelled alike, in other buffers:
    /// `NameInterner`), in their place; what its records claim stays as derived, the host name in `hostName`'s
    /// buffer. Setting `records` would derive it all again: a third of the journal replay's name sharing at 10,000
    /// hosts (docs/scale.md).
    func withNamesShared(records: [ProxiedRecord], hostName: DNSName?) -> OwnerRegistration {
        // Given to the initialiser, adopted addresses are merged again into addresses that hold them already: the
        // same set.
        OwnerRegistration(
            key: self.key, owner: self.owner, records: records, registeredAt: self.registeredAt,
            updatedAt: self.updatedAt, leaseExpiry: self.leaseExpiry, grantedLease: self.grantedLease,
            lastMessageID: self.lastMessageID, claims: (hostName, self.addresses),
            adoptedAddresses: self.adoptedAddresses, windows: self.windows)
    }

    /// The host name and the addresses to take over, derived once from `records`: the store, the policy checks
    /// and the packet path read them on every event. The rest of the summary is derived on demand, so a host
    /// costs memory for its records only.
    public private(set) var hostName: DNSName?
    public private(set) var addresses: [IPAddress]

    private mutating func deriveClaims() {
        (self.hostName, self.addresses) = OwnerSummary.claims(of: self.records.map(\.record))
        if let adopted = self.adoptedAddresses { self.addresses = Self.merged(self.addresses, adopted) }
    }

    /// The addresses named by records and those an adopted host's frames gave, once each, sorted.
    static func merged(_ named: [IPAddress], _ adopted: [IPAddress]) -> [IPAddress] {
        Array(Set(named + adopted)).sorted()
    }

    public static func == (lhs: OwnerRegistration, rhs: OwnerRegistration) -> Bool {
        lhs.key == rhs.key && lhs.owner == rhs.owner && lhs.records == rhs.records
            && lhs.registeredAt == rhs.registeredAt
            && lhs.updatedAt == rhs.updatedAt && lhs.leaseExpiry == rhs.leaseExpiry
            && lhs.grantedLease == rhs.grantedLease
            && lhs.lastMessageID == rhs.lastMessageID && lhs.adoptedAddresses == rhs.adoptedAddresses
            && lhs.windows == rhs.windows
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(self.key)
        hasher.combine(self.updatedAt)
    }

    /// Everything derived from the records: host name, addresses, services, keepalives.
    public var summary: OwnerSummary { OwnerSummary(records: self.records.map(\.record)) }

    /// The transport and port of each service (SRV record), as `summary.services` has them, without deriving
    /// the rest: the takeover needs only these for every registration and restored host (docs/scale.md).
    public var servicePorts: [(transport: OwnerSummary.Service.TransportProtocol?, port: UInt16)] {
        self.records.compactMap { proxied in
            guard case .srv(let srv) = proxied.record.rdata else { return nil }
            return (OwnerSummary.Service.TransportProtocol(instance: proxied.record.name), srv.port)
        }
    }
}

extension OwnerSummary.Service.TransportProtocol {
    /// From the third label of a service instance name (docs/protocol.md §4.4: `_tcp` or `_udp`, any case); nil
    /// for anything else.
    ///
    /// Read in place, four bytes folded into one word: a restart asks this of every SRV record it restores, and
    /// the arrays the comparison used to build were a tenth of the restoring thread's waits for the allocator
    /// (docs/scale.md, "0.8.0: the start's other reads out of the restore's way").
    init?(instance name: DNSName) {
        guard let third = name.label(at: 2), third.count == 4 else { return nil }
        var word: UInt32 = 0
        for byte in third { word = word << 8 | UInt32(byte &- 0x41 < 26 ? byte | 0x20 : byte) }
        switch word {
        case 0x5F74_6370: self = .tcp  // "_tcp"
        case 0x5F75_6470: self = .udp  // "_udp"
        default: return nil
        }
    }
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
        /// From the third label of the instance name (docs/protocol.md §4.4: `_tcp` or `_udp`); nil for anything else.
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

    /// Only the host name and the claimed addresses (what `OwnerRegistration` keeps).
    public static func claims(of records: [DNSResourceRecord]) -> (hostName: DNSName?, addresses: [IPAddress]) {
        let summary = OwnerSummary(records: records, claimsOnly: true)
        return (summary.hostName, summary.addresses)
    }

    public init(records: [DNSResourceRecord]) { self.init(records: records, claimsOnly: false) }

    private init(records: [DNSResourceRecord], claimsOnly: Bool) {
        // Small linear lists rather than dictionaries keyed by name: a host has a handful of addresses and
        // services, and hashing every name cost more than the scans (this runs for every new registration).
        var addressRecords: [(name: DNSName, address: IPAddress)] = []
        var reverse: [(IPAddress, DNSName)] = []
        var txts: [(name: DNSName, strings: [[UInt8]])] = []
        var srvs: [(DNSName, SRVRecord)] = []
        var keepalives: [KeepaliveInfo] = []
        for record in records {
            switch record.rdata {
            case .a(let a): addressRecords.append((record.name, .v4(a.address)))
            case .aaaa(let aaaa): addressRecords.append((record.name, .v6(aaaa.address)))
            case .ptr(let ptr):
                if let address = ReverseMapping.address(from: record.name) { reverse.append((address, ptr.target)) }
            case .txt(let txt) where !claimsOnly: txts.append((record.name, txt.strings))
            case .srv(let srv) where !claimsOnly: srvs.append((record.name, srv))
            case .null(let null) where !claimsOnly:
                if ProxiedRecord(record: record, registeredAt: Timestamp(nanoseconds: 0)).isKeepalive,
                    let info = KeepaliveInfo(rdata: null.data)
                {
                    keepalives.append(info)
                }
            default: break
            }
        }
        var confirmed: [IPAddress] = []
        var unconfirmed: [IPAddress] = []
        var hostVotes: [(name: DNSName, votes: Int)] = []
        func vote(_ name: DNSName, _ count: Int) {
            if let index = hostVotes.firstIndex(where: { $0.name == name }) {
                hostVotes[index].votes += count
            } else {
                hostVotes.append((name, count))
            }
        }
        for (address, target) in reverse {
            vote(target, 1)
            if addressRecords.contains(where: { $0.address == address && $0.name == target }) {
                if !confirmed.contains(address) { confirmed.append(address) }
            } else if !unconfirmed.contains(address) {
                unconfirmed.append(address)
            }
        }
        for record in addressRecords { vote(record.name, 1) }
        // The name most records point at; ties go to the smallest name, so the choice is stable.
        self.hostName = hostVotes.max { ($0.votes, $1.name) < ($1.votes, $0.name) }?.name
        self.addresses = confirmed.sorted()
        self.unconfirmedAddresses = unconfirmed.filter { !confirmed.contains($0) }.sorted()
        let txtByName = { (name: DNSName) in txts.first { $0.name == name }?.strings }
        self.services = srvs.map { name, srv in
            Service(
                instance: name, type: name.parent, transport: Service.TransportProtocol(instance: name),
                port: srv.port, target: srv.target,
                txt: txtByName(name) ?? [])
        }.sorted { ($0.instance, $0.port) < ($1.instance, $1.port) }
        self.keepalives = keepalives
    }
}

extension OwnerRegistration {
    /// The UPDATEs that hand this host to another proxy (docs/several-proxies.md), as Apple's
    /// proxy does when it goes to sleep: the records as registered, the host's own Owner option (so the receiver
    /// takes it for the host's own registration), and the lease that is left. Nil once the lease has run out.
    public func transferMessages(id: UInt16, now: Timestamp) -> [DNSMessage]? {
        let left = (self.leaseExpiry - now).components.seconds
        guard left > 0 else { return nil }
        let opt = DNSResourceRecord.opt(
            SleepRegistration.edns,
            options: [.updateLease(UpdateLeaseOption(lease: UInt32(clamping: left))), .owner(self.owner)])
        return SleepRegistration.messages(
            records: self.records.map(\.record), opt: opt, id: id, maximumSize: SleepRegistration.maximumMessageSize)
    }
}
