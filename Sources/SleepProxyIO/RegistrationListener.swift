import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import SleepProxyCore
import SleepProxyWire

#if canImport(Glibc)
    import Glibc
#endif

/// UDP sockets on the registration port, IPv4 and IPv6 (link-local included), handing every datagram with its
/// arrival interface (IP_PKTINFO / IPV6_RECVPKTINFO) to the engine. Replies go out of the same socket to the
/// exact source address and port, which may be 5353 or ephemeral (docs/protocol.md §2.2).
public final class RegistrationListener: Sendable {
    /// The fixed default port, advertised in the `_sleep-proxy._udp` SRV record. Apple's proxy picks a random
    /// port each start (docs/protocol.md §1.1); a fixed one lets firewalls and our own client be configured once.
    public static let defaultPort = 5599

    /// Larger than the 9000-byte message limit (RFC 6762 §17), so an oversized datagram shows as oversized and is
    /// dropped, and no valid one is ever cut; not 64 KiB, which would be allocated for every datagram read.
    static let receiveBufferSize = 9216

    /// Kernel receive buffer per registration socket. A hundred hosts that go to sleep at the same moment (an
    /// office at closing time) send their UPDATEs within a millisecond; each small datagram costs the kernel about
    /// 2.3 KB, so the 208 KiB default overflows while the daemon is busy and a registration is lost until the
    /// client's retry a second later. 1 MiB holds about 450.
    static let socketReceiveBuffer = 1 << 20

    public let port: Int
    /// Internal rather than private for the tests, which close one behind our back.
    let channels: NIOLockedValueBox<[Channel]>
    private let closing = NIOLockedValueBox(false)
    private let reopenedCount = NIOLockedValueBox(0)
    /// Registration sockets that closed under us and were bound again.
    public var reopened: Int { self.reopenedCount.withLockedValue { $0 } }
    /// Attempts to bind a closed socket again that found its port still taken, and were retried.
    private let heldCount = NIOLockedValueBox(0)
    var rebindsHeldBack: Int { self.heldCount.withLockedValue { $0 } }
    /// Sockets given up on after `rebindAttempts` (the error is logged).
    private let abandonedCount = NIOLockedValueBox(0)
    var rebindsAbandoned: Int { self.abandonedCount.withLockedValue { $0 } }
    private let engine: EngineRunner
    private let group: EventLoopGroup
    private let logger: Logger

    private init(
        port: Int, channels: [Channel], engine: EngineRunner, group: EventLoopGroup, logger: Logger
    ) {
        self.port = port
        self.channels = NIOLockedValueBox(channels)
        self.engine = engine
        self.group = group
        self.logger = logger
    }

    /// Binds both sockets. Fails with a sentence naming the cause when the port is taken or not permitted.
    public static func bind(
        port: Int, engine: EngineRunner, group: EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger
    ) async throws -> RegistrationListener {
        var channels: [Channel] = []
        do {
            channels.append(
                try await self.bootstrap(group: group, engine: engine, v6: false).bind(host: "0.0.0.0", port: port)
                    .get())
        } catch {
            throw EngineRunnerError(
                description:
                    "cannot listen for registrations on UDP port \(port): \(Self.explain(error)); choose another with --registration-port"
            )
        }
        do {
            channels.append(
                try await self.bootstrap(group: group, engine: engine, v6: true).bind(host: "::", port: port).get())
        } catch {
            // A host without IPv6 still serves IPv4 clients.
            logger.warning("registrations: no IPv6 socket on port \(port) (\(Self.explain(error))); serving IPv4 only")
        }
        for channel in channels { await Self.enlargeReceiveBuffer(channel, logger: logger) }
        let bound = channels.first?.localAddress?.port ?? port
        let listener = RegistrationListener(
            port: bound, channels: channels, engine: engine, group: group, logger: logger)
        for channel in channels { listener.watchClosure(of: channel) }
        return listener
    }

    /// NIO closes a datagram channel on most write errors (docs/linux.md §1.10). The replies that a datagram's
    /// source could make fail are not sent (`InterfaceContext.acceptsReply`), but a local firewall's EPERM still
    /// can: a socket that closes while we still serve is bound again on the same port, so that the proxy does not
    /// stop taking registrations until it is restarted.
    private func watchClosure(of channel: Channel) {
        let identifier = ObjectIdentifier(channel)
        let v6: Bool
        switch channel.localAddress {
        case .v6: v6 = true
        default: v6 = false
        }
        // Its own port: with `--registration-port 0` the two families got different ones.
        let port = channel.localAddress?.port ?? self.port
        channel.closeFuture.whenComplete { [self] _ in
            let ours = self.closing.withLockedValue { closing in
                !closing && self.channels.withLockedValue { $0.contains { ObjectIdentifier($0) == identifier } }
            }
            guard ours else { return }
            let family = v6 ? "IPv6" : "IPv4"
            self.logger.warning("registrations: the \(family) socket on port \(port) closed; binding it again")
            self.bindAgain(replacing: identifier, v6: v6, port: port, attempt: 1)
        }
    }

    /// How often a socket that closed under us is bound again while its port is still taken, and how long apart.
    /// The port is free once the last copy of the descriptor is closed, and a process being spawned at that
    /// instant by another thread holds a copy from its fork to its exec, close-on-exec or not (docs/linux.md §6;
    /// seen in CI, where the test process starts lab commands while this runs). That lasts milliseconds; 20 tries
    /// 250 ms apart wait out five seconds of it, and a port really taken by another program is still reported.
    static let rebindAttempts = 20
    static let rebindInterval = TimeAmount.milliseconds(250)

