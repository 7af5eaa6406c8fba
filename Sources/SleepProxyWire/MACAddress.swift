/// A 48-bit IEEE 802 MAC address.
///
/// Stored as the low 48 bits of a `UInt64` so that it hashes and compares as one integer; the record store and
/// the packet path look MACs up on every frame.
public struct MACAddress: Hashable, Sendable, Comparable, CustomStringConvertible {
    public let rawValue: UInt64

    public static let byteCount = 6
    public static let broadcast = MACAddress(rawValue: 0xFFFF_FFFF_FFFF)
    public static let zero = MACAddress(rawValue: 0)

    public init(rawValue: UInt64) {
        self.rawValue = rawValue & 0xFFFF_FFFF_FFFF
    }

    /// Builds a MAC from exactly six bytes; returns nil for any other count.
    public init?<C: Collection>(bytes: C) where C.Element == UInt8 {
        guard bytes.count == MACAddress.byteCount else { return nil }
        var value: UInt64 = 0
        for byte in bytes { value = value << 8 | UInt64(byte) }
        self.rawValue = value
    }

    /// Parses `aa:bb:cc:dd:ee:ff` or `aa-bb-cc-dd-ee-ff` (either case).
    public init?(_ text: String) {
        let parts = text.split(separator: ":", omittingEmptySubsequences: false)
        let groups = parts.count == 6 ? parts : text.split(separator: "-", omittingEmptySubsequences: false)
        guard groups.count == 6 else { return nil }
        var value: UInt64 = 0
        for group in groups {
            guard (1...2).contains(group.utf8.count), let byte = UInt8(group, radix: 16) else { return nil }
            value = value << 8 | UInt64(byte)
        }
        self.rawValue = value
    }

    public var bytes: [UInt8] {
        (0..<6).map { UInt8(truncatingIfNeeded: self.rawValue >> (40 - 8 * UInt64($0))) }
    }

    /// The group bit (I/G) of the first octet: set for multicast and broadcast destinations.
    public var isMulticast: Bool { (self.rawValue >> 40) & 0x01 != 0 }
    public var isBroadcast: Bool { self == .broadcast }

    public var description: String {
        self.bytes.map { byte in
            let hex = String(byte, radix: 16)
            return byte < 0x10 ? "0" + hex : hex
        }.joined(separator: ":")
    }

    public static func < (lhs: MACAddress, rhs: MACAddress) -> Bool { lhs.rawValue < rhs.rawValue }
}

extension ByteReader {
    @inlinable
    mutating func readMAC(_ what: StaticString) throws(WireError) -> MACAddress {
        try self.require(6, what)
        var value: UInt64 = 0
        for i in 0..<6 { value = value << 8 | UInt64(self.bytes[self.position + i]) }
        self.position += 6
        return MACAddress(rawValue: value)
    }
}
