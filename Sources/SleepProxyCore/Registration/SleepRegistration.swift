import SleepProxyWire

/// What a host about to sleep sends a sleep proxy, built exactly as Apple's client builds it (docs/protocol.md §2.3,
/// §2.4, §3): a DNS UPDATE without a zone section; the update section holds one reverse-mapping PTR per address,
/// then for each service its TXT, the `_services._dns-sd._udp` PTR, the service-type PTR (and subtype PTRs) and
/// its SRV, then the A/AAAA records; unique records carry the cache-flush bit, every TTL is 4500 s; SRV targets
/// are written uncompressed; an OPT record (payload size 1440, Apple's Z bits) holds a 4-byte Update Lease and
/// the Owner option. A registration too large for one packet is split into several UPDATEs with the same ID,
/// each carrying the OPT, as Apple's client does.
public struct SleepRegistration: Hashable, Sendable {
    public struct Service: Hashable, Sendable {
        /// `Name._type._tcp.local.`
        public var instance: DNSName
        public var port: UInt16
        public var txt: TXTRecord
        /// Subtype names, `_sub._type._tcp.local.` each with its own first label (`_printer._sub._ipp._tcp.local.`).
        public var subtypes: [DNSName]

        public init(instance: DNSName, port: UInt16, txt: TXTRecord = .empty, subtypes: [DNSName] = []) {
            self.instance = instance
            self.port = port
            self.txt = txt
            self.subtypes = subtypes
        }
    }

    /// docs/protocol.md §2.4: the TTL Apple's client gives every record it hands over.
    public static let recordTTL: UInt32 = 4500
    /// docs/protocol.md §3.1: the OPT record's class (payload size) and TTL as Apple writes them.
    public static let edns = EDNSHeader(udpPayloadSize: 1440, z: 0x1194)
    /// Apple's `NormalMaxDNSMessageData`: each UPDATE stays within 1440 bytes.
    public static let maximumMessageSize = 1440

    public var hostName: DNSName
    public var addresses: [IPAddress]
    public var services: [Service]
    public var owner: OwnerOption
    public var lease: UInt32

    public init(hostName: DNSName, addresses: [IPAddress], services: [Service], owner: OwnerOption, lease: UInt32) {
        self.hostName = hostName
        self.addresses = addresses
        self.services = services
        self.owner = owner
        self.lease = lease
    }

    /// The update section, in Apple's order.
    public var records: [DNSResourceRecord] {
        let ttl = Self.recordTTL
        var records: [DNSResourceRecord] = []
        for address in self.addresses {
            records.append(
                DNSResourceRecord(
                    name: ReverseMapping.name(for: address), cacheFlush: true, ttl: ttl,
                    rdata: .ptr(PTRRecord(target: self.hostName))))
        }
        for service in self.services {
            let type = service.instance.parent
            records.append(
                DNSResourceRecord(name: service.instance, cacheFlush: true, ttl: ttl, rdata: .txt(service.txt)))
            records.append(
                DNSResourceRecord(name: "_services._dns-sd._udp.local.", ttl: ttl, rdata: .ptr(PTRRecord(target: type)))
            )
            records.append(DNSResourceRecord(name: type, ttl: ttl, rdata: .ptr(PTRRecord(target: service.instance))))
            for subtype in service.subtypes {
                records.append(
                    DNSResourceRecord(name: subtype, ttl: ttl, rdata: .ptr(PTRRecord(target: service.instance))))
            }
            records.append(
                DNSResourceRecord(
                    name: service.instance, cacheFlush: true, ttl: ttl,
                    rdata: .srv(SRVRecord(port: service.port, target: self.hostName))))
        }
        for address in self.addresses {
            switch address {
            case .v4(let v4):
                records.append(
                    DNSResourceRecord(name: self.hostName, cacheFlush: true, ttl: ttl, rdata: .a(ARecord(address: v4))))
            case .v6(let v6):
                records.append(
                    DNSResourceRecord(
                        name: self.hostName, cacheFlush: true, ttl: ttl, rdata: .aaaa(AAAARecord(address: v6))))
            }
        }
        return records
    }

    var opt: DNSResourceRecord {
        .opt(Self.edns, options: [.updateLease(UpdateLeaseOption(lease: self.lease)), .owner(self.owner)])
    }

    /// The UPDATEs to send, all with `id`, each within `maximumSize` bytes (a single record larger than that goes
    /// alone). Sizes are counted without compression, an upper bound of the encoded size.
    public func messages(
        id: UInt16, maximumSize: Int = SleepRegistration.maximumMessageSize, extra: [DNSResourceRecord] = []
    ) -> [DNSMessage] {
        Self.messages(records: self.records + extra, opt: self.opt, id: id, maximumSize: maximumSize)
    }

    /// `records` cut into UPDATEs of at most `maximumSize` bytes, each carrying `opt` (the Lease and Owner
    /// options): a registration, or a proxy handing a host over (`OwnerRegistration.transferMessages`).
    static func messages(records: [DNSResourceRecord], opt: DNSResourceRecord, id: UInt16, maximumSize: Int)
        -> [DNSMessage]
    {
        let flags = DNSHeaderFlags(response: false, opcode: .update)
        let fixed = 12 + opt.uncompressedWireLength
        var messages: [DNSMessage] = []
        var current: [DNSResourceRecord] = []
        var size = fixed
        for record in records {
            let length = record.uncompressedWireLength
            if size + length > maximumSize, !current.isEmpty {
                messages.append(DNSMessage(id: id, flags: flags, authorities: current, additionals: [opt]))
                current = []
                size = fixed
            }
            current.append(record)
            size += length
        }
        if !current.isEmpty || messages.isEmpty {
            messages.append(DNSMessage(id: id, flags: flags, authorities: current, additionals: [opt]))
        }
        return messages
    }
}
