import CSleepProxyLinux
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import SleepProxyCore
import SleepProxySystem
import SleepProxyWire
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The sockets of one multicast protocol (mDNS, SSDP): one per served interface and address family, bound to the
/// protocol's port beside any other program using it (SO_REUSEADDR + SO_REUSEPORT: avahi-daemon, minidlna), each
/// joined to its group on its own interface only (IP_MULTICAST_ALL off, docs/linux.md §1.5). The engine thread
/// reads them itself (`receive`), with the interface and destination from packet info; NIO writes what the engine
/// cannot send at once.
public final class MulticastSockets: Sendable {
    struct Key: Hashable, Sendable {
        var interfaceIndex: Int
        var family: IPFamily
    }

    struct Channels: Sendable {
        var listener: Channel
        var sender: Channel?
        /// Second descriptors of the listener's and the sender's sockets, for the engine thread's own reads
        /// (`receive`) and sends (`send`). Ours to close; the channels keep their own.
        var listenerSocket: CInt
        var senderSocket: CInt = -1

        var all: [Channel] { [self.listener] + (self.sender.map { [$0] } ?? []) }
        /// The socket sends leave from: the sender's, else the listener's.
        var replySocket: CInt { self.senderSocket >= 0 ? self.senderSocket : self.listenerSocket }
        /// Both take datagrams: the listener the group's, the sender the answers to the proxy's own searches.
        var receiving: [CInt] {
            self.senderSocket >= 0 ? [self.listenerSocket, self.senderSocket] : [self.listenerSocket]
        }

        func close() {
            for channel in self.all { _ = channel.close() }
            for socket in self.receiving where socket >= 0 { Glibc.close(socket) }
        }
    }

    /// At most this many datagrams are read from one socket at one look (`receive`), so that a device flooding one
    /// socket holds the engine from the rest of its work for a bounded time; the rest wait in the kernel's buffer,
    /// whose overflow the kernel counts (SO_RXQ_OVFL, `droppedByKernel`). The mailbox's lanes bound them again
    /// (`EngineRunner.mailboxCapacity`). Ours, sized so that one look at a 1,000-a-second storm (its backlog after
    /// a 50 ms batch) takes it whole.
    static let receiveBurst = 64
    /// Internal rather than private for the tests, which close a channel behind our back.
    let channels: NIOLockedValueBox<[Key: Channels]> = NIOLockedValueBox([:])
    private let group: EventLoopGroup
    private let logger: Logger
    let profile: MulticastProfile
    let sink: @Sendable (EngineRunner.Event) -> Void
    let deferred = Atomic<Int>(0)
    let failed = Atomic<Int>(0)
    private let reopenedCount = Atomic<Int>(0)
    /// Each socket's last drop count from the kernel (SO_RXQ_OVFL), and their sum since the sockets opened.
    let kernelDrops = NIOLockedValueBox<[CInt: UInt32]>([:])
    let kernelDropped = Atomic<Int>(0)

    /// Unicast datagrams the engine thread could not send itself and left to the event loops (`send`): a full
    /// socket buffer (datagrams waiting in the kernel for a neighbour that never answers ARP or NDP fill it too)
    /// (`sleepproxy_unicast_sends_deferred_total`, docs/scale.md).
    var deferredUnicastSends: Int { self.deferred.load(ordering: .relaxed) }
    /// Unicast datagrams the kernel refused outright (no route, a firewall's EPERM, a broadcast address without
    /// SO_BROADCAST): dropped, never handed to NIO, which would close the socket over them.
    var failedUnicastSends: Int { self.failed.load(ordering: .relaxed) }
    /// Sockets that closed under us and were opened again (`serve`).
    var reopened: Int { self.reopenedCount.load(ordering: .relaxed) }
    /// Datagrams the kernel dropped because a socket's receive buffer was full (`sleepproxy_datagrams_dropped_total`).
    var droppedByKernel: Int { self.kernelDropped.load(ordering: .relaxed) }

    /// Our descriptors of every socket that takes datagrams, for the engine thread's poll.
    var receivingSockets: [CInt] { self.channels.withLockedValue { $0.values.flatMap(\.receiving) } }

    init(
        _ profile: MulticastProfile, group: EventLoopGroup = MultiThreadedEventLoopGroup.singleton, logger: Logger,
        sink: @escaping @Sendable (EngineRunner.Event) -> Void
    ) {
        self.profile = profile
        self.group = group
        self.logger = logger
        self.sink = sink
    }

