import SleepProxyWire

/// The TCP connection state an Apple client hands over in a keepalive NULL record (docs/protocol.md §6):
/// RDATA is a length byte, then `t=<timeout> i=30 c=10 h=<laddr> d=<raddr> l=<lport> r=<rport> m=<MAC> s=<seq>
/// a=<ack> w=<win>`, then a NUL. IPv6 uses `H=` and `D=`. Parsing stops at the first unknown key, as Apple's does.
public struct KeepaliveInfo: Hashable, Sendable {
    public var timeout: UInt32?
    public var localAddress: IPAddress?
    public var remoteAddress: IPAddress?
    public var localPort: UInt16?
    public var remotePort: UInt16?
    public var remoteMAC: MACAddress?
    public var sequence: UInt32?
    public var acknowledgement: UInt32?
    public var window: UInt16?

    /// Usable only with every field Apple's proxy requires non-zero (docs/protocol.md §6).
    public var isComplete: Bool {
        (self.timeout ?? 0) != 0 && self.localAddress != nil && self.remoteAddress != nil && (self.localPort ?? 0) != 0
            && (self.remotePort ?? 0) != 0 && (self.sequence ?? 0) != 0 && (self.acknowledgement ?? 0) != 0
            && (self.window ?? 0) != 0
    }

    init?(rdata: [UInt8]) {
        guard let length = rdata.first, Int(length) + 1 <= rdata.count, length > 0 else { return nil }
        var text = rdata[1..<1 + Int(length)]
        if text.last == 0 { text = text.dropLast() }
        guard text.allSatisfy({ $0 >= 0x20 && $0 < 0x7F }) else { return nil }
        for field in String(decoding: text, as: UTF8.self).split(separator: " ") {
            let parts = field.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, parts[0].count == 1 else { break }
            let value = String(parts[1])
            switch parts[0] {
            case "t": self.timeout = UInt32(value)
            case "i", "c": continue  // parsed but ignored by Apple's proxy too
            case "h", "H": self.localAddress = IPAddress(value)
            case "d", "D": self.remoteAddress = IPAddress(value)
            case "l": self.localPort = UInt16(value)
            case "r": self.remotePort = UInt16(value)
            case "m": self.remoteMAC = MACAddress(value)
            case "s": self.sequence = UInt32(value)
            case "a": self.acknowledgement = UInt32(value)
            case "w": self.window = UInt16(value)
            default: return
            }
        }
    }
}
