import SleepProxyWire

/// An address with its prefix length, as configured on one of the proxy's interfaces.
public struct IPPrefix: Hashable, Sendable, CustomStringConvertible {
    public var address: IPAddress
    public var length: Int

    public init(_ address: IPAddress, length: Int) {
        self.address = address
        self.length = length
    }

    public init?(_ text: String) {
        let parts = text.split(separator: "/", maxSplits: 1)
        guard let address = IPAddress(String(parts[0])) else { return nil }
        let maximum: Int
        switch address {
        case .v4: maximum = 32
        case .v6: maximum = 128
        }
        if parts.count == 2 {
            guard let length = Int(parts[1]), (0...maximum).contains(length) else { return nil }
            self.length = length
        } else {
            self.length = maximum
        }
        self.address = address
    }

    public func contains(_ other: IPAddress) -> Bool {
        switch (self.address, other) {
        case (.v4(let mine), .v4(let theirs)): return mine.isInSameSubnet(as: theirs, prefixLength: self.length)
        case (.v6(let mine), .v6(let theirs)): return mine.isInSameSubnet(as: theirs, prefixLength: self.length)
        default: return false
        }
    }

    public var description: String { "\(self.address)/\(self.length)" }
}

/// What the proxy knows about the interface a packet arrived on. The I/O layer fills it from the kernel; the
/// core uses it to decide what is on-link and what is the proxy's own.
public struct InterfaceContext: Hashable, Sendable {
    public var name: String
    public var index: Int
    public var macAddress: MACAddress
    /// The proxy's own addresses on this interface, with their prefix lengths.
    public var prefixes: [IPPrefix]

    public init(name: String, index: Int, macAddress: MACAddress, prefixes: [IPPrefix]) {
        self.name = name
        self.index = index
        self.macAddress = macAddress
        self.prefixes = prefixes
    }

    /// RFC 6762 §11 / §5.5 on-link test: inside one of the interface's prefixes, or IPv6 link-local (always
    /// on-link on the interface it arrived on). IPv4 link-local (RFC 3927) counts only through a 169.254 prefix
    /// on the interface.
    public func isOnLink(_ address: IPAddress) -> Bool {
        if case .v6(let v6) = address, v6.isLinkLocal { return true }
        return self.prefixes.contains { $0.contains(address) }
    }

    public func isOwnAddress(_ address: IPAddress) -> Bool {
        self.prefixes.contains { $0.address == address }
    }

    /// Whether the kernel will send a unicast datagram to `address`:`port` from a socket without SO_BROADCAST.
    /// A datagram's source can say otherwise (port 0 through a raw socket; a subnet's broadcast address where
    /// the kernel does not check sources), and the refusal (EINVAL, EACCES) of the reply would close the socket
    /// that took the datagram (docs/linux.md §1.10): such a datagram gets no reply.
    public func acceptsReply(to address: IPAddress, port: UInt16) -> Bool {
        guard port != 0 else { return false }
        switch address {
        case .v4(let v4):
            guard v4 != .any, v4.rawValue != UInt32.max, !v4.isMulticast else { return false }
            return !self.prefixes.contains { prefix in
                guard case .v4(let own) = prefix.address, prefix.length < 31 else { return false }
                let hostBits = UInt32.max >> UInt32(prefix.length)
                return prefix.contains(address) && v4.rawValue & hostBits == hostBits && own != v4
            }
        case .v6(let v6):
            return !v6.isUnspecified && !v6.isMulticast
        }
    }
}

/// An interface as the kernel lists it, with the flags that decide whether the proxy serves it.
public struct NetworkInterface: Hashable, Sendable {
    public var context: InterfaceContext
    public var isUp: Bool
    public var isLoopback: Bool
    public var supportsMulticast: Bool

    public init(context: InterfaceContext, isUp: Bool, isLoopback: Bool, supportsMulticast: Bool) {
        self.context = context
        self.isUp = isUp
        self.isLoopback = isLoopback
        self.supportsMulticast = supportsMulticast
    }

    /// The interfaces the proxy serves (`--interface`): those named in the configuration and up,
    /// or, when none are named, every interface that is up, can multicast and is not loopback. mDNS and the
    /// takeover need multicast and a link of their own; a named interface is trusted to have them.
    public static func served(from interfaces: [NetworkInterface], named names: [String]) -> [InterfaceContext] {
        if names.isEmpty {
            return interfaces.filter { $0.isUp && $0.supportsMulticast && !$0.isLoopback }.map(\.context)
        }
        return interfaces.filter { $0.isUp && names.contains($0.context.name) }.map(\.context)
    }
}