    /// Opens sockets for interfaces not yet served and closes those of interfaces gone. Blocking (called from
    /// the engine thread, never from an event loop).
    func serve(_ interfaces: [InterfaceContext]) {
        let wanted = Set(
            interfaces.flatMap { context in
                Responder.families(of: context).map { Key(interfaceIndex: context.index, family: $0) }
            })
        var current = self.channels.withLockedValue { $0 }
        for (key, channels) in current where !wanted.contains(key) {
            self.channels.withLockedValue { $0[key] = nil }
            self.forgetDrops(of: channels)
            channels.close()
        }
        // A channel NIO closed under us (a write error, `watchClosure`) is opened again; until then its
        // interface is deaf over that family.
        for (key, channels) in current where wanted.contains(key) && !channels.all.allSatisfy(\.isActive) {
            self.channels.withLockedValue { $0[key] = nil }
            self.forgetDrops(of: channels)
            channels.close()
            current[key] = nil
            self.reopenedCount.add(1, ordering: .relaxed)
        }
        let devices = (try? System.enumerateDevices()) ?? []
        for context in interfaces {
            for family in Responder.families(of: context)
            where current[Key(interfaceIndex: context.index, family: family)] == nil {
                let name = self.profile.name
                do {
                    let listener = try self.open(context: context, family: family, devices: devices, listening: true)
                    var channels = Channels(listener: listener.channel, listenerSocket: listener.socket)
                    if self.profile.separateSender {
                        do {
                            let sender = try self.open(
                                context: context, family: family, devices: devices, listening: false)
                            channels.sender = sender.channel
                            channels.senderSocket = sender.socket
                        } catch {
                            channels.close()
                            throw error
                        }
                    }
                    let key = Key(interfaceIndex: context.index, family: family)
                    self.channels.withLockedValue { $0[key] = channels }
                    for channel in channels.all { self.watchClosure(of: channel, key: key, interface: context.name) }
                    self.logger.info("\(name): answering on \(context.name) over \(family)")
                } catch {
                    self.logger.warning("\(name): cannot use \(context.name) over \(family): \(error)")
                }
            }
        }
    }

    /// NIO closes a datagram channel on any write error but EMSGSIZE and EHOSTUNREACH (docs/linux.md §1.10; a
    /// multicast while the interface loses its address, say). A channel that closes while it is still ours was not closed by us:
    /// the engine is asked to open it again (`serve`), so that the interface does not stay deaf.
    private func watchClosure(of channel: Channel, key: Key, interface: String) {
        let identifier = ObjectIdentifier(channel)
        let name = self.profile.name
        channel.closeFuture.whenComplete { [self] _ in
            let ours = self.channels.withLockedValue { channels in
                channels[key].map { $0.all.contains { ObjectIdentifier($0) == identifier } } ?? false
            }
            guard ours else { return }
            self.logger.warning("\(name): the socket on \(interface) over \(key.family) closed; opening it again")
            self.sink(.multicastSocketClosed)
        }
    }

