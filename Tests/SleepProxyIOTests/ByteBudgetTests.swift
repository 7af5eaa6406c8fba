import NIOCore
import SleepProxyTestSupport
import SleepProxyWire
import Testing

@testable import SleepProxyIO

@Suite("Frame queue byte budget")
struct ByteBudgetTests {
    @Test func takesUpToTheLimitAndNotOneByteMore() {
        let budget = ByteBudget(limit: PacketLinks.maximumQueuedBytes)
        #expect(budget.take(PacketLinks.maximumQueuedBytes - 60))
        #expect(budget.take(60), "exactly at the limit")
        #expect(!budget.take(1), "one byte past it")
        #expect(budget.inUse == PacketLinks.maximumQueuedBytes)
        budget.give(60)
        #expect(budget.take(60) && !budget.take(1))
        budget.give(PacketLinks.maximumQueuedBytes)
        #expect(budget.inUse == 0)
        budget.give(10)
        #expect(budget.inUse == 0, "giving back more than taken never goes negative")
    }
}

/// The engine's mailbox keeps one bound per lane (registrations and admin, mDNS, frames), so a flood of frames
/// or mDNS fills its own lane only.
@Suite("Engine mailbox lanes")
struct MailboxLaneTests {
    enum Event: Equatable { case registration(Int), mdns(Int), frame(Int) }

    static func mailbox(capacity: Int) throws -> Mailbox<Event> {
        try Mailbox<Event>(capacity: capacity, lanes: 3) { event in
            switch event {
            case .registration: 0
            case .mdns: 1
            case .frame: 2
            }
        }
    }

