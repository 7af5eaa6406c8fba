import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import SleepProxyControl
import Testing

@testable import SleepProxyIO

/// The admin socket's handlers on an EmbeddedChannel: framing, answers in order, refusals, and a follower that
/// loses no wake-log entry and gets none twice.
@Suite("Control socket handler")
struct ControlHandlerTests {
    final class Fake: @unchecked Sendable {
        let lock = NSLock()
        var asked: [ControlRequest] = []
        var replies: [@Sendable (ControlResponse) -> Void] = []
        var subscribers: [Int: @Sendable (WakeLogEntry) -> Void] = [:]

        func ask(_ request: ControlRequest, _ reply: @escaping @Sendable (ControlResponse) -> Void) {
            self.lock.withLock {
                self.asked.append(request)
                self.replies.append(reply)
            }
        }

        func publish(_ entry: WakeLogEntry) {
            for subscriber in self.lock.withLock({ Array(self.subscribers.values) }) { subscriber(entry) }
        }
    }

    static func channel(_ fake: Fake, admitted: Bool = true) throws -> EmbeddedChannel {
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(ControlLineDecoder()))
        try channel.pipeline.syncOperations.addHandler(
            ControlHandler(
                admitted: admitted, replyTimeout: .seconds(10), ask: { fake.ask($0, $1) }, recentEvents: { [] },
                subscribe: { handler in
                    fake.lock.withLock {
                        fake.subscribers[fake.subscribers.count + 1] = handler; return fake.subscribers.count
                    }
                },
                unsubscribe: { token in _ = fake.lock.withLock { fake.subscribers.removeValue(forKey: token) } }))
        try channel.connect(to: SocketAddress(unixDomainSocketPath: "/tmp/control-test.sock")).wait()
        return channel
    }

    static func send(_ channel: EmbeddedChannel, _ text: String) throws {
        try channel.writeInbound(channel.allocator.buffer(string: text))
    }

    static func responses(_ channel: EmbeddedChannel) throws -> [ControlResponse] {
        channel.embeddedEventLoop.run()
        var result: [ControlResponse] = []
        while let buffer = try channel.readOutbound(as: ByteBuffer.self) {
            for line in buffer.readableBytesView.split(separator: 0x0A) {
                result.append(try ControlProtocol.decode(ControlResponse.self, from: Array(line)))
            }
        }
        return result
    }

    static func entry(_ n: Int) -> WakeLogEntry {
        WakeLogEntry(
            kind: .wake, time: Date(timeIntervalSince1970: Double(n)), mac: "02:53:50:00:00:02", interface: "eth0",
            hostName: "sleeper.local.",
            trigger: .init(type: .administrator), seconds: nil, attempts: nil, summary: "wake \(n)")
    }

    @Test func requestsAreAnsweredInOrderOneLineEach() throws {
        let fake = Fake()
        let channel = try Self.channel(fake)
        // Two requests in one read, the second split across two.
        try Self.send(
            channel,
            #"{"version":\#(ControlProtocol.version),"command":"status"}"# + "\n"
                + #"{"version":\#(ControlProtocol.version),"comm"#)
        try Self.send(channel, #"and":"hosts"}"# + "\n")
        #expect(fake.asked.map(\.command) == [.status], "the second waits for the first's answer")
        fake.replies[0](ControlResponse(hosts: []))
        #expect(try Self.responses(channel).count == 1)
        #expect(fake.asked.map(\.command) == [.status, .hosts])
        fake.replies[1](.failure("no"))
        #expect(try Self.responses(channel).map(\.ok) == [false])
    }

    @Test func garbageAndOversizedLinesAreRefused() throws {
        let fake = Fake()
        let channel = try Self.channel(fake)
        try Self.send(channel, "not json\n")
        #expect(
            try Self.responses(channel).first?.error?.contains("not a control request") == true && fake.asked.isEmpty)
        try? Self.send(channel, String(repeating: "x", count: ControlProtocol.maximumLineLength + 1))
        #expect(try Self.responses(channel).first?.error?.contains("longer than") == true)
        #expect(!channel.isActive, "closed after an oversized line")
    }

    @Test func aConnectionPastTheLimitIsToldToRetry() throws {
        let channel = try Self.channel(Fake(), admitted: false)
        #expect(try Self.responses(channel).first?.error?.contains("too many admin connections") == true)
    }

    @Test func aFollowerGetsEveryNewEntryOnceAndInOrder() throws {
        let fake = Fake()
        let channel = try Self.channel(fake)
        try Self.send(channel, #"{"version":\#(ControlProtocol.version),"command":"events","follow":true}"# + "\n")
        #expect(fake.subscribers.count == 1, "subscribed before asking")
        // Written while the engine builds its answer: one is in the answer, one is not.
        fake.publish(Self.entry(1))
        fake.publish(Self.entry(2))
        fake.replies[0](ControlResponse(events: [Self.entry(0), Self.entry(1)]))
        fake.publish(Self.entry(3))
        let lines = try Self.responses(channel)
        #expect(lines.flatMap { $0.events ?? [] }.map(\.summary) == ["wake 0", "wake 1", "wake 2", "wake 3"])
        try channel.close().wait()
        channel.embeddedEventLoop.run()
        #expect(fake.subscribers.isEmpty, "unsubscribed when the follower left")
    }
}
