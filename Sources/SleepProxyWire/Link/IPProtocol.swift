/// An IP protocol number (IPv4 Protocol, IPv6 Next Header; IANA "Assigned Internet Protocol Numbers").
public struct IPProtocol: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let hopByHop = IPProtocol(rawValue: 0)
    public static let icmp = IPProtocol(rawValue: 1)
    public static let tcp = IPProtocol(rawValue: 6)
    public static let udp = IPProtocol(rawValue: 17)
    public static let routing = IPProtocol(rawValue: 43)
    public static let fragment = IPProtocol(rawValue: 44)
    public static let esp = IPProtocol(rawValue: 50)
    public static let authentication = IPProtocol(rawValue: 51)
    public static let icmpv6 = IPProtocol(rawValue: 58)
    public static let noNextHeader = IPProtocol(rawValue: 59)
    public static let destinationOptions = IPProtocol(rawValue: 60)

    public var description: String {
        switch self {
        case .icmp: return "ICMP"
        case .tcp: return "TCP"
        case .udp: return "UDP"
        case .icmpv6: return "ICMPv6"
        default: return "proto \(self.rawValue)"
        }
    }
}
