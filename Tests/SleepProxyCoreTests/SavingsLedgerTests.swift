import Testing

@testable import SleepProxyCore

/// The savings ledger (docs/savings.md): monotonic durations on wall-clock days, cut at local midnight, bounded in
/// days and hosts.
@Suite("Savings ledger")
struct SavingsLedgerTests {
    static let day = 20_000  // 2024-10-04
    static let hour: Int64 = 3_600_000

    /// `hours` into local day `day`, on a monotonic timeline that started at that day's midnight.
    static func at(_ hours: Double, day: Int = day) -> (Timestamp, LocalDayTime) {
        let milliseconds = Int64(hours * Double(Self.hour))
        let monotonic = Timestamp(nanoseconds: (Int64(day - Self.day) * 24 * Self.hour + milliseconds) * 1_000_000)
        return (monotonic, LocalDayTime(day: day, millisecondsIntoDay: milliseconds))
    }

    static func enter(
        _ ledger: inout SavingsLedger, _ state: HostState, _ host: String, _ hours: Double, day: Int = day
    ) {
        let (now, local) = Self.at(hours, day: day)
        ledger.hostEntered(state, host: host, name: "\(host).local.", now: now, local: local)
    }

    static func advance(_ ledger: inout SavingsLedger, _ hours: Double, day: Int = day) {
        let (now, local) = Self.at(hours, day: day)
        ledger.advance(now: now, local: local)
    }

    /// Two hosts on a known schedule: the hours come out exact, waking counts as asleep, a hand-back as awake,
    /// standby and gone as neither.
    @Test func aKnownDayGivesItsHours() throws {
        var ledger = SavingsLedger()
        Self.advance(&ledger, 0)
        Self.enter(&ledger, .starting, "a", 0)
        Self.enter(&ledger, .asleep, "a", 1)
        Self.enter(&ledger, .starting, "b", 2)
        Self.enter(&ledger, .asleep, "b", 3)
        Self.enter(&ledger, .standby, "b", 5)
        Self.enter(&ledger, .asleep, "b", 6)
        Self.enter(&ledger, .waking, "a", 8)
        Self.enter(&ledger, .handedBack, "a", 8.5)
        Self.enter(&ledger, .gone, "b", 10)
        // A late caller's earlier time counts nothing twice.
        Self.advance(&ledger, 9)
        Self.advance(&ledger, 24 - 1.0 / 3_600)
        let a = try #require(ledger.hosts["a"]?.days.last)
        #expect(a.asleepMilliseconds == Int64(7.5 * Double(Self.hour)))
        #expect(a.awakeMilliseconds == Int64((1 + 15.5) * Double(Self.hour)) - 1_000)
        let b = try #require(ledger.hosts["b"]?.days.last)
        #expect(b.asleepMilliseconds == 6 * Self.hour && b.awakeMilliseconds == 1 * Self.hour)
        #expect(ledger.hosts["a"]?.name == "a.local.")
    }

    /// A span over local midnight is cut there.
    @Test func midnightCutsASpan() throws {
        var ledger = SavingsLedger()
        Self.enter(&ledger, .asleep, "a", 23.5)
        Self.advance(&ledger, 0.25, day: Self.day + 1)
        let days = try #require(ledger.hosts["a"]?.days)
        #expect(days.map(\.day) == [Self.day, Self.day + 1])
        #expect(days.map(\.asleepMilliseconds) == [Self.hour / 2, Self.hour / 4])
    }

    /// The wall clock jumping a year ahead (a Pi without a clock finding NTP) adds only the monotonic time, to the
    /// day it now shows; stepped back, the span goes to the earlier day it shows.
    @Test func aClockStepMovesTheDayNotTheDuration() throws {
        var ledger = SavingsLedger()
        let (start, local) = Self.at(12)
        ledger.hostEntered(.asleep, host: "a", name: nil, now: start, local: local)
        let later = start + .seconds(60)
        ledger.advance(now: later, local: LocalDayTime(day: Self.day + 365, millisecondsIntoDay: 12 * Self.hour))
        ledger.advance(now: later + .seconds(30), local: LocalDayTime(day: Self.day - 2, millisecondsIntoDay: 0))
        let days = try #require(ledger.hosts["a"]?.days)
        #expect(days.map(\.day) == [Self.day - 2, Self.day + 365])
        #expect(days.map(\.asleepMilliseconds) == [30_000, 60_000])
    }

    @Test func wakesAndDeclinedWakesCountOnTheirDay() throws {
        var ledger = SavingsLedger()
        Self.enter(&ledger, .asleep, "a", 1)
        let (now, local) = Self.at(2)
        ledger.woke(host: "a", declined: true, now: now, local: local)
        ledger.woke(host: "a", declined: true, now: now, local: local)
        ledger.woke(host: "a", declined: false, now: now, local: local)
        ledger.woke(host: "unknown", declined: false, now: now, local: local)
        let day = try #require(ledger.hosts["a"]?.days.last)
        #expect(day.wakes == 1 && day.declinedWakes == 2)
        #expect(ledger.hosts["unknown"] == nil)
    }

    /// `daysKept` days stay; the one before them goes, and a host with nothing left that counts as neither goes too.
    @Test func daysAreKeptForTheirBoundAndNoLonger() throws {
        var ledger = SavingsLedger()
        Self.enter(&ledger, .asleep, "a", 1)
        Self.enter(&ledger, .asleep, "b", 1)
        Self.enter(&ledger, .gone, "b", 2)
        let lastKept = Self.day + SavingsLedger.daysKept - 1
        Self.advance(&ledger, 3, day: Self.day + 1)
        Self.advance(&ledger, 1, day: lastKept)
        #expect(ledger.hosts["a"]?.days.first?.day == Self.day, "N days: the first is still there")
        #expect(ledger.hosts["b"]?.days.first?.day == Self.day)
        Self.advance(&ledger, 1, day: lastKept + 1)
        #expect(ledger.hosts["a"]?.days.first?.day == Self.day + 1, "N + 1: the first went")
        #expect(ledger.hosts["b"] == nil, "gone, and nothing kept")
        #expect(ledger.asleepSinceStart["b"] == nil && ledger.asleepSinceStart["a"] != nil, "nor its running total")
    }

    /// At most `maximumHosts`: one more is not kept until a host leaves (neither held nor counted on a day kept).
    @Test func hostsAreBounded() {
        var ledger = SavingsLedger()
        for index in 0..<SavingsLedger.maximumHosts {
            Self.enter(&ledger, .asleep, "h\(index)", 1, day: index == 0 ? Self.day : Self.day + 1)
        }
        #expect(ledger.hosts.count == SavingsLedger.maximumHosts && ledger.hosts["h0"] != nil)
        Self.enter(&ledger, .asleep, "new", 1, day: Self.day + 1)
        #expect(ledger.hosts.count == SavingsLedger.maximumHosts)
        #expect(ledger.hosts["h0"] != nil && ledger.hosts["new"] == nil, "N + 1: not kept, and nobody traded for it")
        // Once a host is neither held nor counted on any day kept, it goes, and a new one has its place.
        Self.enter(&ledger, .gone, "h0", 2, day: Self.day + 1)
        Self.advance(&ledger, 1, day: Self.day + 1 + SavingsLedger.daysKept)
        #expect(ledger.hosts["h0"] == nil)
        Self.enter(&ledger, .asleep, "new", 1, day: Self.day + 1 + SavingsLedger.daysKept)
        #expect(ledger.hosts["new"] != nil)
    }
}
