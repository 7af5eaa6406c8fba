/// What the ledger adds up to over a stretch of days, with the power figures a person gave (docs/savings.md,
/// "Energy"): the sums behind `sleepproxyctl savings`, the status page, the API and Home Assistant.
extension SavingsLedger {
    public struct Totals: Hashable, Sendable {
        public var asleepMilliseconds: Int64 = 0
        public var awakeMilliseconds: Int64 = 0
        public var wakes = 0
        public var declinedWakes = 0
        public var savedWattHours = 0.0

        public init() {}

        public mutating func add(_ other: Totals) {
            self.asleepMilliseconds += other.asleepMilliseconds
            self.awakeMilliseconds += other.awakeMilliseconds
            self.wakes += other.wakes
            self.declinedWakes += other.declinedWakes
            self.savedWattHours += other.savedWattHours
        }
    }

    /// One host's sums over `days` (local day numbers), its energy from `draw`.
    public func totals(forHost key: String, days: ClosedRange<Int>, draw: PowerDraw) -> Totals {
        var totals = Totals()
        for day in Self.within(self.hosts[key]?.days ?? [], days) {
            totals.asleepMilliseconds += day.asleepMilliseconds
            totals.awakeMilliseconds += day.awakeMilliseconds
            totals.wakes += day.wakes
            totals.declinedWakes += day.declinedWakes
        }
        totals.savedWattHours = draw.savedWattHours(asleepMilliseconds: totals.asleepMilliseconds)
        return totals
    }

    /// How long the proxy itself ran over `days`.
    public func runningMilliseconds(days: ClosedRange<Int>) -> Int64 {
        Self.within(self.running, days).reduce(0) { $0 + $1.awakeMilliseconds }
    }

    /// The days of `days` (kept in order), found from the end: a month or the chart's 30 days are the last of up to
    /// 400, and the status page asks for them every time it is drawn.
    static func within(_ kept: [Day], _ days: ClosedRange<Int>) -> [Day] {
        var found: [Day] = []
        for day in kept.reversed() {
            if day.day < days.lowerBound { break }
            if day.day <= days.upperBound { found.append(day) }
        }
        return found.reversed()
    }

    /// Every host's sums for each day of `days`, in order (the status page's bars): a day nobody slept is there
    /// with zeros.
    public func daily(days: ClosedRange<Int>, power: PowerFigures) -> [(day: Int, totals: Totals)] {
        var byDay: [Int: Totals] = [:]
        for (key, host) in self.hosts {
            let draw = power.draw(forHost: key).draw
            for day in Self.within(host.days, days) {
                var totals = Totals()
                totals.asleepMilliseconds = day.asleepMilliseconds
                totals.awakeMilliseconds = day.awakeMilliseconds
                totals.wakes = day.wakes
                totals.declinedWakes = day.declinedWakes
                totals.savedWattHours = draw.savedWattHours(asleepMilliseconds: day.asleepMilliseconds)
                byDay[day.day, default: Totals()].add(totals)
            }
        }
        return days.map { ($0, byDay[$0] ?? Totals()) }
    }
}

/// A local day number as a calendar date, and back (proleptic Gregorian, days since 1970-01-01). The ledger files
/// days by number; people ask by month.
public struct CivilDate: Hashable, Sendable, Comparable, CustomStringConvertible {
    public var year: Int
    public var month: Int
    public var day: Int

    public init(year: Int, month: Int, day: Int) {
        self.year = year
        self.month = month
        self.day = day
    }

    /// From days since 1970-01-01 (the usual era arithmetic: 400-year eras of 146,097 days, years from March).
    public init(dayNumber: Int) {
        let shifted = dayNumber + 719_468
        let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
        let dayOfEra = shifted - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthFromMarch = (5 * dayOfYear + 2) / 153
        self.day = dayOfYear - (153 * monthFromMarch + 2) / 5 + 1
        self.month = monthFromMarch < 10 ? monthFromMarch + 3 : monthFromMarch - 9
        self.year = yearOfEra + era * 400 + (self.month <= 2 ? 1 : 0)
    }

    /// Days since 1970-01-01.
    public var dayNumber: Int {
        let year = self.month <= 2 ? self.year - 1 : self.year
        let era = (year >= 0 ? year : year - 399) / 400
        let yearOfEra = year - era * 400
        let monthFromMarch = self.month > 2 ? self.month - 3 : self.month + 9
        let dayOfYear = (153 * monthFromMarch + 2) / 5 + self.day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The local day numbers of this date's month.
    public var monthDays: ClosedRange<Int> {
        let first = CivilDate(year: self.year, month: self.month, day: 1).dayNumber
        let next =
            self.month == 12
            ? CivilDate(year: self.year + 1, month: 1, day: 1)
            : CivilDate(year: self.year, month: self.month + 1, day: 1)
        return first...(next.dayNumber - 1)
    }

    /// `YYYY-MM` (what `sleepproxyctl savings --month` takes), as its first day; nil for anything else, or a year
    /// outside 1970-9999.
    public init?(month text: String) {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 2, parts[0].count == 4, parts[1].count == 2,
            parts.allSatisfy({ $0.allSatisfy { $0.isASCII && $0.isNumber } }),
            let year = Int(parts[0]), let month = Int(parts[1]), (1970...9999).contains(year), (1...12).contains(month)
        else { return nil }
        self.init(year: year, month: month, day: 1)
    }

    public var monthText: String { Self.pad(self.year, 4) + "-" + Self.pad(self.month, 2) }
    public var description: String { self.monthText + "-" + Self.pad(self.day, 2) }

    public static func < (lhs: CivilDate, rhs: CivilDate) -> Bool { lhs.dayNumber < rhs.dayNumber }

    private static func pad(_ value: Int, _ width: Int) -> String {
        let text = String(value)
        return String(repeating: "0", count: max(0, width - text.count)) + text
    }
}
