/// An IPv4 address, in host order in `rawValue` (192.0.2.1 is 0xC000_0201).
public struct IPv4Address: Hashable, Sendable, Comparable, CustomStringConvertible {
    public let rawValue: UInt32

    public static let any = IPv4Address(rawValue: 0)
    public static let broadcast = IPv4Address(rawValue: 0xFFFF_FFFF)
    /// RFC 6762 §3: the IPv4 mDNS group.
    public static let mdnsGroup = IPv4Address(rawValue: 0xE000_00FB)

    public init(rawValue: UInt32) { self.rawValue = rawValue }

    public init(_ a: UInt8, _ b: UInt8, _ c: UInt8, _ d: UInt8) {
        self.rawValue = UInt32(a) << 24 | UInt32(b) << 16 | UInt32(c) << 8 | UInt32(d)
    }

    public init?<C: Collection>(bytes: C) where C.Element == UInt8 {
        guard bytes.count == 4 else { return nil }
        self.rawValue = bytes.reduce(0) { $0 << 8 | UInt32($1) }
    }

    /// Parses dotted-quad text: four decimal octets, no leading zeros beyond a lone "0".
    public init?(_ text: Substring) {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var value: UInt32 = 0
        for part in parts {
            guard (1...3).contains(part.utf8.count), part.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                part.utf8.count == 1 || part.utf8.first != 0x30, let octet = UInt8(part)
            else { return nil }
            value = value << 8 | UInt32(octet)
        }
        self.rawValue = value
    }

    public init?(_ text: String) { self.init(Substring(text)) }

    public var bytes: [UInt8] {
        [
            UInt8(self.rawValue >> 24), UInt8(truncatingIfNeeded: self.rawValue >> 16),
            UInt8(truncatingIfNeeded: self.rawValue >> 8), UInt8(truncatingIfNeeded: self.rawValue),
        ]
    }

    /// RFC 3927: 169.254.0.0/16.
    public var isLinkLocal: Bool { self.rawValue >> 16 == 0xA9FE }
    public var isMulticast: Bool { self.rawValue >> 28 == 0xE }

    /// True when both addresses share the first `prefixLength` bits.
    public func isInSameSubnet(as other: IPv4Address, prefixLength: Int) -> Bool {
        guard prefixLength > 0 else { return true }
        let mask: UInt32 = prefixLength >= 32 ? .max : ~(UInt32.max >> UInt32(prefixLength))
        return self.rawValue & mask == other.rawValue & mask
    }

    public var description: String { self.bytes.map(String.init).joined(separator: ".") }

    public static func < (lhs: IPv4Address, rhs: IPv4Address) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// An IPv6 address as two big-endian halves (`high` holds bytes 0–7).
public struct IPv6Address: Hashable, Sendable, Comparable, CustomStringConvertible {
    public let high: UInt64
    public let low: UInt64

    public static let any = IPv6Address(high: 0, low: 0)
    /// RFC 4291 §2.7.1: all-nodes, link-local scope.
    public static let allNodes = IPv6Address(high: 0xFF02_0000_0000_0000, low: 1)
    /// RFC 6762 §3: the IPv6 mDNS group.
    public static let mdnsGroup = IPv6Address(high: 0xFF02_0000_0000_0000, low: 0xFB)

    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    public init?<C: Collection>(bytes: C) where C.Element == UInt8 {
        guard bytes.count == 16 else { return nil }
        var high: UInt64 = 0
        var low: UInt64 = 0
        for (i, byte) in bytes.enumerated() {
            if i < 8 { high = high << 8 | UInt64(byte) } else { low = low << 8 | UInt64(byte) }
        }
        self.high = high
        self.low = low
    }

    /// Parses RFC 4291 §2.2 text: eight groups, one `::`, and an optional trailing dotted quad.
    /// A zone suffix (`%eth0`) is not part of an address and is rejected.
    public init?(_ text: String) {
        let utf8 = Array(text.utf8)
        guard !utf8.isEmpty, utf8.count <= 45 else { return nil }
        var head: [UInt16] = []
        var tail: [UInt16] = []
        var sawDoubleColon = false
        var i = 0
        if utf8.starts(with: [0x3A, 0x3A]) {
            sawDoubleColon = true
            i = 2
        } else if utf8.first == 0x3A {
            return nil
        }
        while i < utf8.count {
            // A dotted quad may end the address (RFC 4291 §2.2 form 3).
            var j = i
            while j < utf8.count, utf8[j] != 0x3A { j += 1 }
            let group = utf8[i..<j]
            if group.contains(0x2E) {
                guard j == utf8.count, let v4 = IPv4Address(Substring(decoding: group, as: UTF8.self)) else {
                    return nil
                }
                let words = [UInt16(v4.rawValue >> 16), UInt16(truncatingIfNeeded: v4.rawValue)]
                if sawDoubleColon { tail += words } else { head += words }
                i = j
                break
            }
            guard (1...4).contains(group.count), let word = UInt16(String(decoding: group, as: UTF8.self), radix: 16)
            else { return nil }
            if sawDoubleColon { tail.append(word) } else { head.append(word) }
            i = j
            if i < utf8.count {
                // At a colon: either a separator or the start of "::".
                if i + 1 < utf8.count, utf8[i + 1] == 0x3A {
                    guard !sawDoubleColon else { return nil }
                    sawDoubleColon = true
                    i += 2
                } else {
                    i += 1
                    guard i < utf8.count else { return nil }  // a trailing single colon
                }
            }
        }
        let total = head.count + tail.count
        if sawDoubleColon {
            guard total <= 7 else { return nil }
        } else {
            guard total == 8 else { return nil }
        }
        let words = head + Array(repeating: 0, count: 8 - total) + tail
        self.init(words: words)
    }

