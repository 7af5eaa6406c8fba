import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

/// The responder's memory of what it multicast: kept for the quarter TTL RFC 6762 §5.4 looks back, in two
/// generations, never swept entry by entry.
@Suite("Multicast history")
struct MulticastHistoryTests {
    static func key(_ n: Int, _ family: IPFamily = .v4) -> Responder.MulticastKey {
        Responder.MulticastKey(
            channel: Responder.Channel(interfaceIndex: 2, family: family),
            name: try! DNSName(parsing: "host\(n).local."),
            rdata: .a(ARecord(address: IPv4Address(192, 0, 2, UInt8(n % 250)))))
    }

    @Test func anEntryLivesAtLeastTheHorizonAndAtMostTwice() {
        let horizon = MulticastHistory.horizon
        let t0 = Timestamp.seconds(1000)
        var history = MulticastHistory()
        history[Self.key(1)] = t0
        // Written again just before the horizon: no new generation yet.
        history[Self.key(2)] = t0 + horizon - .nanoseconds(1)
        #expect(history[Self.key(1)] == t0 && history.count == 2)
        // At the horizon a new generation starts; the first entry is still found (in the previous one).
        history[Self.key(3)] = t0 + horizon
        #expect(history[Self.key(1)] == t0 && history[Self.key(2)] != nil && history.count == 3)
        // One more horizon on, the first generation is dropped whole.
        history[Self.key(4)] = t0 + horizon * 2
        #expect(history[Self.key(1)] == nil && history[Self.key(2)] == nil)
        #expect(history[Self.key(3)] == t0 + horizon && history[Self.key(4)] == t0 + horizon * 2)
        #expect(history.count == 2)
    }

    @Test func aRecordMulticastAgainReadsItsNewestTime() {
        let t0 = Timestamp.seconds(1000)
        var history = MulticastHistory()
        history[Self.key(1)] = t0
        history[Self.key(2)] = t0 + MulticastHistory.horizon  // a new generation
        history[Self.key(1)] = t0 + MulticastHistory.horizon + .seconds(1)
        #expect(history[Self.key(1)] == t0 + MulticastHistory.horizon + .seconds(1))
    }

    @Test func eachFamilyKeepsItsOwnTimeInTheSharedEntry() {
        let t0 = Timestamp.seconds(1000)
        var history = MulticastHistory()
        history[Self.key(1, .v4)] = t0
        #expect(history[Self.key(1, .v6)] == nil && history.count == 1)
        history[Self.key(1, .v6)] = t0 + .seconds(3)
        #expect(history[Self.key(1, .v4)] == t0 && history[Self.key(1, .v6)] == t0 + .seconds(3))
        #expect(history.count == 1, "one entry for both families")
        // A new generation holds the IPv4 time only; the IPv6 one is still read from the previous generation.
        history[Self.key(1, .v4)] = t0 + MulticastHistory.horizon
        #expect(history[Self.key(1, .v4)] == t0 + MulticastHistory.horizon)
        #expect(history[Self.key(1, .v6)] == t0 + .seconds(3))
    }

    @Test func aTimeReadBackIsNeverEarlierThanTheRealOne() {
        // Milliseconds, rounded up: a rate limit measured from it can only be longer, by less than a millisecond.
        let t0 = Timestamp.seconds(1000)
        var history = MulticastHistory()
        history[Self.key(1)] = t0
        let real = t0 + .nanoseconds(1_500_001)
        history[Self.key(2)] = real
        let read = history[Self.key(2)]!
        #expect(read >= real && read - real < .milliseconds(1))
        // Other interfaces and other data are other entries.
        let other = Responder.MulticastKey(
            channel: Responder.Channel(interfaceIndex: 3, family: .v4), name: try! DNSName(parsing: "host2.local."),
            rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 2))))
        #expect(history[other] == nil)
    }
}
