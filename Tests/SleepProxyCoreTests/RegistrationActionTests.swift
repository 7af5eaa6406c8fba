import NIOCore
import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

/// The registration's reply and its log line are the engine's actions like the rest (docs/architecture.md): the
/// reply only to an address a reply can go to, malformed datagrams logged within their budget.
@Suite("Composed engine: registration replies and lines")
struct RegistrationActionTests {
    typealias H = EngineHarness

    static func replies(_ actions: [EngineAction]) -> [RegistrationReply] {
        actions.compactMap { if case .reply(let reply) = $0 { reply } else { nil } }
    }

    @Test func theReplyIsAnActionToASourceThatCanTakeIt() {
        var h = H()
        let bytes = Lab.registration().encoded(options: .appleUpdate)
        let answered = h.engine.receiveRegistration(bytes, from: Lab.hostV4, port: 5353, on: Lab.eth0, now: h.now)
        #expect(Self.replies(answered).map(\.destination) == [Lab.hostV4])
        #expect(H.logs(answered).contains { $0.hasPrefix("registered vm.local.") })
        let portZero = h.engine.receiveRegistration(bytes, from: Lab.hostV4, port: 0, on: Lab.eth0, now: h.now)
        #expect(Self.replies(portZero).isEmpty, "port 0 takes no reply")
        #expect(H.logs(portZero).contains { $0.hasPrefix("registration: no reply to") }, "the reply was there to send")
    }

    @Test func malformedDatagramsAreLoggedWithinTheirBudget() {
        var h = H()
        var lines = 0
        for _ in 0..<(LineBudget.linesPerWindow * 2) {
            let actions = h.engine.receiveRegistration(
                [0x12, 0x34, 0x28, 0x00, 0, 1, 0, 0, 0, 0, 0, 0], from: Lab.hostV4, port: 5353, on: Lab.eth0,
                now: h.now)
            lines += H.logs(actions).filter { $0.contains("malformed") }.count
        }
        #expect(lines == LineBudget.linesPerWindow, "\(lines) lines for \(LineBudget.linesPerWindow * 2) datagrams")
    }
}