    private func bindAgain(replacing identifier: ObjectIdentifier, v6: Bool, port: Int, attempt: Int) {
        let family = v6 ? "IPv6" : "IPv4"
        Self.bootstrap(group: self.group, engine: self.engine, v6: v6)
            .bind(host: v6 ? "::" : "0.0.0.0", port: port)
            .whenComplete { result in
                switch result {
                case .success(let fresh):
                    let kept = self.closing.withLockedValue { closing in
                        guard !closing else { return false }
                        self.channels.withLockedValue { channels in
                            channels.removeAll { ObjectIdentifier($0) == identifier }
                            channels.append(fresh)
                        }
                        return true
                    }
                    guard kept else {
                        fresh.close(promise: nil)
                        return
                    }
                    self.reopenedCount.withLockedValue { $0 += 1 }
                    self.watchClosure(of: fresh)
                    Task { await Self.enlargeReceiveBuffer(fresh, logger: self.logger) }
                case .failure(let error)
                where (error as? IOError)?.errnoCode == EADDRINUSE && attempt < Self.rebindAttempts:
                    self.heldCount.withLockedValue { $0 += 1 }
                    self.group.next().scheduleTask(in: Self.rebindInterval) {
                        guard !self.closing.withLockedValue({ $0 }) else { return }
                        self.bindAgain(replacing: identifier, v6: v6, port: port, attempt: attempt + 1)
                    }
                case .failure(let error):
                    self.abandonedCount.withLockedValue { $0 += 1 }
                    self.logger.error(
                        "registrations: cannot bind the \(family) socket on port \(port) again (\(Self.explain(error))); restart sleepproxyd"
                    )
                }
            }
    }

    private static func bootstrap(group: EventLoopGroup, engine: EngineRunner, v6: Bool) -> DatagramBootstrap {
        // No SO_REUSEADDR: on Linux it lets a second UDP socket bind the same port, and two daemons would then
        // split the registrations between them. UDP has no TIME_WAIT, so a restart does not need it.
        // NIO reads datagrams into 2048-byte buffers by default, which would truncate a large registration
        // (Apple's client puts up to 8940 bytes in one UPDATE, docs/protocol.md §2.3); read whole datagrams.
        var bootstrap = DatagramBootstrap(group: group)
            .channelOption(.receivePacketInfo, value: true)
            .channelOption(
                .recvAllocator,
                value: FixedSizeRecvByteBufferAllocator(capacity: RegistrationListener.receiveBufferSize)
            )
            .channelOption(.maxMessagesPerRead, value: 16)
        if v6 {
            // docs/linux.md §1: `.socketOption(.ipv6_v6only)` would set SOL_SOCKET 26 (SO_ATTACH_FILTER); name the level.
            bootstrap = bootstrap.channelOption(
                ChannelOptions.Types.SocketOption(level: .ipv6, name: .ipv6_v6only), value: 1)
        }
        return bootstrap.channelInitializer { channel in
            channel.eventLoop.makeCompletedFuture {
                try channel.pipeline.syncOperations.addHandler(
                    RegistrationInboundHandler(sink: { [engine] in engine.post($0) }))
            }
        }
    }

    /// SO_RCVBUFFORCE passes net.core.rmem_max and needs CAP_NET_ADMIN (the unit grants it); without it,
    /// SO_RCVBUF gets what rmem_max allows. Neither failing stops the daemon: the default buffer still works.
    private static func enlargeReceiveBuffer(_ channel: Channel, logger: Logger) async {
        let force = ChannelOptions.Types.SocketOption(
            level: .socket, name: NIOBSDSocket.Option(rawValue: SO_RCVBUFFORCE))
        let plain = ChannelOptions.Types.SocketOption(level: .socket, name: NIOBSDSocket.Option(rawValue: SO_RCVBUF))
        do {
            try await channel.setOption(force, value: SocketOptionValue(Self.socketReceiveBuffer)).get()
        } catch {
            do {
                try await channel.setOption(plain, value: SocketOptionValue(Self.socketReceiveBuffer)).get()
            } catch {
                logger.info("registrations: kept the default receive buffer (\(error))")
            }
        }
    }

    private static func explain(_ error: Error) -> String {
        if let io = error as? IOError {
            switch io.errnoCode {
            case EADDRINUSE: return "another program already uses it"
            case EACCES: return "permission denied"
            default: return io.description
            }
        }
        return "\(error)"
    }

    public func close() async {
        self.closing.withLockedValue { $0 = true }
        for channel in self.channels.withLockedValue({ $0 }) { try? await channel.close() }
    }
}

final class RegistrationInboundHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>

    private let sink: @Sendable (EngineRunner.Event) -> Void

    init(sink: @escaping @Sendable (EngineRunner.Event) -> Void) { self.sink = sink }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let envelope = Self.unwrapInboundIn(data)
        // RFC 6762 §17: nothing larger is a valid message; dropping it here also bounds what the queue can hold
        // (4096 datagrams of at most 9000 bytes).
        guard envelope.data.readableBytes <= DNSMessage.maximumSize else { return }
        self.sink(
            .datagram(
                bytes: Array(envelope.data.readableBytesView),
                remote: envelope.remoteAddress,
                interfaceIndex: envelope.metadata?.packetInfo.map { Int($0.interfaceIndex) },
                channel: context.channel
            ))
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        // ICMP errors on a UDP socket (e.g. port unreachable after a reply) must not close it.
    }
}
