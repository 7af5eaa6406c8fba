import CSleepProxyLinux
import FoundationEssentials
import SleepProxyCore
import SleepProxyWire

#if canImport(Glibc)
    import Glibc
#endif

/// The proxy's view of the machine's interfaces: names, indexes, MACs and prefixes, read from the kernel.
public struct InterfaceInventory: Sendable {
    public typealias Interface = NetworkInterface

    public private(set) var interfaces: [Interface]

    public init(interfaces: [Interface]) { self.interfaces = interfaces }

    /// Reads every interface with its addresses, MAC and flags from one getifaddrs call (its AF_PACKET entries,
    /// unlike /sys/class/net, describe the network namespace the process is in).
    public static func read() throws -> InterfaceInventory {
        var first: UnsafeMutablePointer<ifaddrs>? = nil
        guard getifaddrs(&first) == 0 else {
            throw InterfaceInventoryError(
                description: "cannot list the interfaces: \(String(cString: strerror(errno)))")
        }
        defer { freeifaddrs(first) }
        var byName: [String: Interface] = [:]
        var entry = first
        while let current = entry {
            defer { entry = current.pointee.ifa_next }
            guard let namePointer = current.pointee.ifa_name else { continue }
            let name = String(cString: namePointer)
            let flags = current.pointee.ifa_flags
            if byName[name] == nil {
                byName[name] = Interface(
                    context: InterfaceContext(
                        name: name, index: Int(if_nametoindex(namePointer)), macAddress: .zero, prefixes: []),
                    isUp: flags & UInt32(Self.flagUp) != 0, isLoopback: flags & UInt32(Self.flagLoopback) != 0,
                    supportsMulticast: flags & UInt32(Self.flagMulticast) != 0)
            }
            guard let address = current.pointee.ifa_addr else { continue }
            switch Int32(address.pointee.sa_family) {
            case AF_PACKET:
                let mac = address.withMemoryRebound(to: sockaddr_ll.self, capacity: 1) { link -> MACAddress? in
                    guard link.pointee.sll_halen == 6 else { return nil }
                    return withUnsafeBytes(of: link.pointee.sll_addr) { MACAddress(bytes: Array($0.prefix(6))) }
                }
                if let mac { byName[name]!.context.macAddress = mac }
            case AF_INET, AF_INET6:
                if let prefix = Self.prefix(address: address, netmask: current.pointee.ifa_netmask) {
                    byName[name]!.context.prefixes.append(prefix)
                }
            default:
                break
            }
        }
        return InterfaceInventory(
            interfaces: byName.values.filter { $0.context.index > 0 }.sorted { $0.context.index < $1.context.index })
    }

    /// `IFF_UP`, `IFF_LOOPBACK`, `IFF_MULTICAST` from <net/if.h> (their Swift import type depends on which
    /// header is seen first, docs/linux.md §4, so the values are written here).
    static let flagUp = 0x1
    static let flagLoopback = 0x8
    static let flagMulticast = 0x1000

    public func interface(index: Int) -> Interface? { self.interfaces.first { $0.context.index == index } }
    public func interface(named name: String) -> Interface? { self.interfaces.first { $0.context.name == name } }

    /// The interfaces a proxy or a client uses when none is named (`NetworkInterface.served`).
    public var defaultServed: [InterfaceContext] { NetworkInterface.served(from: self.interfaces, named: []) }

    /// The address and prefix length of an AF_INET or AF_INET6 entry.
    static func prefix(address: UnsafeMutablePointer<sockaddr>, netmask: UnsafeMutablePointer<sockaddr>?) -> IPPrefix? {
        guard let ip = Self.ip(address) else { return nil }
        var length = ip.isV4 ? 32 : 128
        if let netmask, let mask = Self.ip(netmask, family: address.pointee.sa_family) {
            switch mask {
            case .v4(let v4): length = v4.rawValue.nonzeroBitCount
            case .v6(let v6): length = v6.high.nonzeroBitCount + v6.low.nonzeroBitCount
            }
        }
        return IPPrefix(ip, length: length)
    }

    /// The address in a sockaddr (a netmask's family may be left unset; `family` then says what it is).
    static func ip(_ pointer: UnsafeMutablePointer<sockaddr>, family: sa_family_t? = nil) -> IPAddress? {
        switch Int32(family ?? pointer.pointee.sa_family) {
        case AF_INET:
            return pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) {
                .v4(IPv4Address(rawValue: UInt32(bigEndian: $0.pointee.sin_addr.s_addr)))
            }
        case AF_INET6:
            return pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { v6 in
                var storage = v6.pointee.sin6_addr
                return withUnsafeBytes(of: &storage) { IPv6Address(bytes: Array($0)) }.map(IPAddress.v6)
            }
        default:
            return nil
        }
    }
}

public struct InterfaceInventoryError: Error, CustomStringConvertible {
    public var description: String
}

extension IPAddress {
    var isV4: Bool {
        if case .v4 = self { return true }
        return false
    }
}
