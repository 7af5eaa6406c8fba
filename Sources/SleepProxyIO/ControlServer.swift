import FoundationEssentials
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import SleepProxyControl

#if canImport(Glibc)
    import Glibc
#endif

/// The admin socket (README, "Use it"): a Unix stream socket, mode 0660, owned by root and an optional group, one
/// JSON request per line and one JSON response per line. Served by a NIO bootstrap on the event loops NIO
/// already runs; every request is answered on the engine thread, and `events --follow` is pushed as each
/// wake-log entry is written, not polled.
public final class ControlServer: @unchecked Sendable {
    // @unchecked: `channel` is set by `start` before anything can stop it; `children` is guarded by its lock.
    /// Connections served at once; more are told to retry (a local script looping on the socket must not hold
    /// the daemon's memory).
    public static let maximumConnections = 16
    /// How long one request waits for the engine before the client is told it did not answer.
    static let replyTimeout: TimeAmount = .seconds(10)

    public let path: String
    private let group: String?
    private let engine: EngineRunner
    private let logger: Logger
    private var channel: Channel?
    private let children = NIOLockedValueBox<[ObjectIdentifier: Channel]>([:])

    public init(path: String, group: String?, engine: EngineRunner, logger: Logger) {
        self.path = path
        self.group = group
        self.engine = engine
        self.logger = logger
    }

    public struct StartError: Error, CustomStringConvertible {
        public var description: String
    }

    public func start(group eventLoops: EventLoopGroup = MultiThreadedEventLoopGroup.singleton) throws {
        let directory = self.path.lastIndex(of: "/").map { String(self.path[..<$0]) } ?? ""
        if !directory.isEmpty {
            try? FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        }
        var info = stat()
        if lstat(self.path, &info) == 0 {
            // A socket left by a daemon that died: replace it. Anything else is not ours to delete.
            guard info.st_mode & S_IFMT == S_IFSOCK else {
                throw StartError(
                    description:
                        "the control socket path \(self.path) exists and is not a socket; remove it or choose another with --control-socket"
                )
            }
            unlink(self.path)
        }
        guard self.path.utf8.count < MemoryLayout.size(ofValue: sockaddr_un().sun_path) else {
            throw StartError(
                description: "the control socket path \(self.path) is too long for a Unix socket (at most 107 bytes)")
        }
        let engine = self.engine
        let bootstrap = ServerBootstrap(group: eventLoops)
            .serverChannelOption(.backlog, value: 16)
            .childChannelInitializer { [self] channel in
                let admitted = self.children.withLockedValue { children -> Bool in
                    guard children.count < Self.maximumConnections else { return false }
                    children[ObjectIdentifier(channel)] = channel
                    return true
                }
                channel.closeFuture.whenComplete { [self] _ in
                    _ = self.children.withLockedValue { $0.removeValue(forKey: ObjectIdentifier(channel)) }
                }
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(ControlLineDecoder()))
                    try channel.pipeline.syncOperations.addHandler(
                        ControlHandler(
                            admitted: admitted, replyTimeout: Self.replyTimeout,
                            ask: { request, reply in engine.control(request, reply: reply) },
                            recentEvents: { engine.wakeLog.recent },
                            subscribe: { engine.wakeLog.subscribe($0) },
                            unsubscribe: { engine.wakeLog.unsubscribe($0) }))
                }
            }
        do {
            self.channel = try bootstrap.bind(unixDomainSocketPath: self.path).wait()
        } catch {
            throw StartError(description: "cannot listen on the control socket \(self.path): \(error)")
        }
        chmod(self.path, 0o660)
        if let group = self.group {
            guard let entry = getgrnam(group) else {
                self.stop()
                throw StartError(
                    description:
                        "the control group \"\(group)\" does not exist; create it (groupadd \(group)) or leave --control-group out"
                )
            }
            // Group only (the owner stays whoever runs the daemon: changing it needs CAP_CHOWN).
            chown(self.path, uid_t.max, entry.pointee.gr_gid)
        }
        self.logger.info("control: listening on \(self.path)")
    }

    /// Stops listening, closes every connection (a follower included) and removes the socket. Safe to call more
    /// than once.
    public func stop() {
        guard let channel = self.channel else { return }
        self.channel = nil
        try? channel.close().wait()
        for child in self.children.withLockedValue({ Array($0.values) }) { try? child.close().wait() }
        unlink(self.path)
    }
}

/// Cuts the byte stream into lines (the newline dropped), refusing a line longer than the protocol allows.
struct ControlLineDecoder: ByteToMessageDecoder {
    typealias InboundOut = ByteBuffer

    func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let newline = buffer.readableBytesView.firstIndex(of: 0x0A) else {
            if buffer.readableBytes > ControlProtocol.maximumLineLength {
                throw ControlProtocol.FramingError.lineTooLong(buffer.readableBytes)
            }
            return .needMoreData
        }
        let length = newline - buffer.readerIndex
        guard length <= ControlProtocol.maximumLineLength else {
            throw ControlProtocol.FramingError.lineTooLong(length)
        }
        let line = buffer.readSlice(length: length)!
        buffer.moveReaderIndex(forwardBy: 1)
        context.fireChannelRead(self.wrapInboundOut(line))
        return .continue
    }

    func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws -> DecodingState {
        .needMoreData  // a last line without its newline is no request
    }
}

