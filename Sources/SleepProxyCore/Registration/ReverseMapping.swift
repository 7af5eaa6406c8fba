import SleepProxyWire

/// Reverse-mapping names (RFC 1035 §3.5 in-addr.arpa, RFC 3596 §2.5 ip6.arpa) and the addresses they name.
///
/// Apple's proxy takes the addresses it claims only from the owner names of reverse-mapping PTR records
/// (docs/protocol.md §4.1): `d.c.b.a.in-addr.arpa.` (exactly six labels) or 32 one-nibble labels then `ip6.arpa.`
/// (34 labels), nibbles in either case.
public enum ReverseMapping {
    static let inAddrArpa: DNSName = "in-addr.arpa."
    static let ip6Arpa: DNSName = "ip6.arpa."

    public static func address(from name: DNSName) -> IPAddress? {
        // Read straight from the wire bytes: most names are not reverse-mapping names and are rejected by their
        // last labels; the others are parsed without materialising 34 label arrays.
        let storage = name.storage
        if name.hasSuffix(inAddrArpa) {
            let end = storage.count - inAddrArpa.storage.count
            var value: UInt32 = 0
            var octets: [UInt32] = []
            var offset = 0
            while offset < end {
                let length = Int(storage[offset])
                let label = storage[(offset + 1)..<(offset + 1 + length)]
                guard (1...3).contains(length), label.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                    length == 1 || label.first != 0x30
                else { return nil }
                let octet = label.reduce(UInt32(0)) { $0 * 10 + UInt32($1 - 0x30) }
                guard octet <= 255 else { return nil }
                octets.append(octet)
                offset += 1 + length
            }
            // Exactly d.c.b.a: the last octet first.
            guard octets.count == 4 else { return nil }
            for octet in octets.reversed() { value = value << 8 | octet }
            return .v4(IPv4Address(rawValue: value))
        }
        if name.hasSuffix(ip6Arpa) {
            // 32 one-nibble labels: 64 bytes of (length 1, nibble).
            guard storage.count - ip6Arpa.storage.count == 64 else { return nil }
            var high: UInt64 = 0
            var low: UInt64 = 0
            for index in 0..<32 {
                // Nibble labels run from the least significant; walk them from the most significant.
                let offset = (31 - index) * 2
                guard storage[offset] == 1, let nibble = hexValue(storage[offset + 1]) else { return nil }
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
