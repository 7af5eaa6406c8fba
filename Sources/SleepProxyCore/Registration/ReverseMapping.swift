import SleepProxyWire

/// Reverse-mapping names (RFC 1035 §3.5 in-addr.arpa, RFC 3596 §2.5 ip6.arpa) and the addresses they name.
///
/// Apple's proxy takes the addresses it claims only from the owner names of reverse-mapping PTR records
/// (sps-protocol §4.1): `d.c.b.a.in-addr.arpa.` (exactly six labels) or 32 one-nibble labels then `ip6.arpa.`
/// (34 labels), nibbles in either case.
public enum ReverseMapping {
    static let inAddrArpa: DNSName = "in-addr.arpa."
    static let ip6Arpa: DNSName = "ip6.arpa."

    public static func address(from name: DNSName) -> IPAddress? {
        let labels = name.labels
        if labels.count == 6, name.isSubdomain(of: inAddrArpa) {
            var value: UInt32 = 0
            // Labels are d, c, b, a: the last octet first.
            for label in labels[0..<4].reversed() {
                guard (1...3).contains(label.count), label.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                    label.count == 1 || label.first != 0x30,
                    let octet = UInt8(String(decoding: label, as: UTF8.self))
                else { return nil }
                value = value << 8 | UInt32(octet)
            }
            return .v4(IPv4Address(rawValue: value))
        }
        if labels.count == 34, name.isSubdomain(of: ip6Arpa) {
            var high: UInt64 = 0
            var low: UInt64 = 0
            for (index, label) in labels[0..<32].reversed().enumerated() {
                guard label.count == 1, let nibble = hexValue(label[0]) else { return nil }
                if index < 16 { high = high << 4 | UInt64(nibble) } else { low = low << 4 | UInt64(nibble) }
            }
            return .v6(IPv6Address(high: high, low: low))
        }
        return nil
    }

    /// The reverse-mapping name for `address`, IPv6 nibbles in upper case as Apple writes them.
    public static func name(for address: IPAddress) -> DNSName {
        switch address {
        case .v4(let v4):
            let octets = v4.bytes.reversed().map { String($0) }
            return try! DNSName(labels: octets + ["in-addr", "arpa"])
        case .v6(let v6):
            let nibbles = v6.bytes.reversed().flatMap { byte in [byte & 0x0F, byte >> 4] }
            let labels = nibbles.map { String($0, radix: 16, uppercase: true) }
            return try! DNSName(labels: labels + ["ip6", "arpa"])
        }
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case 0x30...0x39: return byte - 0x30
        case 0x41...0x46: return byte - 0x41 + 10
        case 0x61...0x66: return byte - 0x61 + 10
        default: return nil
        }
    }
}
