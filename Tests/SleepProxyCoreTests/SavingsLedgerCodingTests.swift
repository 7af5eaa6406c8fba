import Testing

@testable import SleepProxyCore

/// The ledger's file (docs/savings.md, "On disk"): what is written reads back whole; anything else is refused
/// whole, line named, and nothing of it is taken.
@Suite("Savings ledger on disk")
struct SavingsLedgerCodingTests {
    typealias Ledger = SavingsLedger

    static func sample() -> SavingsLedger {
        var ledger = SavingsLedger()
        let start = Timestamp.seconds(100)
        let local = LocalDayTime(day: 20_000, millisecondsIntoDay: 3_600_000)
        ledger.advance(now: start, local: local)
        ledger.hostEntered(.asleep, host: "02:00:00:00:00:01", name: "mac mini.local.", now: start, local: local)
        ledger.hostEntered(.awake, host: "02:00:00:00:00:02", name: nil, now: start, local: local)
        ledger.woke(host: "02:00:00:00:00:01", declined: true, now: start + .seconds(10), local: local)
        let tomorrow = LocalDayTime(day: 20_001, millisecondsIntoDay: 60_000)
        ledger.advance(now: start + .seconds(86_400), local: tomorrow)
        return ledger
    }

    @Test func whatIsWrittenReadsBackWhole() throws {
        let ledger = Self.sample()
        let read = try SavingsLedger(decoding: ledger.encoded())
        #expect(read.hosts.mapValues(\.days) == ledger.hosts.mapValues(\.days))
        #expect(read.hosts["02:00:00:00:00:01"]?.name == "mac mini.local.")
        #expect(read.hosts["02:00:00:00:00:02"]?.name == nil)
        #expect(read.hosts.values.allSatisfy { $0.counts == .neither }, "how each counts comes from the engine")
        #expect(read.last == nil)
    }

    @Test func anythingElseIsRefusedWithItsLine() {
        let good = Self.sample().encoded()
        let cases: [(String, SavingsLedger.DecodingError)] = [
            ("", .notALedger),
            ("sleep-proxy-savings 2\n", .notALedger),
            (Ledger.header + "\n20000 1 2 3 4\n", .malformedLine(2)),
            (Ledger.header + "\nhost a\n20000 1 2 3\n", .malformedLine(3)),
            (Ledger.header + "\nhost a\n20000 -1 2 3 4\n", .malformedLine(3)),
            (Ledger.header + "\nhost a\n20000 999999999999 2 3 4\n", .malformedLine(3)),
            (Ledger.header + "\nhost a\n20000 1 2 x 4\n", .malformedLine(3)),
            (Ledger.header + "\nhost \n", .malformedLine(2)),
            (Ledger.header + "\nhost a\nhost a\n", .malformedLine(3)),
            (Ledger.header + "\nhost a\n20001 1 2 3 4\n20000 1 2 3 4\n", .daysOutOfOrder(line: 4)),
            (good + "garbage\n", .malformedLine(good.split(separator: "\n").count + 1)),
        ]
        for (text, error) in cases {
            #expect(throws: error, "\(text)") { try SavingsLedger(decoding: text) }
        }
        #expect(throws: SavingsLedger.DecodingError.tooLarge) {
            try SavingsLedger(decoding: Ledger.header + "\n" + String(repeating: " ", count: Ledger.maximumFileBytes))
        }
    }

    /// A wall clock stepped back over the same day again and again files more than a day on it; the day saturates,
    /// and what the ledger writes always reads back.
    @Test func aDayFiledAgainAndAgainStillReadsBack() throws {
        var ledger = SavingsLedger()
        var now = Timestamp.seconds(0)
        let day = LocalDayTime(day: 20_000, millisecondsIntoDay: 0)
        ledger.advance(now: now, local: day)
        ledger.hostEntered(.asleep, host: "a", name: nil, now: now, local: day)
        for _ in 0..<5 {
            now = now + .seconds(86_400)
            ledger.advance(now: now, local: day)
        }
        #expect(ledger.hosts["a"]?.days.last?.asleepMilliseconds == SavingsLedger.maximumMillisecondsADay)
        let read = try SavingsLedger(decoding: ledger.encoded())
        #expect(read.hosts["a"]?.days == ledger.hosts["a"]?.days)
    }

    /// `maximumHosts` hosts and `daysKept` days each read back; one more of either is refused.
    @Test func theBoundsHoldAtNAndRefuseNPlusOne() throws {
        func hosts(_ count: Int) -> String {
            Ledger.header + "\n" + (0..<count).map { "host h\($0)\n20000 1 1 0 0\n" }.joined()
        }
        #expect(try SavingsLedger(decoding: hosts(Ledger.maximumHosts)).hosts.count == Ledger.maximumHosts)
        #expect(throws: SavingsLedger.DecodingError.tooManyHosts) {
            try SavingsLedger(decoding: hosts(Ledger.maximumHosts + 1))
        }
        func days(_ count: Int) -> String {
            Ledger.header + "\nhost a\n" + (0..<count).map { "\(20_000 + $0) 1 1 0 0\n" }.joined()
        }
        #expect(try SavingsLedger(decoding: days(Ledger.daysKept)).hosts["a"]?.days.count == Ledger.daysKept)
        #expect(throws: SavingsLedger.DecodingError.tooManyDays(host: "a")) {
            try SavingsLedger(decoding: days(Ledger.daysKept + 1))
        }
    }

    /// Names come from the wire: a line break or a name longer than the file takes must never make the whole file
    /// unreadable at the next start. `maximumNameBytes` is kept whole; one byte more is cut at a character.
    @Test func namesFromTheWireAlwaysReadBack() throws {
        let limit = Ledger.maximumNameBytes
        let names = [
            "evil\nhost 1 2 3 4\nhost x", "cr\r\nlf", String(repeating: "a", count: limit),
            String(repeating: "a", count: limit + 1), String(repeating: "é", count: limit / 2 + 1),
        ]
        var ledger = SavingsLedger()
        let local = LocalDayTime(day: 20_000, millisecondsIntoDay: 0)
        ledger.advance(now: .seconds(0), local: local)
        for (index, name) in names.enumerated() {
            ledger.hostEntered(.asleep, host: "02:00:00:00:00:0\(index)", name: name, now: .seconds(0), local: local)
        }
        ledger.advance(now: .seconds(60), local: LocalDayTime(day: 20_000, millisecondsIntoDay: 60_000))
        let read = try SavingsLedger(decoding: ledger.encoded())
        #expect(read.hosts.count == names.count)
        #expect(read.hosts["02:00:00:00:00:00"]?.name == "evil host 1 2 3 4 host x")
        #expect(read.hosts["02:00:00:00:00:02"]?.name?.utf8.count == limit, "N: kept whole")
        #expect(read.hosts["02:00:00:00:00:03"]?.name?.utf8.count == limit, "N + 1: cut to N")
        #expect(read.hosts["02:00:00:00:00:04"]?.name?.utf8.count == limit, "cut at a character, not a byte")
        #expect(throws: SavingsLedger.DecodingError.malformedLine(2)) {
            try SavingsLedger(decoding: Ledger.header + "\nhost a " + String(repeating: "a", count: limit + 1) + "\n")
        }
    }
}
