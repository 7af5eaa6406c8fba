import NIOCore
import NIOEmbedded
import NIOHTTP1
import Testing

@testable import SleepProxyIO

/// The metrics endpoint's HTTP handler on an EmbeddedChannel: what it answers to what, without a socket.
@Suite("Metrics HTTP handler")
struct MetricsHTTPHandlerTests {
    static let body = Array("sleepproxy_hosts 3\n".utf8)

    /// Sends one request through a channel with the handler and returns the response head and body.
    static func exchange(_ method: HTTPMethod, _ uri: String, keepAlive: Bool = true) throws -> (
        HTTPResponseHead, String, Bool
    ) {
        let channel = EmbeddedChannel(handler: MetricsHTTPHandler(scrape: { Self.body }))
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9580)).wait()
        var head = HTTPRequestHead(version: .http1_1, method: method, uri: uri)
        if !keepAlive { head.headers.add(name: "Connection", value: "close") }
        try channel.writeInbound(HTTPServerRequestPart.head(head))
        try channel.writeInbound(HTTPServerRequestPart.end(nil))
        guard case .head(let response) = try channel.readOutbound(as: HTTPServerResponsePart.self) else {
            throw TestFailure("no head")
        }
        guard case .body(.byteBuffer(let buffer)) = try channel.readOutbound(as: HTTPServerResponsePart.self) else {
            throw TestFailure("no body")
        }
        guard case .end = try channel.readOutbound(as: HTTPServerResponsePart.self) else { throw TestFailure("no end") }
        let open = channel.isActive
        _ = try? channel.finish()
        return (response, String(buffer: buffer), open)
    }

    struct TestFailure: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }

    @Test func getMetricsIsTheExpositionFormat() throws {
        let (head, body, open) = try Self.exchange(.GET, "/metrics")
        #expect(
            head.status == .ok && head.headers["Content-Type"].first?.hasPrefix("text/plain; version=0.0.4") == true)
        #expect(head.headers["Content-Length"].first == "\(Self.body.count)" && body == "sleepproxy_hosts 3\n")
        #expect(open, "keep-alive is kept")
        let (_, _, closed) = try Self.exchange(.GET, "/metrics?x=1", keepAlive: false)
        #expect(!closed, "Connection: close is honoured")
    }

    @Test func anythingElseIsRefusedWithoutAScrape() throws {
        #expect(try Self.exchange(.GET, "/").0.status == .notFound)
        #expect(try Self.exchange(.GET, "/metricsx").0.status == .notFound)
        let post = try Self.exchange(.POST, "/metrics")
        #expect(
            post.0.status == .methodNotAllowed && post.0.headers["Allow"].first == "GET"
                && post.1.contains("GET /metrics only"))
    }
}
