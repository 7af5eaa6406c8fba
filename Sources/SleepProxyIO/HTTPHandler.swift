import NIOCore
import NIOHTTP1
import SleepProxyStatusPage

/// One HTTP response: what `HTTPHandler` writes.
struct HTTPReply: Sendable {
    var status: HTTPResponseStatus
    var contentType: String
    var body: [UInt8]
    var headers: [(String, String)] = []

    static func text(_ status: HTTPResponseStatus, _ message: String) -> HTTPReply {
        HTTPReply(status: status, contentType: "text/plain; charset=utf-8", body: Array((message + "\n").utf8))
    }

    /// A page, with the headers that forbid every script and style not served by the daemon itself.
    static func page(_ status: HTTPResponseStatus, _ html: String) -> HTTPReply {
        HTTPReply(
            status: status, contentType: "text/html; charset=utf-8", body: Array(html.utf8),
            headers: StatusAssets.securityHeaders + [("Cache-Control", "no-store")])
    }
}

/// Reads a request, asks `serve` for its reply (which may come later, from another thread), and writes it; one
/// at a time per connection (NIO's pipelining handler holds the next request until this one's end is written).
/// A reply that does not come within `replyTimeout` is answered 503. HEAD gets the headers of GET.
final class HTTPHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart
    typealias Serve =
        @Sendable (
            _ route: StatusRoute, _ uri: String, _ loop: EventLoop, _ respond: @escaping @Sendable (HTTPReply) -> Void
        ) -> Void

    private let serve: Serve
    private let replyTimeout: TimeAmount
    private var request: HTTPRequestHead?

    init(replyTimeout: TimeAmount, serve: @escaping Serve) {
        self.serve = serve
        self.replyTimeout = replyTimeout
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.unwrapInboundIn(data) {
        case .head(let head):
            self.request = head
        case .body:
            break  // a GET has none; a body sent anyway is read and dropped
        case .end:
            guard let head = self.request else { return }
            self.request = nil
            self.handle(head, context: context)
        }
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is IdleStateHandler.IdleStateEvent {
            context.close(promise: nil)
        } else {
            context.fireUserInboundEventTriggered(event)
        }
    }

    private func handle(_ head: HTTPRequestHead, context: ChannelHandlerContext) {
        let loop = context.eventLoop
        let bound = NIOLoopBound(context, eventLoop: loop)
        let handler = NIOLoopBound(self, eventLoop: loop)
        let answered = NIOLoopBoundBox(false, eventLoop: loop)
        let finish: @Sendable (HTTPReply) -> Void = { reply in
            loop.execute {
                guard !answered.value else { return }
                answered.value = true
                handler.value.write(reply, for: head, context: bound.value)
            }
        }
        let timeout = loop.scheduleTask(in: self.replyTimeout) {
            finish(.text(.serviceUnavailable, "the daemon did not answer in time; try again"))
        }
        let route = StatusRoute(method: head.method.rawValue, uri: head.uri)
        self.serve(route, head.uri, loop) { reply in
            timeout.cancel()
            finish(reply)
        }
    }

    private func write(_ reply: HTTPReply, for head: HTTPRequestHead, context: ChannelHandlerContext) {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: reply.contentType)
        headers.add(name: "Content-Length", value: "\(reply.body.count)")
        for (name, value) in reply.headers { headers.add(name: name, value: value) }
        if reply.status == .methodNotAllowed { headers.add(name: "Allow", value: "GET, HEAD") }
        let keepAlive = head.isKeepAlive
        if !keepAlive { headers.add(name: "Connection", value: "close") }
        context.write(
            self.wrapOutboundOut(
                .head(HTTPResponseHead(version: head.version, status: reply.status, headers: headers))),
            promise: nil)
        if head.method != .HEAD {
            context.write(
                self.wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: reply.body)))),
                promise: nil)
        }
        let done = context.writeAndFlush(self.wrapOutboundOut(.end(nil)))
        if !keepAlive {
            let channel = context.channel
            done.whenComplete { _ in channel.close(promise: nil) }
        }
    }
}
