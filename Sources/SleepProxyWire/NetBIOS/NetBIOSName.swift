/// A NetBIOS name (RFC 1001 §14, RFC 1002 §4.1): up to 15 characters padded with spaces, then a suffix byte that
/// says what the name is for (`<00>` workstation, `<20>` file server, `<1e>` browser election of a group).
/// Names compare upper-cased: Windows and Samba register and ask them so (docs/windows.md §1).
public struct NetBIOSName: Hashable, Sendable, CustomStringConvertible {
    /// The 15 name bytes, upper-cased ASCII, padded with spaces.
    public private(set) var padded: [UInt8]
    public var suffix: UInt8

    /// RFC 1001 §14.1: 15 characters and the suffix.
    public static let nameLength = 15
    /// The first-level encoded form is one label of 32 characters (each nibble plus 'A').
    public static let encodedLength = 32

    /// Nil for an empty name or one longer than 15 bytes.
    public init?(_ name: String, suffix: UInt8) {
        let bytes = Array(name.utf8)
        guard !bytes.isEmpty, bytes.count <= Self.nameLength else { return nil }
        self.init(padding: bytes, suffix: suffix)
    }

    /// From the 16 raw bytes of a node-status entry or a decoded name.
    public init(raw: ArraySlice<UInt8>) {
        precondition(raw.count == Self.nameLength + 1, "callers slice 16 bytes")
        self.init(padding: Array(raw.prefix(Self.nameLength)), suffix: raw.last!)
    }

    private init(padding bytes: [UInt8], suffix: UInt8) {
        var padded = bytes.map { (0x61...0x7A).contains($0) ? $0 - 0x20 : $0 }
        padded += [UInt8](repeating: 0x20, count: Self.nameLength - padded.count)
        self.padded = padded
        self.suffix = suffix
    }

    /// The name without its padding (spaces and NULs).
    public var name: String {
        var bytes = self.padded[...]
        while let last = bytes.last, last == 0x20 || last == 0 { bytes = bytes.dropLast() }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `*` and 15 NULs: the name a node-status query asks (RFC 1002 §4.2.17).
    public static let wildcard: NetBIOSName = {
        var name = NetBIOSName(padding: [0x2A], suffix: 0)
        name.padded = [0x2A] + [UInt8](repeating: 0, count: nameLength - 1)
        return name
    }()

    public var description: String {
        let hex = String(self.suffix, radix: 16)
        return "\(self.name)<\(hex.count == 1 ? "0" + hex : hex)>"
    }

    /// The 32-character label of RFC 1001 §14.1 (without its length byte).
    public var firstLevelEncoded: [UInt8] {
        var result: [UInt8] = []
        result.reserveCapacity(Self.encodedLength)
        for byte in self.padded + [self.suffix] {
            result.append(0x41 + (byte >> 4))
            result.append(0x41 + (byte & 0x0F))
        }
        return result
    }

    /// The reverse of `firstLevelEncoded`; nil when a character is outside 'A'...'P'.
    public init?(firstLevelEncoded label: some Collection<UInt8>) {
        guard label.count == Self.encodedLength else { return nil }
        var raw: [UInt8] = []
        raw.reserveCapacity(Self.nameLength + 1)
        var iterator = label.makeIterator()
        while let high = iterator.next(), let low = iterator.next() {
            guard (0x41...0x50).contains(high), (0x41...0x50).contains(low) else { return nil }
            raw.append((high - 0x41) << 4 | (low - 0x41))
        }
        self.init(padding: Array(raw.prefix(Self.nameLength)), suffix: raw[Self.nameLength])
    }
}
