import SleepProxyCore

/// How many button presses the link acts on: a person presses a few times a minute at most, while anyone with
/// write access to the command topics could publish thousands a second, each a request to the engine and a line
/// in the log. Presses past the budget are dropped and counted, and the first of them in a window is said once.
public struct PressBudget: Sendable {
    /// Presses acted on per window: ten hosts woken at once by an automation, twice.
    public static let maximumPresses = 20
    public static let window: Duration = .seconds(60)

    private var windowStart: Timestamp?
    private var used = 0
    public private(set) var dropped = 0

    public init() {}

    public enum Verdict: Hashable, Sendable {
        case act
        /// The first press dropped in this window: say so once.
        case dropFirst
        case drop
    }

    public mutating func press(now: Timestamp) -> Verdict {
        if let start = self.windowStart, now - start < Self.window {
            self.used += 1
        } else {
            self.windowStart = now
            self.used = 1
        }
        guard self.used > Self.maximumPresses else { return .act }
        self.dropped += 1
        return self.used == Self.maximumPresses + 1 ? .dropFirst : .drop
    }
}
