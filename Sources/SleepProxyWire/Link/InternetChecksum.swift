/// The RFC 1071 Internet checksum: the ones' complement of the ones' complement sum of 16-bit words.
///
/// Used for the IPv4 header (RFC 791), and with a pseudo-header for ICMPv6 (RFC 4443 §2.3, RFC 8200 §8.1),
/// TCP and UDP. Feed every part of the covered data in order, then read `value`.
public struct InternetChecksum: Sendable {
    private var sum: UInt32 = 0
    private var odd: UInt8? = nil

    public init() {}

    public mutating func add<C: Collection>(_ bytes: C) where C.Element == UInt8 {
        for byte in bytes {
            if let high = self.odd {
                self.sum &+= UInt32(high) << 8 | UInt32(byte)
                self.odd = nil
            } else {
                self.odd = byte
            }
        }
    }

    public mutating func add(_ word: UInt16) { self.add([UInt8(word >> 8), UInt8(truncatingIfNeeded: word)]) }

    public mutating func add(_ word: UInt32) {
        self.add(UInt16(word >> 16))
        self.add(UInt16(truncatingIfNeeded: word))
    }

    /// The checksum to place in the header. Over data that already holds a correct checksum it is 0.
    public var value: UInt16 {
        var total = self.sum
        if let high = self.odd { total &+= UInt32(high) << 8 }
        while total > 0xFFFF { total = (total & 0xFFFF) + (total >> 16) }
        return ~UInt16(total)
    }

    /// RFC 8200 §8.1 upper-layer checksum over the IPv6 pseudo-header and `payload`.
    public static func ipv6(
        source: IPv6Address, destination: IPv6Address, nextHeader: UInt8, payload: some Collection<UInt8>
    ) -> UInt16 {
        var checksum = InternetChecksum()
        checksum.add(source.bytes)
        checksum.add(destination.bytes)
        checksum.add(UInt32(payload.count))
        checksum.add(UInt32(nextHeader))
        checksum.add(payload)
        return checksum.value
    }

    /// RFC 793 §3.1 / RFC 768 checksum over the IPv4 pseudo-header and `payload`.
    public static func ipv4(
        source: IPv4Address, destination: IPv4Address, protocol proto: UInt8, payload: some Collection<UInt8>
    ) -> UInt16 {
        var checksum = InternetChecksum()
        checksum.add(source.rawValue)
        checksum.add(destination.rawValue)
        checksum.add(UInt16(proto))
        checksum.add(UInt16(payload.count))
        checksum.add(payload)
        return checksum.value
    }
}
