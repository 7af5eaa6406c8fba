import Foundation
import NIOCore
import NIOPosix
import SleepProxyCore
import SleepProxyWire
import CSleepProxyLinux

#if canImport(Glibc)
import Glibc
#endif

/// The proxy's view of the machine's interfaces: names, indexes, MACs and prefixes, read from the kernel.
public struct InterfaceInventory: Sendable {
    public struct Interface: Sendable {
        public var context: InterfaceContext
        public var isUp: Bool
        public var isLoopback: Bool
        public var supportsMulticast: Bool
    }

    public private(set) var interfaces: [Interface]

    public init(interfaces: [Interface]) { self.interfaces = interfaces }

    /// Reads every interface with its addresses (getifaddrs through NIO) and its MAC and flags (getifaddrs'
    /// AF_PACKET entries: unlike /sys/class/net, they describe the network namespace the process is in).
    public static func read() throws -> InterfaceInventory {
        var byName: [String: Interface] = [:]
        let links = Self.links()
        for device in try System.enumerateDevices() {
            let name = device.name
            if byName[name] == nil {
                let flags = Int(links[name]?.flags ?? 0)
                byName[name] = Interface(
                    context: InterfaceContext(name: name, index: device.interfaceIndex, macAddress: links[name]?.mac ?? .zero, prefixes: []),
                    isUp: flags & 0x1 != 0,
                    isLoopback: flags & 0x8 != 0,
                    supportsMulticast: device.multicastSupported
                )
            }
            if let prefix = Self.prefix(address: device.address, netmask: device.netmask) {
                byName[name]!.context.prefixes.append(prefix)
            }
        }
        return InterfaceInventory(interfaces: byName.values.sorted { $0.context.index < $1.context.index })
    }

    public func interface(index: Int) -> Interface? { self.interfaces.first { $0.context.index == index } }
    public func interface(named name: String) -> Interface? { self.interfaces.first { $0.context.name == name } }

    /// The interfaces to serve when none are configured: up, multicast-capable, not loopback.
    public var defaultServed: [Interface] {
        self.interfaces.filter { $0.isUp && $0.supportsMulticast && !$0.isLoopback }
    }

    /// Each interface's flags and hardware address, from getifaddrs' AF_PACKET entries.
    static func links() -> [String: (flags: UInt32, mac: MACAddress?)] {
        var first: UnsafeMutablePointer<ifaddrs>? = nil
        guard getifaddrs(&first) == 0 else { return [:] }
        defer { freeifaddrs(first) }
        var result: [String: (flags: UInt32, mac: MACAddress?)] = [:]
        var entry = first
        while let current = entry {
            defer { entry = current.pointee.ifa_next }
            guard let address = current.pointee.ifa_addr, address.pointee.sa_family == UInt16(AF_PACKET), let namePointer = current.pointee.ifa_name else { continue }
            let name = String(cString: namePointer)
            let mac = address.withMemoryRebound(to: sockaddr_ll.self, capacity: 1) { link -> MACAddress? in
                guard link.pointee.sll_halen == 6 else { return nil }
                return withUnsafeBytes(of: link.pointee.sll_addr) { MACAddress(bytes: Array($0.prefix(6))) }
            }
            result[name] = (current.pointee.ifa_flags, mac)
        }
        return result
    }

    static func prefix(address: SocketAddress?, netmask: SocketAddress?) -> IPPrefix? {
        guard let address, let ip = IPAddress(address) else { return nil }
        var length = 0
        if let netmask, let mask = IPAddress(netmask) {
            switch mask {
            case .v4(let v4): length = v4.rawValue.nonzeroBitCount
            case .v6(let v6): length = v6.high.nonzeroBitCount + v6.low.nonzeroBitCount
            }
        } else {
            length = ip.isV4 ? 32 : 128
        }
        return IPPrefix(ip, length: length)
    }
}

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