    /// A socket bound to the wildcard address beside any other program on the port (SO_REUSEADDR +
    /// SO_REUSEPORT), IPv4 kept out of an IPv6 one (docs/linux.md §1.1–1.2). Made here rather than by the
    /// bootstrap so that the engine can keep a descriptor of it (`Channels.replySocket`).
    static func boundSocket(family: IPFamily, port: UInt16) throws -> CInt {
        let fd = try retryingSyscall("socket") {
            socket(family == .v4 ? AF_INET : AF_INET6, PosixSocket.datagram | PosixSocket.closeOnExec, 0)
        }
        do {
            var on: CInt = 1
            let size = socklen_t(MemoryLayout<CInt>.size)
            _ = try retryingSyscall("setsockopt(SO_REUSEADDR)") { setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, size) }
            _ = try retryingSyscall("setsockopt(SO_REUSEPORT)") { setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, size) }
            if family == .v6 {
                _ = try retryingSyscall("setsockopt(IPV6_V6ONLY)") {
                    setsockopt(fd, CInt(IPPROTO_IPV6), IPV6_V6ONLY, &on, size)
                }
                _ = try retryingSyscall("setsockopt(IPV6_RECVPKTINFO)") {
                    setsockopt(fd, CInt(IPPROTO_IPV6), IPV6_RECVPKTINFO, &on, size)
                }
            } else {
                _ = try retryingSyscall("setsockopt(IP_PKTINFO)") {
                    setsockopt(fd, CInt(IPPROTO_IP), IP_PKTINFO, &on, size)
                }
            }
            _ = try retryingSyscall("setsockopt(SO_RXQ_OVFL)") {
                setsockopt(fd, SOL_SOCKET, csp_so_rxq_ovfl(), &on, size)
            }
            let any: IPAddress = family == .v4 ? .v4(.any) : .v6(IPv6Address(bytes: Array(repeating: 0, count: 16))!)
            _ = try retryingSyscall("bind") {
                Self.socketAddress(any, port: port, scope: 0).withSockAddr { bind(fd, $0, socklen_t($1)) }
            }
        } catch {
            Glibc.close(fd)
            throw error
        }
        return fd
    }

    /// A listener is bound to the protocol's port and joined to its group; a sender to a port of the system's
    /// choosing, joined to nothing. Returned with a descriptor of its socket of our own.
    private func open(context: InterfaceContext, family: IPFamily, devices: [NIONetworkDevice], listening: Bool)
        throws -> (channel: Channel, socket: CInt)
    {
        let profile = self.profile
        // NIO never reads: the engine thread does (`receive`), so that a datagram wakes one thread, not an event
        // loop that then wakes the engine (docs/busy-lan.md).
        let bootstrap = DatagramBootstrap(group: self.group).channelOption(.autoRead, value: false)
        let fd = try Self.boundSocket(family: family, port: listening ? profile.port : 0)
        let own = fcntl(fd, F_DUPFD_CLOEXEC, 0)
        guard own >= 0 else {
            let code = errno
            Glibc.close(fd)
            throw SystemCallError(function: "fcntl(F_DUPFD_CLOEXEC)", errno: code)
        }
        let channel: Channel
        do {
            // The channel owns `fd` from here on, and closes it with itself.
            channel = try bootstrap.withBoundSocket(fd).wait()
        } catch {
            // Not `fd`: whether NIO closed it with the channel it failed to make is not ours to know, and closing
            // a number twice could close whatever took it in between. A failure here is rare (out of descriptors).
            Glibc.close(own)
            throw error
        }
        do {
            guard let multicast = channel as? MulticastChannel, let options = channel as? SocketOptionProvider else {
                throw EngineRunnerError(description: "the datagram channel offers no multicast options")
            }
            let device = devices.first { device in
                guard device.interfaceIndex == context.index, let address = device.address else { return false }
                return family == .v4 ? address.protocol == .inet : address.protocol == .inet6
            }
            guard let device else {
                throw EngineRunnerError(description: "no \(family) address on \(context.name)")
            }
            if family == .v4 {
                _ = try options.unsafeSetSocketOption(
                    level: .ip, name: .init(rawValue: IP_MULTICAST_ALL), value: CInt(0)
                ).wait()
                if listening {
                    try multicast.joinGroup(
                        try SocketAddress(ipAddress: profile.group4, port: Int(profile.port)), device: device
                    ).wait()
                }
                guard case .v4(let v4) = device.address else {
                    throw EngineRunnerError(description: "no IPv4 address on \(context.name)")
                }
                try options.setIPMulticastIF(v4.address.sin_addr).wait()
                try options.setIPMulticastTTL(CUnsignedChar(profile.multicastHops)).wait()
                try options.setIPMulticastLoop(1).wait()
                if let hops = profile.unicastHops {
                    _ = try options.unsafeSetSocketOption(level: .ip, name: .init(rawValue: IP_TTL), value: hops)
                        .wait()
                }
            } else {
                _ = try options.unsafeSetSocketOption(
                    level: .ipv6, name: .init(rawValue: IPV6_MULTICAST_ALL), value: CInt(0)
                ).wait()
                if listening {
                    try multicast.joinGroup(
                        try SocketAddress(ipAddress: profile.group6, port: Int(profile.port)), device: device
                    ).wait()
                }
                try options.setIPv6MulticastIF(CUnsignedInt(context.index)).wait()
                try options.setIPv6MulticastHops(profile.multicastHops).wait()
                try options.setIPv6MulticastLoop(1).wait()
                if let hops = profile.unicastHops {
                    _ = try options.unsafeSetSocketOption(
                        level: .ipv6, name: .init(rawValue: IPV6_UNICAST_HOPS), value: hops
                    ).wait()
                }
            }
        } catch {
            _ = try? channel.close().wait()
            Glibc.close(own)
            throw error
        }
        return (channel, own)
    }

    func close() {
        let channels = self.channels.withLockedValue { channels in
            defer { channels.removeAll() }
            return Array(channels.values)
        }
        for channel in channels.flatMap(\.all) { try? channel.close().wait() }
        for socket in channels.flatMap(\.receiving) where socket >= 0 { Glibc.close(socket) }
    }

    /// A socket address; IPv6 link-local destinations carry the interface as their scope.
    static func socketAddress(_ address: IPAddress, port: UInt16, scope: Int) -> SocketAddress {
        let posix = PosixSocketAddress(address, port: port, scope: scope)
        if let sin = posix.v4 { return SocketAddress(sin, host: "") }
        return SocketAddress(posix.v6!, host: "")
    }
}
