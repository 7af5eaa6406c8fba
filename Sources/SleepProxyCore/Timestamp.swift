/// A point on a monotonic timeline, in nanoseconds.
///
/// The core never reads a clock: every event carries `now`. The I/O layer takes it from CLOCK_BOOTTIME, which
/// keeps counting through suspend and is not moved by wall-clock changes, so leases measured on it can neither
/// be lengthened nor shortened by an NTP step or an administrator's `date -s`.
public struct Timestamp: Hashable, Comparable, Sendable, CustomStringConvertible {
    public var nanoseconds: Int64

    public init(nanoseconds: Int64) { self.nanoseconds = nanoseconds }

    public static func seconds(_ seconds: Int64) -> Timestamp { Timestamp(nanoseconds: seconds * 1_000_000_000) }

    public static func < (lhs: Timestamp, rhs: Timestamp) -> Bool { lhs.nanoseconds < rhs.nanoseconds }

    public static func + (lhs: Timestamp, rhs: Duration) -> Timestamp {
        Timestamp(nanoseconds: lhs.nanoseconds &+ rhs.nanosecondsClamped)
    }

    public static func - (lhs: Timestamp, rhs: Duration) -> Timestamp {
        Timestamp(nanoseconds: lhs.nanoseconds &- rhs.nanosecondsClamped)
    }

    public static func - (lhs: Timestamp, rhs: Timestamp) -> Duration {
        .nanoseconds(lhs.nanoseconds &- rhs.nanoseconds)
    }

    public var description: String { "t+\(Double(self.nanoseconds) / 1e9)s" }
}

extension Duration {
    /// Nanoseconds, saturating at ±Int64.max (≈ 292 years).
    public var nanosecondsClamped: Int64 {
        let (seconds, attoseconds) = self.components
        let (fromSeconds, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
        if overflow { return seconds < 0 ? .min : .max }
        return fromSeconds &+ attoseconds / 1_000_000_000
    }

    /// Whole seconds, rounded down; negative durations give 0.
    public var wholeSeconds: Int64 { max(0, self.nanosecondsClamped / 1_000_000_000) }
}

extension Timestamp {
    /// `deadline` becomes `candidate` when that is earlier, or when there was none.
    @inlinable
    public static func keepEarlier(_ candidate: Timestamp?, in deadline: inout Timestamp?) {
        guard let candidate else { return }
        if let current = deadline, current <= candidate { return }
        deadline = candidate
    }
}
