import NIOCore

/// A Wake-on-LAN magic packet (AMD "Magic Packet Technology" white paper, 1995): six 0xFF bytes, then the
/// target MAC sixteen times, then an optional 4- or 6-byte SecureOn password.
///
/// It travels as the payload of an EtherType 0x0842 frame (what Apple's proxy sends, docs/protocol.md §4.6) or of a
/// UDP datagram, usually to port 9. Matching is strict: the sync stream must be followed by exactly sixteen
/// copies of one MAC, because a looser match woke devices on ordinary DHCP traffic (standards.md §1.8).
public struct MagicPacket: Hashable, Sendable {
    public static let syncByteCount = 6
    public static let macRepetitions = 16
    /// 6 + 16 × 6.
    public static let baseLength = syncByteCount + macRepetitions * MACAddress.byteCount
    /// The discard port, the customary UDP destination for magic packets.
    public static let udpPort: UInt16 = 9

    public var target: MACAddress
    /// Nil: no trailer at all. Apple always appends six bytes, zero when no password was registered, which some
    /// NICs refuse (Aquantia/AQtion#14); callers choose.
    public var password: SecureOnPassword?

    public init(target: MACAddress, password: SecureOnPassword? = nil) {
        self.target = target
        self.password = password
    }

    public var payload: [UInt8] {
        var bytes = [UInt8](repeating: 0xFF, count: MagicPacket.syncByteCount)
        bytes.reserveCapacity(MagicPacket.baseLength + 6)
        let mac = self.target.bytes
        for _ in 0..<MagicPacket.macRepetitions { bytes += mac }
        if let password = self.password { bytes += password.bytes }
        return bytes
    }

    /// Parses a payload that is exactly a magic packet (102, 106 or 108 bytes); anything else throws.
    public init<C: Collection>(payload: C) throws(WireError) where C.Element == UInt8, C.Index == Int {
        let bytes = Array(payload)
        let trailer = bytes.count - MagicPacket.baseLength
        guard trailer == 0 || SecureOnPassword.allowedLengths.contains(trailer) else {
            throw WireError(.badHeader, at: 0, "\(bytes.count) bytes is not a magic packet length (102, 106, 108)")
        }
        guard let target = MagicPacket.matchBody(bytes, at: 0) else {
            throw WireError(.badHeader, at: 0, "no sync stream followed by 16 copies of one MAC")
        }
        self.target = target
        self.password = trailer == 0 ? nil : SecureOnPassword(bytes: Array(bytes[MagicPacket.baseLength...]))
    }

    /// Finds a magic packet anywhere in `bytes`, as a NIC does; the password is not recoverable this way.
    public static func search(in bytes: [UInt8]) -> MACAddress? {
        guard bytes.count >= baseLength else { return nil }
        for start in 0...(bytes.count - baseLength) where bytes[start] == 0xFF {
            if let mac = matchBody(bytes, at: start) { return mac }
        }
        return nil
    }

    private static func matchBody(_ bytes: [UInt8], at start: Int) -> MACAddress? {
        guard bytes.count - start >= baseLength else { return nil }
        for i in start..<start + syncByteCount where bytes[i] != 0xFF { return nil }
        let first = start + syncByteCount
        for copy in 1..<macRepetitions {
            let base = first + copy * MACAddress.byteCount
            for i in 0..<MACAddress.byteCount where bytes[base + i] != bytes[first + i] { return nil }
        }
        return MACAddress(bytes: bytes[first..<first + MACAddress.byteCount])
    }

    /// The EtherType 0x0842 frame. `source` must be the sender's real MAC (docs/protocol.md §4.3 on Apple's bug).
    public func frame(destination: MACAddress, source: MACAddress) -> EthernetFrame {
        EthernetFrame(
            destination: destination, source: source, etherType: .wakeOnLAN, payload: ByteBuffer(bytes: self.payload))
    }
}
