import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

/// A device that repeats the same question faster than any RFC 6762 querier may (docs/busy-lan.md) costs one
/// answer a second, not one decode and answer per copy; nobody else loses a question.
@Suite("Repeated questions")
struct RepeatedQuestionsTests {
    typealias H = EngineHarness
    static let stormer = IPAddress("192.0.2.40")!

    static func question(_ name: DNSName, type: DNSRecordType = .a, id: UInt16 = 0) -> [UInt8] {
        DNSMessage(id: id, questions: [DNSQuestion(name: name, type: type)]).encoded(options: .mdns)
    }

    func ask(_ h: inout H, _ bytes: [UInt8], from source: IPAddress = Self.stormer, port: UInt16 = 5353)
        -> [EngineAction]
    {
        let actions = h.engine.receiveMDNS(
            bytes, from: source, port: port, destination: .v4(.mdnsGroup), interfaceIndex: Lab.eth0.index, now: h.now)
        h.record(actions)
        return actions
    }

    @Test func aStormersRepeatsAreDroppedForASecondAndItIsStillAnsweredEverySecond() {
        var h = H()
        h.register()
        h.run(for: .seconds(12))
        #expect(h.engine.state(of: h.key) == .asleep)
        let question = Self.question(H.hostName)
        let queries = h.engine.responder!.statistics.queries
        // 100 copies a second for three seconds.
        var answers = 0
        for _ in 0..<3 {
            let start = h.log.count
            for _ in 0..<100 {
                _ = self.ask(&h, question)
                h.run(for: .milliseconds(10))
            }
            answers +=
                H.transmissions(h.log[start...].map(\.1)).filter { transmission in
                    transmission.message.answers.contains { $0.name == H.hostName && $0.type == .a }
                }.count
        }
        // One copy a second reached the responder; the rest were counted and dropped before decoding.
        #expect(h.engine.responder!.statistics.queries - queries == 3)
        #expect(h.engine.counts.repeatedQuestions == 297)
        // And the record still went out about once a second (RFC 6762 §6.2), not once and never again.
        #expect((2...3).contains(answers), "\(answers) answers in 3 s")
    }

    @Test func onlyTheSameBytesFromTheSameSourceWithinASecondAreRepeats() {
        var h = H()
        let question = Self.question(H.hostName)
        _ = self.ask(&h, question)
        // Another machine asking the same, the same source asking something else, a legacy question: all heard.
        _ = self.ask(&h, question, from: H.querier)
        _ = self.ask(&h, Self.question(H.hostName, type: .aaaa))
        _ = self.ask(&h, Self.question(H.hostName, id: 7), port: 40_000)
        _ = self.ask(&h, Self.question(H.hostName, id: 7), port: 40_000)
        #expect(h.engine.counts.repeatedQuestions == 0)
        // The source's last question was the AAAA one: asking it again within the second is a repeat.
        _ = self.ask(&h, Self.question(H.hostName, type: .aaaa))
        #expect(h.engine.counts.repeatedQuestions == 1)
        // At the window's end (N) it is no longer a repeat; just inside it (N - 1 ns) it still is.
        let aaaa = Self.question(H.hostName, type: .aaaa)
        h.now = h.now + RepeatedQuestions.window - .nanoseconds(1)
        _ = self.ask(&h, aaaa)
        #expect(h.engine.counts.repeatedQuestions == 2)
        h.now = h.now + .nanoseconds(1)
        _ = self.ask(&h, aaaa)
        #expect(h.engine.counts.repeatedQuestions == 2)
    }

    @Test func probesAndResponsesAreNeverRepeats() {
        var h = H()
        let probe = DNSMessage(
            questions: [DNSQuestion(name: "other.local.", type: .any)],
            authorities: [
                DNSResourceRecord(
                    name: "other.local.", ttl: 120, rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 77))))
            ]
        ).encoded(options: .mdns)
        let response = DNSMessage(
            flags: DNSHeaderFlags(response: true, authoritative: true),
            answers: [
                DNSResourceRecord(
                    name: "other.local.", cacheFlush: true, ttl: 120,
                    rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 77))))
            ]
        ).encoded(options: .mdns)
        for bytes in [probe, probe, probe, response, response] { _ = self.ask(&h, bytes) }
        #expect(h.engine.counts.repeatedQuestions == 0)
    }

    /// A held host asking the same question twice within a second: its second copy is still heard, since the first
    /// may have come just before the proxy took it over and the second is then the sign that it woke.
    @Test func aHeldHostsOwnQuestionsAreNeverRepeats() {
        var h = H()
        h.register()
        let question = Self.question("printer._ipp._tcp.local.", type: .srv)
        _ = self.ask(&h, question, from: Lab.hostV4)
        h.run(for: .milliseconds(500))
        _ = self.ask(&h, question, from: Lab.hostV4)
        #expect(h.engine.counts.repeatedQuestions == 0)
        // The same from a machine the proxy does not hold is a repeat.
        _ = self.ask(&h, question, from: H.querier)
        _ = self.ask(&h, question, from: H.querier)
        #expect(h.engine.counts.repeatedQuestions == 1)
    }

    @Test func theTableOfSourcesIsBounded() {
        var questions = RepeatedQuestions()
        let bytes = Self.question(H.hostName)
        func source(_ n: Int) -> RepeatedQuestions.Source {
            .init(address: .v4(IPv4Address(rawValue: 0xC633_6400 &+ UInt32(n))), port: 5353, interfaceIndex: 2)
        }
        // N sources are all remembered; the N + 1st starts the table over.
        for n in 0..<RepeatedQuestions.capacity { _ = questions.isRepeat(bytes, from: source(n), now: Lab.t0) }
        #expect(questions.count == RepeatedQuestions.capacity)
        let remembered = questions.isRepeat(bytes, from: source(0), now: Lab.t0)
        #expect(remembered)
        let past = questions.isRepeat(bytes, from: source(RepeatedQuestions.capacity), now: Lab.t0)
        #expect(!past)
        #expect(questions.count == 1)
    }
}
