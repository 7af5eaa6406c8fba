/// A Wake-on-LAN "SecureOn" password: 4 or 6 bytes appended to a magic packet (AMD Magic Packet white paper;
/// `ethtool -s IF sopass`). The Owner option carries it in its 18- and 20-byte forms (docs/protocol.md §3.3).
public struct SecureOnPassword: Hashable, Sendable, CustomStringConvertible {
    /// The two lengths NICs accept: a 4-byte (IPv4-address-like) or 6-byte (MAC-like) password.
    public static let allowedLengths: Set<Int> = [4, 6]

    public let bytes: [UInt8]

    public init?(bytes: [UInt8]) {
        guard SecureOnPassword.allowedLengths.contains(bytes.count) else { return nil }
        self.bytes = bytes
    }

    /// Parses "aa:bb:cc:dd:ee:ff" (6 bytes) or "a.b.c.d" (4 bytes), the forms ethtool uses.
    public init?(_ text: String) {
        if let mac = MACAddress(text) {
            self.bytes = mac.bytes
        } else if let v4 = IPv4Address(text) {
            self.bytes = v4.bytes
        } else {
            return nil
        }
    }

    public var isAllZero: Bool { self.bytes.allSatisfy { $0 == 0 } }

    /// Passwords are secrets: never print them in full.
    public var description: String { "<\(self.bytes.count)-byte password>" }
}
