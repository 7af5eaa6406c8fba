import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import SleepProxyCore
import SleepProxyWire

#if canImport(Glibc)
    import Glibc
#endif

/// The mDNS sockets: one per served interface and address family, bound to port 5353 beside any avahi-daemon
/// (SO_REUSEADDR + SO_REUSEPORT), each joined to its group on its own interface only (IP_MULTICAST_ALL off,
/// docs/linux.md §1.5) and sending with TTL / hop limit 255 for multicast and unicast alike (RFC 6762 §11,
/// docs/linux.md §1.6). Received packets go to the engine with the interface and destination from packet info.
public final class MDNSSockets: Sendable {
    struct Key: Hashable, Sendable {
        var interfaceIndex: Int
        var family: IPFamily
    }

    static let receiveBufferSize = 9216
    private let channels: NIOLockedValueBox<[Key: Channel]> = NIOLockedValueBox([:])
    private let group: EventLoopGroup
    private let logger: Logger
    private let sink: @Sendable (RegistrationEngine.Event) -> Void

    init(
        group: EventLoopGroup = MultiThreadedEventLoopGroup.singleton, logger: Logger,
        sink: @escaping @Sendable (RegistrationEngine.Event) -> Void
    ) {
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
        let current = self.channels.withLockedValue { $0 }
        for (key, channel) in current where !wanted.contains(key) {
            _ = channel.close()
            self.channels.withLockedValue { $0[key] = nil }
        }
        let devices = (try? System.enumerateDevices()) ?? []
        for context in interfaces {
            for family in Responder.families(of: context)
            where current[Key(interfaceIndex: context.index, family: family)] == nil {
                do {
                    let channel = try self.open(context: context, family: family, devices: devices)
                    self.channels.withLockedValue { $0[Key(interfaceIndex: context.index, family: family)] = channel }
                    self.logger.info("mdns: answering on \(context.name) over \(family)")
                } catch {
                    self.logger.warning("mdns: cannot use \(context.name) over \(family): \(error)")
                }
            }
        }
    }

