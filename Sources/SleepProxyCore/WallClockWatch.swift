/// Notices when the wall clock is stepped.
///
/// Durations never depend on the wall clock (leases, holds, windows and rate limits run on the boot clock,
/// `Timestamp`), but the times the daemon shows and stores do. A Raspberry Pi has no clock of its own while off:
/// it starts with the time it saved at shutdown (or 1970), and NTP steps it minutes, days or years later; an
/// administrator may run `date -s`. The watch compares the two clocks at each look, so that such a step is told
/// to the operator once, with its size, instead of showing only as a jump in the history (docs/time.md).
public struct WallClockWatch: Sendable, Hashable {
    /// A change of the wall clock against the boot clock larger than this between two looks is a step. NTP slews
    /// at most 500 ppm (0.5 ms a second), so two looks a second apart never differ by more than a millisecond
    /// unless the clock was set; a step under a second changes nothing anyone reads.
    public static let stepThreshold: Duration = .seconds(1)

    /// Wall-clock nanoseconds minus boot-clock nanoseconds, as of the last look.
    public private(set) var offsetNanoseconds: Int64

    public init(now: Timestamp, wallNanoseconds: Int64) {
        self.offsetNanoseconds = wallNanoseconds &- now.nanoseconds
    }

    /// Looks again: the step since the last look (positive: the wall clock moved forward), or nil when there was
    /// none. Slewing is absorbed look by look, so it never adds up to a step.
    public mutating func look(now: Timestamp, wallNanoseconds: Int64) -> Duration? {
        let offset = wallNanoseconds &- now.nanoseconds
        let change = offset &- self.offsetNanoseconds
        self.offsetNanoseconds = offset
        let threshold = Self.stepThreshold.nanosecondsClamped
        guard change > threshold || change < -threshold else { return nil }
        return .nanoseconds(change)
    }
}
