import SleepProxyWire
import Testing

@testable import SleepProxyCore

/// Power figures, calendar months, the file's appends and the sums (docs/savings.md).
@Suite("Savings figures")
struct SavingsFiguresTests {
    @Test func powerFiguresParseAndBadOnesAreRefused() throws {
        #expect(try PowerDraw(parsing: "45/2", asleepDefault: 4) == PowerDraw(awakeWatts: 45, asleepWatts: 2))
        #expect(try PowerDraw(parsing: "7.5", asleepDefault: 4) == PowerDraw(awakeWatts: 7.5, asleepWatts: 4))
        #expect(try PowerDraw(parsing: "3", asleepDefault: 4) == PowerDraw(awakeWatts: 3, asleepWatts: 3))
        let max = PowerDraw.maximumWatts
        #expect(try PowerDraw(parsing: "\(Int(max))/0", asleepDefault: 4).awakeWatts == max, "N")
        #expect(throws: PowerDraw.ParseError.outOfRange("\(Int(max) + 1)/0"), "N + 1") {
            try PowerDraw(parsing: "\(Int(max) + 1)/0", asleepDefault: 4)
        }
        for bad in ["", "/", "45/", "-3/1", "1e3", "nan", "inf", "45/2/1", "4.5.1", "0x10", "45 W"] {
            #expect(throws: PowerDraw.ParseError.self, "\(bad)") { try PowerDraw(parsing: bad, asleepDefault: 4) }
        }
        #expect(throws: PowerDraw.ParseError.asleepAboveAwake("2/45")) {
            try PowerDraw(parsing: "2/45", asleepDefault: 4)
        }
        let (mac, draw) = try PowerDraw.parseHost("02:00:00:00:00:05@45/2", asleepDefault: 4)
        #expect(mac == MACAddress("02:00:00:00:00:05") && draw.awakeWatts == 45)
        for bad in ["45/2", "02:00:00:00:00:05", "ff:ff:ff:ff:ff:ff@45", "01:00:5e:00:00:fb@45", "zz@45"] {
            #expect(throws: PowerDraw.ParseError.self, "\(bad)") { try PowerDraw.parseHost(bad, asleepDefault: 4) }
        }
        #expect(PowerDraw(awakeWatts: 50, asleepWatts: 4).savedWattHours(asleepMilliseconds: 3_600_000) == 46)
        #expect(PowerDraw(awakeWatts: 50, asleepWatts: 4).description == "50/4")
    }

    @Test func daysAndMonthsConvert() throws {
        #expect(CivilDate(dayNumber: 0) == CivilDate(year: 1970, month: 1, day: 1))
        #expect(CivilDate(dayNumber: 20_000).description == "2024-10-04")
        #expect(CivilDate(year: 2024, month: 2, day: 29).dayNumber == 19_782)
        for day in stride(from: -800, through: 80_000, by: 37) {
            #expect(CivilDate(dayNumber: day).dayNumber == day)
        }
        let february = try #require(CivilDate(month: "2024-02"))
        #expect(february.monthDays.count == 29 && CivilDate(dayNumber: february.monthDays.lowerBound).day == 1)
        #expect(try #require(CivilDate(month: "2026-12")).monthDays.count == 31)
        for bad in ["2026-13", "2026-00", "26-11", "2026-1", "2026-11-01", "+026-11", "1969-12", "２０２６-11"] {
            #expect(CivilDate(month: bad) == nil, "\(bad)")
        }
    }

    /// What changed since the last take is appended; the file of the whole and its appends reads back as the
    /// ledger; an append cut short is left out, anything else wrong refuses the whole file with its line.
    @Test func appendsReadBackAsTheLedger() throws {
        var ledger = SavingsLedger()
        let local = { (ms: Int64) in LocalDayTime(day: 20_000, millisecondsIntoDay: ms) }
        ledger.advance(now: .seconds(0), local: local(0))
        ledger.hostEntered(.asleep, host: "a", name: "a.local.", now: .seconds(0), local: local(0))
        ledger.advance(now: .seconds(60), local: local(60_000))
        var file = ledger.encoded()
        _ = ledger.takeChanges()
        #expect(ledger.takeChanges() == nil, "nothing changed since")
        ledger.hostEntered(.awake, host: "b", name: "b.local.", now: .seconds(120), local: local(120_000))
        ledger.advance(now: .seconds(86_400), local: LocalDayTime(day: 20_001, millisecondsIntoDay: 0))
        let taken = ledger.takeChanges()
        let changes = try #require(taken)
        #expect(changes.hosts["a"]?.days.map(\.day) == [20_000], "only the days that changed")
        file += changes.encoded()
        let read = try SavingsLedger(decodingAppends: file)
        #expect(read.hosts.mapValues(\.days) == ledger.hosts.mapValues(\.days))
        #expect(read.running == ledger.running && !read.tornTail)
        #expect(read.running.first?.awakeMilliseconds == 86_400_000)
        #expect(ledger.asleepSinceStart["a"] == 86_400_000 && ledger.asleepSinceStart["b"] == nil)

        let torn = try SavingsLedger(decodingAppends: file + SavingsLedger.header + "\nhost a\n20000 99")
        #expect(torn.tornTail && torn.hosts.mapValues(\.days) == read.hosts.mapValues(\.days))
        let lines = file.split(separator: "\n").count
        #expect(throws: SavingsLedger.DecodingError.malformedLine(lines + 2)) {
            try SavingsLedger(decodingAppends: file + SavingsLedger.header + "\n20000 1 1 0 0\n")
        }
        #expect(throws: SavingsLedger.DecodingError.notALedger) { try SavingsLedger(decodingAppends: "host a\n") }
    }

    /// A month's sums with each host's own figure or the default, and the days nobody slept as zeros.
    @Test func sumsUseEachHostsFigure() throws {
        var ledger = SavingsLedger()
        let mac = "02:00:00:00:00:05"
        let local = LocalDayTime(day: 20_000, millisecondsIntoDay: 0)
        ledger.advance(now: .seconds(0), local: local)
        ledger.hostEntered(.asleep, host: mac, name: nil, now: .seconds(0), local: local)
        ledger.hostEntered(.asleep, host: "02:00:00:00:00:06", name: nil, now: .seconds(0), local: local)
        ledger.advance(now: .seconds(7_200), local: LocalDayTime(day: 20_000, millisecondsIntoDay: 7_200_000))
        let power = PowerFigures(hosts: [MACAddress(mac)!: PowerDraw(awakeWatts: 10, asleepWatts: 1)])
        let own = ledger.totals(forHost: mac, days: 20_000...20_000, draw: power.draw(forHost: mac).draw)
        #expect(own.asleepMilliseconds == 7_200_000 && own.savedWattHours == 18)
        let draw = power.draw(forHost: mac).draw
        #expect(ledger.totals(forHost: mac, days: 19_000...19_999, draw: draw) == SavingsLedger.Totals(), "before")
        #expect(ledger.totals(forHost: mac, days: 20_001...20_400, draw: draw) == SavingsLedger.Totals(), "after")
        #expect(power.draw(forHost: "02:00:00:00:00:06").isDefault)
        let daily = ledger.daily(days: 19_999...20_001, power: power)
        #expect(daily.map(\.day) == [19_999, 20_000, 20_001])
        #expect(daily[1].totals.savedWattHours == 18 + 92 && daily[0].totals == SavingsLedger.Totals())
        #expect(ledger.runningMilliseconds(days: 20_000...20_000) == 7_200_000)
    }
}