    @Test func aFullLaneRefusesOnlyItsOwnEvents() throws {
        let mailbox = try Self.mailbox(capacity: EngineRunner.mailboxCapacity)
        for n in 0..<EngineRunner.mailboxCapacity { #expect(mailbox.post(.frame(n))) }
        #expect(!mailbox.post(.frame(-1)), "one past the frame lane's bound")
        #expect(mailbox.post(.registration(1)), "a registration still gets in behind a full frame lane")
        for n in 0..<EngineRunner.mailboxCapacity { #expect(mailbox.post(.mdns(n))) }
        #expect(!mailbox.post(.mdns(-1)))
        #expect(mailbox.post(.registration(2)))
        #expect(
            mailbox.dropped == 2 && mailbox.dropped(lane: 2) == 1 && mailbox.dropped(lane: 1) == 1
                && mailbox.dropped(lane: 0) == 0)

        // Taking empties every lane and keeps the order of arrival across lanes.
        let (events, stopped) = mailbox.take(timeout: 0)
        #expect(!stopped && events.count == 2 * EngineRunner.mailboxCapacity + 2)
        #expect(events[EngineRunner.mailboxCapacity] == .registration(1) && events.last == .registration(2))
        #expect(mailbox.post(.frame(0)), "the frame lane has room again")
    }

    /// The lanes are separate queues merged back on taking: whatever the interleaving, the events come out in the
    /// order they were posted, and taking one lane first leaves exactly the others, still in that order.
    @Test func theLanesMergeBackIntoArrivalOrder() throws {
        var generator = SplitMix64(seed: 7)
        let posted: [Event] = (0..<3_000).map { n in
            switch generator.next() % 3 {
            case 0: .registration(n)
            case 1: .mdns(n)
            default: .frame(n)
            }
        }
        let mailbox = try Self.mailbox(capacity: EngineRunner.mailboxCapacity)
        for event in posted { #expect(mailbox.post(event)) }
        #expect(mailbox.take(timeout: 0).events == posted)
        for event in posted { mailbox.post(event) }
        let mdns = mailbox.take(lane: 1)
        #expect(mdns == posted.filter { if case .mdns = $0 { true } else { false } })
        #expect(mailbox.take(timeout: 0).events == posted.filter { if case .mdns = $0 { false } else { true } })
    }

    /// Taking one lane (the engine answering queries between registrations) leaves the others queued in their
    /// order, and gives that lane its room back (N taken, then N more accepted).
    @Test func takingOneLaneLeavesTheOthersInOrder() throws {
        let capacity = 4
        let mailbox = try Self.mailbox(capacity: capacity)
        for n in 0..<capacity {
            mailbox.post(.registration(n))
            #expect(mailbox.post(.mdns(n)))
            mailbox.post(.frame(n))
        }
        #expect(!mailbox.post(.mdns(99)))
        #expect(mailbox.take(lane: 1) == (0..<capacity).map { .mdns($0) })
        #expect(mailbox.take(lane: 1).isEmpty)
        for n in 0..<capacity { #expect(mailbox.post(.mdns(10 + n)), "room again in the mDNS lane") }
        let rest = mailbox.take(timeout: 0).events
        #expect(rest.filter { if case .mdns = $0 { false } else { true } }.count == 2 * capacity)
        #expect(rest.prefix(3) == [.registration(0), .frame(0), .registration(1)])
        #expect(rest.suffix(capacity) == (0..<capacity).map { .mdns(10 + $0) })
    }

    /// The engine's own lane assignment: a flood of captured frames, then of mDNS packets, fills only its lane
    /// (N taken, N+1 refused); registrations and the admin side still get in.
    @Test func aFloodOfFramesOrMDNSLeavesRoomForTheRest() throws {
        let capacity = 8
        let mailbox = try Mailbox<EngineRunner.Event>(
            capacity: capacity, lanes: EngineRunner.Event.lanes, lane: { $0.lane })
        for _ in 0..<capacity { #expect(mailbox.post(.frame(bytes: [], interfaceIndex: 1, outgoing: false))) }
        #expect(!mailbox.post(.frame(bytes: [], interfaceIndex: 1, outgoing: false)))
        let source = IPAddress.v4(IPv4Address(192, 0, 2, 2))
        for _ in 0..<capacity {
            #expect(mailbox.post(.mdns(bytes: [], source: source, port: 5353, interfaceIndex: 1, destination: nil)))
        }
        #expect(!mailbox.post(.mdns(bytes: [], source: source, port: 5353, interfaceIndex: 1, destination: nil)))
        #expect(mailbox.post(.linksChanged))
        #expect(
            mailbox.dropped(lane: EngineRunner.Event.framesLane) == 1
                && mailbox.dropped(lane: EngineRunner.Event.mdnsLane) == 1)
    }
}

/// A burst is answered in batches of at most 32 registrations (one fdatasync each); frames and mDNS packets do
/// not count toward that, only toward the 256 events processed between two chances to answer.
@Suite("Engine batches")
struct EngineBatchTests {
    @Test func batchesBoundRegistrationsAndEvents() {
        let registrations = EngineRunner.maximumBatch
        // N registrations make one batch, N + 1 make two.
        #expect(
            EngineRunner.batches(Array(repeating: true, count: registrations)) { $0 }.map(\.count) == [
                registrations
            ])
        #expect(
            EngineRunner.batches(Array(repeating: true, count: registrations + 1)) { $0 }.map(\.count) == [
                registrations, 1,
            ])
        // Frames interleaved with the registrations do not split them further.
        let mixed = (0..<registrations).flatMap { _ in [false, false, true] }
        let cut = EngineRunner.batches(mixed) { $0 }
        #expect(cut.count == 1 && cut[0].count == mixed.count)
        // N events make one batch, N + 1 make two, whatever their kind; nothing is lost or reordered.
        let events = EngineRunner.maximumBatchEvents
        #expect(EngineRunner.batches(Array(repeating: false, count: events)) { $0 }.map(\.count) == [events])
        let numbered = Array(0...events)
        let split = EngineRunner.batches(numbered) { _ in false }
        #expect(split.map(\.count) == [events, 1] && split.flatMap { $0 } == numbered)
        #expect(EngineRunner.batches([Bool]()) { $0 }.isEmpty)
    }
}

/// Legacy queries in a batch are answered before the registrations queued ahead of them; everything else keeps
/// its order.
@Suite("Engine batches")
struct EngineBatchOrderTests {
    static func mdns(port: Int) throws -> EngineRunner.Event {
        .mdns(
            bytes: [UInt8(port & 0xFF)], source: .v4(IPv4Address(192, 0, 2, 20)), port: UInt16(port),
            interfaceIndex: 2, destination: nil)
    }

    static func describe(_ events: [EngineRunner.Event]) -> [String] {
        events.map { event in
            switch event {
            case .mdns(_, _, let port, _, _): "mdns \(port)"
            case .frame(let bytes, _, _): "frame \(bytes.first ?? 0)"
            case .linksChanged: "links"
            default: "other"
            }
        }
    }

    @Test func legacyQueriesGoFirstAndTheRestKeepsItsOrder() throws {
        let events: [EngineRunner.Event] = [
            .frame(bytes: [1], interfaceIndex: 2, outgoing: false), try Self.mdns(port: 5353), .linksChanged,
            try Self.mdns(port: 40_000), .frame(bytes: [2], interfaceIndex: 2, outgoing: false),
            try Self.mdns(port: 40_001),
        ]
        #expect(
            Self.describe(EngineRunner.legacyQueriesFirst(events)) == [
                "mdns 40000", "mdns 40001", "frame 1", "mdns 5353", "links", "frame 2",
            ])
        let noLegacy = [events[0], events[1], events[2]]
        #expect(Self.describe(EngineRunner.legacyQueriesFirst(noLegacy)) == Self.describe(noLegacy))
    }
}