/// One admin connection: requests in, one response line each, in order; `events --follow` then streams.
final class ControlHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let admitted: Bool
    private let replyTimeout: TimeAmount
    private let ask: @Sendable (ControlRequest, @escaping @Sendable (ControlResponse) -> Void) -> Void
    private let recentEvents: @Sendable () -> [WakeLogEntry]
    private let subscribe: @Sendable (@escaping @Sendable (WakeLogEntry) -> Void) -> Int
    private let unsubscribe: @Sendable (Int) -> Void
    /// Requests are answered one at a time, in order: the next waits for the engine's answer to this one.
    private var queue: [ControlRequest] = []
    private var waiting = false
    private var following: Int?

    init(
        admitted: Bool, replyTimeout: TimeAmount,
        ask: @escaping @Sendable (ControlRequest, @escaping @Sendable (ControlResponse) -> Void) -> Void,
        recentEvents: @escaping @Sendable () -> [WakeLogEntry],
        subscribe: @escaping @Sendable (@escaping @Sendable (WakeLogEntry) -> Void) -> Int,
        unsubscribe: @escaping @Sendable (Int) -> Void
    ) {
        self.admitted = admitted
        self.replyTimeout = replyTimeout
        self.ask = ask
        self.recentEvents = recentEvents
        self.subscribe = subscribe
        self.unsubscribe = unsubscribe
    }

    func channelActive(context: ChannelHandlerContext) {
        if !self.admitted {
            self.send(.failure("too many admin connections at once; try again", .unavailable), context: context)
            context.close(promise: nil)
        }
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        if let token = self.following { self.unsubscribe(token) }
        self.following = nil
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard self.admitted, self.following == nil else { return }  // a follower sends nothing more that matters
        let line = self.unwrapInboundIn(data)
        guard let request = try? ControlProtocol.decode(ControlRequest.self, from: Array(line.readableBytesView)) else {
            self.send(
                .failure("not a control request (one JSON object per line; see README)", .invalid), context: context)
            return
        }
        self.queue.append(request)
        self.next(context: context)
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        if case ControlProtocol.FramingError.lineTooLong = error {
            self.send(
                .failure("request longer than \(ControlProtocol.maximumLineLength) bytes", .invalid), context: context)
        }
        context.close(promise: nil)
    }

    private func next(context: ChannelHandlerContext) {
        guard !self.waiting, self.following == nil, !self.queue.isEmpty else { return }
        let request = self.queue.removeFirst()
        self.waiting = true
        let loop = context.eventLoop
        let handler = NIOLoopBound(self, eventLoop: loop)
        let bound = NIOLoopBound(context, eventLoop: loop)
        let answered = NIOLockedValueBox(false)
        // A follower subscribes before it asks, so that no entry written between its answer and its subscription
        // is lost; entries already in the answer are not sent twice.
        let follows = request.command == .events && request.follow == true
        let pending: NIOLoopBoundBox<[WakeLogEntry]?>? =
            follows ? NIOLoopBoundBox<[WakeLogEntry]?>([], eventLoop: loop) : nil
        if let box = pending {
            let target = request.target
            self.following = self.subscribe { entry in
                loop.execute {
                    guard Self.matches(entry, target: target) else { return }
                    if box.value != nil {
                        box.value!.append(entry)
                    } else {
                        handler.value.send(ControlResponse(events: [entry]), context: bound.value)
                    }
                }
            }
        }
        let seconds = self.replyTimeout.nanoseconds / 1_000_000_000
        let timeout = loop.scheduleTask(in: self.replyTimeout) {
            guard
                answered.withLockedValue({
                    let was = $0; $0 = true; return !was
                })
            else { return }
            handler.value.finish(
                .failure("the daemon did not answer within \(seconds) s", .unavailable), pending: pending,
                context: bound.value)
        }
        self.ask(request) { response in
            guard
                answered.withLockedValue({
                    let was = $0; $0 = true; return !was
                })
            else { return }
            loop.execute {
                timeout.cancel()
                handler.value.finish(response, pending: pending, context: bound.value)
            }
        }
    }

    private func finish(
        _ response: ControlResponse, pending: NIOLoopBoundBox<[WakeLogEntry]?>?, context: ChannelHandlerContext
    ) {
        self.waiting = false
        self.send(response, context: context)
        if let pending {
            if response.ok {
                let sent = Set(response.events ?? [])
                for entry in pending.value ?? [] where !sent.contains(entry) {
                    self.send(ControlResponse(events: [entry]), context: context)
                }
                pending.value = nil  // from now on entries go out as they come
                return
            }
            if let token = self.following { self.unsubscribe(token) }
            self.following = nil
        }
        self.next(context: context)
    }

    private func send(_ response: ControlResponse, context: ChannelHandlerContext) {
        guard let line = try? ControlProtocol.frame(response) else { return }
        context.writeAndFlush(self.wrapOutboundOut(context.channel.allocator.buffer(bytes: line)), promise: nil)
    }

    /// `events --host NAME|MAC`: the entries of that host only.
    static func matches(_ entry: WakeLogEntry, target: String?) -> Bool {
        guard let target else { return true }
        let name = EngineRunner.normalisedName(target)
        return entry.mac == target.lowercased() || entry.hostName.map(EngineRunner.normalisedName) == name
    }
}
