import NIOCore
import SleepProxyWire

extension IPAddress {
    /// The address of an IPv4 or IPv6 `SocketAddress` (scope and port dropped).
    public init?(_ socketAddress: SocketAddress) {
        switch socketAddress {
        case .v4(let v4):
            self = .v4(IPv4Address(rawValue: UInt32(bigEndian: v4.address.sin_addr.s_addr)))
        case .v6(let v6):
            var storage = v6.address.sin6_addr
            let bytes = withUnsafeBytes(of: &storage) { Array($0) }
            guard let address = IPv6Address(bytes: bytes) else { return nil }
            self = .v6(address)
        case .unixDomainSocket:
            return nil
        }
    }

    var isV4: Bool {
        if case .v4 = self { return true }
        return false
    }
}