    init(words: [UInt16]) {
        var high: UInt64 = 0
        var low: UInt64 = 0
        for (index, word) in words.enumerated() {
            if index < 4 { high = high << 16 | UInt64(word) } else { low = low << 16 | UInt64(word) }
        }
        self.high = high
        self.low = low
    }

    public var bytes: [UInt8] {
        (0..<16).map { index in
            let half = index < 8 ? self.high : self.low
            return UInt8(truncatingIfNeeded: half >> (56 - 8 * UInt64(index % 8)))
        }
    }

    var words: [UInt16] {
        (0..<8).map { index in
            let half = index < 4 ? self.high : self.low
            return UInt16(truncatingIfNeeded: half >> (48 - 16 * UInt64(index % 4)))
        }
    }

    /// RFC 4291 §2.5.6: fe80::/10.
    public var isLinkLocal: Bool { self.high >> 54 == 0x3FA }
    public var isMulticast: Bool { self.high >> 56 == 0xFF }
    public var isUnspecified: Bool { self.high == 0 && self.low == 0 }

    /// RFC 4291 §2.7.1: the solicited-node group ff02::1:ffXX:XXXX that NS for this address is sent to.
    public var solicitedNodeMulticast: IPv6Address {
        IPv6Address(high: 0xFF02_0000_0000_0000, low: 0x0000_0001_FF00_0000 | (self.low & 0xFF_FFFF))
    }

    /// RFC 2464 §7: the Ethernet group address 33:33:xx:xx:xx:xx that carries this multicast address.
    public var multicastMAC: MACAddress {
        MACAddress(rawValue: 0x3333_0000_0000 | (self.low & 0xFFFF_FFFF))
    }

    public func isInSameSubnet(as other: IPv6Address, prefixLength: Int) -> Bool {
        guard prefixLength > 0 else { return true }
        if prefixLength >= 128 { return self == other }
        if prefixLength >= 64 {
            let bits = prefixLength - 64
            let mask: UInt64 = bits == 0 ? 0 : ~(UInt64.max >> UInt64(bits))
            return self.high == other.high && self.low & mask == other.low & mask
        }
        let mask = ~(UInt64.max >> UInt64(prefixLength))
        return self.high & mask == other.high & mask
    }

    /// RFC 5952 text: lower case, no leading zeros, the first longest run of two or more zero groups as `::`.
    public var description: String {
        let words = self.words
        var bestStart = -1
        var bestLength = 0
        var index = 0
        while index < 8 {
            if words[index] == 0 {
                var end = index
                while end < 8, words[end] == 0 { end += 1 }
                if end - index > bestLength {
                    bestStart = index
                    bestLength = end - index
                }
                index = end
            } else {
                index += 1
            }
        }
        if bestLength < 2 { bestStart = -1 }
        var text = ""
        index = 0
        while index < 8 {
            if index == bestStart {
                text += "::"
                index += bestLength
                continue
            }
            if !text.isEmpty, !text.hasSuffix(":") { text += ":" }
            text += String(words[index], radix: 16)
            index += 1
        }
        return text
    }

    public static func < (lhs: IPv6Address, rhs: IPv6Address) -> Bool {
        (lhs.high, lhs.low) < (rhs.high, rhs.low)
    }
}

/// Either address family; the registration and takeover logic handle both through one type.
public enum IPAddress: Hashable, Sendable, Comparable, CustomStringConvertible {
    case v4(IPv4Address)
    case v6(IPv6Address)

    public init?(_ text: String) {
        if let v4 = IPv4Address(text) {
            self = .v4(v4)
        } else if let v6 = IPv6Address(text) {
            self = .v6(v6)
        } else {
            return nil
        }
    }

    public var description: String {
        switch self {
        case .v4(let address): return address.description
        case .v6(let address): return address.description
        }
    }

    public var isLinkLocal: Bool {
        switch self {
        case .v4(let address): return address.isLinkLocal
        case .v6(let address): return address.isLinkLocal
        }
    }

    public var isMulticast: Bool {
        switch self {
        case .v4(let address): return address.isMulticast
        case .v6(let address): return address.isMulticast
        }
    }
}

extension ByteReader {
    @inlinable
    mutating func readIPv4(_ what: StaticString) throws(WireError) -> IPv4Address {
        IPv4Address(rawValue: try self.readUInt32(what))
    }

    @inlinable
    mutating func readIPv6(_ what: StaticString) throws(WireError) -> IPv6Address {
        try self.require(16, what)
        var high: UInt64 = 0
        var low: UInt64 = 0
        for i in 0..<8 { high = high << 8 | UInt64(self.bytes[self.position + i]) }
        for i in 8..<16 { low = low << 8 | UInt64(self.bytes[self.position + i]) }
        self.position += 16
        return IPv6Address(high: high, low: low)
    }
}
