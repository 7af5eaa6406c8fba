import NIOCore
import NIOEmbedded
import NIOHTTP1
import SleepProxyControl
import SleepProxyStatusPage
import Testing

@testable import SleepProxyIO

/// The HTTP server's handler on an EmbeddedChannel: routes reach `serve`, replies come back whole, HEAD gets no
/// body, a reply that never comes is a 503, and keep-alive is as the client asks.
@Suite("HTTP handler")
struct HTTPHandlerTests {
    static let body = Array("sleepproxy_hosts 3\n".utf8)

    struct TestFailure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    /// A handler whose `serve` answers /metrics with `body`, never answers /slow, and 404s anything else; the
    /// routes it was asked for are recorded.
    final class Recorder: @unchecked Sendable {
        var routes: [StatusRoute] = []
    }

    static func channel(_ recorder: Recorder, timeout: TimeAmount = .seconds(10)) throws -> EmbeddedChannel {
        let channel = EmbeddedChannel(
            handler: HTTPHandler(replyTimeout: timeout) { route, uri, _, respond in
                recorder.routes.append(route)
                switch route {
                case .metrics:
                    respond(HTTPReply(status: .ok, contentType: "text/plain; version=0.0.4", body: Self.body))
                case .methodNotAllowed: respond(.text(.methodNotAllowed, "read-only"))
                case _ where uri == "/slow": break
                default: respond(.page(.notFound, "<p>no</p>"))
                }
            })
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9580)).wait()
        return channel
    }

    static func send(_ channel: EmbeddedChannel, _ method: HTTPMethod, _ uri: String, keepAlive: Bool = true) throws {
        var head = HTTPRequestHead(version: .http1_1, method: method, uri: uri)
        if !keepAlive { head.headers.add(name: "Connection", value: "close") }
        try channel.writeInbound(HTTPServerRequestPart.head(head))
        try channel.writeInbound(HTTPServerRequestPart.end(nil))
        channel.embeddedEventLoop.run()
    }

    static func response(_ channel: EmbeddedChannel) throws -> (HTTPResponseHead, String?) {
        guard case .head(let head) = try channel.readOutbound(as: HTTPServerResponsePart.self) else {
            throw TestFailure("no head")
        }
        var body: String? = nil
        var part = try channel.readOutbound(as: HTTPServerResponsePart.self)
        if case .body(.byteBuffer(let buffer)) = part {
            body = String(buffer: buffer)
            part = try channel.readOutbound(as: HTTPServerResponsePart.self)
        }
        guard case .end = part else { throw TestFailure("no end") }
        return (head, body)
    }

    @Test func metricsAreServedWholeWithTheirLength() throws {
        let recorder = Recorder()
        let channel = try Self.channel(recorder)
        defer { _ = try? channel.finish() }
        try Self.send(channel, .GET, "/metrics?x=1")
        let (head, body) = try Self.response(channel)
        #expect(
            head.status == .ok && head.headers["Content-Type"].first?.hasPrefix("text/plain; version=0.0.4") == true)
        #expect(head.headers["Content-Length"].first == "\(Self.body.count)" && body == "sleepproxy_hosts 3\n")
        #expect(recorder.routes == [.metrics])
    }

    @Test func headGetsTheHeadersOfGetAndNoBody() throws {
        let channel = try Self.channel(Recorder())
        defer { _ = try? channel.finish() }
        try Self.send(channel, .HEAD, "/metrics")
        let (head, body) = try Self.response(channel)
        #expect(head.status == .ok && head.headers["Content-Length"].first == "\(Self.body.count)" && body == nil)
    }

    @Test func pagesCarryTheSecurityHeadersAndWritesAreRefused() throws {
        let recorder = Recorder()
        let channel = try Self.channel(recorder)
        defer { _ = try? channel.finish() }
        try Self.send(channel, .GET, "/nothing")
        let (page, _) = try Self.response(channel)
        #expect(page.status == .notFound)
        #expect(page.headers["Content-Security-Policy"].first?.contains("script-src 'self'") == true)
        #expect(page.headers["X-Content-Type-Options"].first == "nosniff")
        try Self.send(channel, .POST, "/")
        let (post, _) = try Self.response(channel)
        #expect(post.status == .methodNotAllowed && post.headers["Allow"].first == "GET, HEAD")
        #expect(recorder.routes == [.notFound, .methodNotAllowed])
    }

    @Test func aReplyThatNeverComesIsA503() throws {
        let channel = try Self.channel(Recorder(), timeout: .seconds(10))
        defer { _ = try? channel.finish() }
        try Self.send(channel, .GET, "/slow")
        #expect(try channel.readOutbound(as: HTTPServerResponsePart.self) == nil, "no answer before the timeout")
        channel.embeddedEventLoop.advanceTime(by: .seconds(10))
        let (head, body) = try Self.response(channel)
        #expect(head.status == .serviceUnavailable && body?.contains("did not answer") == true)
    }

    /// The API's status code comes from the refusal's kind, which travels in the JSON; the message's wording can
    /// change freely.
    @Test func aRefusalsStatusFollowsItsKindNotItsWords() throws {
        let kinds: [(ControlResponse.Refusal, HTTPResponseStatus)] = [
            (.invalid, .badRequest), (.notFound, .notFound), (.unavailable, .serviceUnavailable),
            (.failed, .internalServerError),
        ]
        for (kind, status) in kinds {
            let response = ControlResponse.failure("any words at all", kind)
            #expect(HTTPEndpoint.status(of: response) == status)
            let line = try ControlProtocol.frame(response)
            let decoded = try ControlProtocol.decode(ControlResponse.self, from: Array(line.dropLast()))
            #expect(decoded.refusal == kind && !decoded.ok)
        }
        #expect(HTTPEndpoint.status(of: ControlResponse()) == .ok)
    }

    @Test func connectionCloseIsHonoured() throws {
        let channel = try Self.channel(Recorder())
        try Self.send(channel, .GET, "/metrics", keepAlive: false)
        _ = try Self.response(channel)
        channel.embeddedEventLoop.run()
        #expect(!channel.isActive, "Connection: close closes after the response")
        _ = try? channel.finish()
    }
}