    private func open(context: InterfaceContext, family: IPFamily, devices: [NIONetworkDevice]) throws -> Channel {
        let reusePort = ChannelOptions.Types.SocketOption(
            level: .socket, name: NIOBSDSocket.Option(rawValue: SO_REUSEPORT))
        var bootstrap = DatagramBootstrap(group: self.group)
            .channelOption(.socketOption(.so_reuseaddr), value: 1)
            .channelOption(reusePort, value: 1)
            .channelOption(.receivePacketInfo, value: true)
            .channelOption(
                .recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: MDNSSockets.receiveBufferSize)
            )
            .channelOption(.maxMessagesPerRead, value: 16)
        if family == .v6 {
            // docs/linux.md §1.1–1.2: name the IPv6 level explicitly, and keep IPv4 out of the IPv6 socket.
            bootstrap = bootstrap.channelOption(
                ChannelOptions.Types.SocketOption(level: .ipv6, name: .ipv6_v6only), value: 1)
        }
        let sink = self.sink
        let channel = try bootstrap.channelInitializer { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(MDNSInboundHandler(sink: sink))
            }
        }.bind(host: family == .v4 ? "0.0.0.0" : "::", port: Int(MDNSRules.port)).wait()
        do {
            guard let multicast = channel as? MulticastChannel, let options = channel as? SocketOptionProvider else {
                throw RegistrationEngineError(description: "the datagram channel offers no multicast options")
            }
            let device = devices.first { device in
                guard device.interfaceIndex == context.index, let address = device.address else { return false }
                return family == .v4 ? address.protocol == .inet : address.protocol == .inet6
            }
            guard let device else {
                throw RegistrationEngineError(description: "no \(family) address on \(context.name)")
            }
            if family == .v4 {
                _ = try options.unsafeSetSocketOption(
                    level: .ip, name: .init(rawValue: IP_MULTICAST_ALL), value: CInt(0)
                ).wait()
                try multicast.joinGroup(
                    try SocketAddress(ipAddress: "224.0.0.251", port: Int(MDNSRules.port)), device: device
                ).wait()
                guard case .v4(let v4) = device.address else {
                    throw RegistrationEngineError(description: "no IPv4 address on \(context.name)")
                }
                try options.setIPMulticastIF(v4.address.sin_addr).wait()
                try options.setIPMulticastTTL(255).wait()
                try options.setIPMulticastLoop(1).wait()
                _ = try options.unsafeSetSocketOption(level: .ip, name: .init(rawValue: IP_TTL), value: CInt(255))
                    .wait()
            } else {
                _ = try options.unsafeSetSocketOption(
                    level: .ipv6, name: .init(rawValue: IPV6_MULTICAST_ALL), value: CInt(0)
                ).wait()
                try multicast.joinGroup(
                    try SocketAddress(ipAddress: "ff02::fb", port: Int(MDNSRules.port)), device: device
                ).wait()
                try options.setIPv6MulticastIF(CUnsignedInt(context.index)).wait()
                try options.setIPv6MulticastHops(255).wait()
                try options.setIPv6MulticastLoop(1).wait()
                _ = try options.unsafeSetSocketOption(
                    level: .ipv6, name: .init(rawValue: IPV6_UNICAST_HOPS), value: CInt(255)
                ).wait()
            }
        } catch {
            _ = try? channel.close().wait()
            throw error
        }
        return channel
    }

    /// Queues transmissions on their sockets: one hop to each socket's event loop, one flush.
    func send(_ transmissions: [MDNSTransmission]) {
        for (channel, envelopes) in self.route(transmissions) {
            channel.eventLoop.execute {
                for envelope in envelopes { channel.write(envelope, promise: nil) }
                channel.flush()
            }
        }
    }

    /// Sends and waits until the kernel has the datagrams (at shutdown, so the goodbyes leave before the process
    /// does).
    func sendAndWait(_ transmissions: [MDNSTransmission]) {
        var futures: [EventLoopFuture<Void>] = []
        for (channel, envelopes) in self.route(transmissions) {
            for envelope in envelopes { futures.append(channel.write(envelope)) }
            channel.flush()
        }
        for future in futures { try? future.wait() }
    }

    private func route(_ transmissions: [MDNSTransmission]) -> [(Channel, [AddressedEnvelope<ByteBuffer>])] {
        guard !transmissions.isEmpty else { return [] }
        let channels = self.channels.withLockedValue { $0 }
        var byChannel: [ObjectIdentifier: (Channel, [AddressedEnvelope<ByteBuffer>])] = [:]
        for transmission in transmissions {
            let key: Key
            let remote: SocketAddress
            switch transmission.destination {
            case .multicast(let index, let family):
                key = Key(interfaceIndex: index, family: family)
                remote = family == .v4 ? Self.group4 : Self.group6
            case .unicast(let address, let port, let index):
                key = Key(interfaceIndex: index, family: IPFamily(address))
                remote = Self.socketAddress(address, port: port, scope: index)
            }
            guard let channel = channels[key] else { continue }
            byChannel[ObjectIdentifier(channel), default: (channel, [])].1.append(
                AddressedEnvelope(remoteAddress: remote, data: ByteBuffer(bytes: transmission.bytes)))
        }
        return Array(byChannel.values)
    }

    func close() {
        let channels = self.channels.withLockedValue { channels in
            defer { channels.removeAll() }
            return Array(channels.values)
        }
        for channel in channels { try? channel.close().wait() }
    }

    static let group4 = try! SocketAddress(ipAddress: "224.0.0.251", port: Int(MDNSRules.port))
    static let group6 = try! SocketAddress(ipAddress: "ff02::fb", port: Int(MDNSRules.port))

    /// A socket address; IPv6 link-local destinations carry the interface as their scope.
    static func socketAddress(_ address: IPAddress, port: UInt16, scope: Int) -> SocketAddress {
        switch address {
        case .v4(let v4):
            var sin = sockaddr_in()
            sin.sin_family = sa_family_t(AF_INET)
            sin.sin_port = port.bigEndian
            sin.sin_addr.s_addr = v4.rawValue.bigEndian
            return SocketAddress(sin, host: "")
        case .v6(let v6):
            var sin6 = sockaddr_in6()
            sin6.sin6_family = sa_family_t(AF_INET6)
            sin6.sin6_port = port.bigEndian
            withUnsafeMutableBytes(of: &sin6.sin6_addr) { raw in
                for (offset, byte) in v6.bytes.enumerated() { raw[offset] = byte }
            }
            if v6.isLinkLocal || v6.isMulticast { sin6.sin6_scope_id = UInt32(scope) }
            return SocketAddress(sin6, host: "")
        }
    }
}

final class MDNSInboundHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>

    private let sink: @Sendable (RegistrationEngine.Event) -> Void

    init(sink: @escaping @Sendable (RegistrationEngine.Event) -> Void) { self.sink = sink }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let envelope = Self.unwrapInboundIn(data)
        guard envelope.data.readableBytes <= DNSMessage.maximumSize, let info = envelope.metadata?.packetInfo else {
            return
        }
        self.sink(
            .mdns(
                bytes: Array(envelope.data.readableBytesView), remote: envelope.remoteAddress,
                interfaceIndex: Int(info.interfaceIndex), destination: IPAddress(info.destinationAddress)))
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        // ICMP errors after a unicast answer must not close the socket.
    }
}
