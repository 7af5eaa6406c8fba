import SleepProxyWire

/// The proxy's own records on one interface: `_sleep-proxy._udp` (docs/protocol.md §1.1) and its host name.
///
/// Unique records (SRV, TXT, A, AAAA) are probed before use, announced, defended, and renamed on conflict
/// (RFC 6762 §8, §9). The host name is the proxy's own, not the machine's: an avahi-daemon on the same machine
/// publishes the machine's name with its own choice of addresses, and two responders publishing one unique
/// name with different address sets would conflict with each other forever.
struct OwnAdvertisement: Sendable {
    static let serviceType: DNSName = "_sleep-proxy._udp.local."
    static let servicesEnumeration: DNSName = "_services._dns-sd._udp.local."
    static let local: DNSName = "local."

    enum Phase: Hashable, Sendable {
        /// `sent` probes are out; the next goes at `next`.
        case probing(sent: Int)
        case announcing(sent: Int)
        case established
    }

    var context: InterfaceContext
    var phase: Phase
    var next: Timestamp?
    var records: [DNSResourceRecord]

    var isEstablished: Bool {
        if case .established = self.phase { return true }
        if case .announcing = self.phase { return true }
        return false
    }

    var isProbing: Bool {
        if case .probing = self.phase { return true }
        return false
    }

    static func instanceName(_ label: String) -> DNSName? { try? Self.serviceType.prepending(label: Array(label.utf8)) }
    static func hostName(_ label: String) -> DNSName? { try? Self.local.prepending(label: Array(label.utf8)) }

    static func records(for context: InterfaceContext, instanceLabel: String, hostLabel: String, port: UInt16)
        -> [DNSResourceRecord]
    {
        guard let instance = Self.instanceName(instanceLabel), let host = Self.hostName(hostLabel) else { return [] }
        var records: [DNSResourceRecord] = [
            DNSResourceRecord(
                name: Self.serviceType, ttl: MDNSRules.otherRecordTTL, rdata: .ptr(PTRRecord(target: instance))),
            DNSResourceRecord(
                name: Self.servicesEnumeration, ttl: MDNSRules.otherRecordTTL,
                rdata: .ptr(PTRRecord(target: Self.serviceType))),
            DNSResourceRecord(
                name: instance, cacheFlush: true, ttl: MDNSRules.hostRecordTTL,
                rdata: .srv(SRVRecord(port: port, target: host))),
            // docs/protocol.md §1.1: a TXT of one empty string (RDATA 0x00).
            DNSResourceRecord(name: instance, cacheFlush: true, ttl: MDNSRules.otherRecordTTL, rdata: .txt(.empty)),
        ]
        for prefix in context.prefixes {
            switch prefix.address {
            case .v4(let v4):
                records.append(
                    DNSResourceRecord(
                        name: host, cacheFlush: true, ttl: MDNSRules.hostRecordTTL, rdata: .a(ARecord(address: v4))))
            case .v6(let v6):
                records.append(
                    DNSResourceRecord(
                        name: host, cacheFlush: true, ttl: MDNSRules.hostRecordTTL,
                        rdata: .aaaa(AAAARecord(address: v6))))
            }
        }
        return records
    }

    /// RFC 6762 §9: "Name (2)", "Name (3)" ... for the service instance, the way Apple renames one.
    static func renamedInstance(_ label: String) -> String {
        var base = label
        var number = 2
        if base.hasSuffix(")"), let open = base.lastIndex(of: "("), open > base.startIndex,
            base[base.index(before: open)] == " ",
            let value = Int(base[base.index(after: open)..<base.index(before: base.endIndex)]), value >= 2
        {
            base = String(base[..<base.index(before: open)])
            number = value + 1
        }
        return Self.fit("\(base) (\(number))", keepingSuffix: " (\(number))")
    }

    /// "host-2", "host-3" ... for the host name.
    static func renamedHost(_ label: String) -> String {
        var base = label
        var number = 2
        if let dash = base.lastIndex(of: "-"), let value = Int(base[base.index(after: dash)...]), value >= 2 {
            base = String(base[..<dash])
            number = value + 1
        }
        return Self.fit("\(base)-\(number)", keepingSuffix: "-\(number)")
    }

    /// Trims a label to the 63-byte limit (RFC 1035 §2.3.4) without splitting a UTF-8 character.
    private static func fit(_ label: String, keepingSuffix suffix: String) -> String {
        guard label.utf8.count > DNSName.maximumLabelLength else { return label }
        var base = String(label.dropLast(suffix.count))
        while base.utf8.count + suffix.utf8.count > DNSName.maximumLabelLength { base.removeLast() }
        return base + suffix
    }
}
