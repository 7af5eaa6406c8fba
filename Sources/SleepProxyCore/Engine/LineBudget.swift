/// Log lines that the network can cause, bounded (docs/scale.md, "Logging what the network triggers"): a full proxy in a registration storm
/// refused 10,000 hosts, each retrying, and wrote a warning line for every datagram, over 13,000 of them. Each
/// kind of line gets `linesPerWindow` lines a window; past it they are counted, and the first line of a later
/// window says how many were left out. The counters the metrics export are unaffected.
public struct LineBudget: Sendable {
    /// Ours: twenty lines of one kind a minute show a person what is going on (which hosts, from where) without
    /// burying everything else; a host's own retries (Apple's client tries three times) fit easily.
    public static let linesPerWindow = 20
    public static let window: Duration = .seconds(60)

    struct Slot: Sendable {
        var windowStart: Timestamp
        var used = 0
        var suppressed = 0
    }

    /// One slot per kind; kinds are our own words (a refusal reason, a parse problem), never wire data, so the
    /// table is bounded by the code.
    var slots: [String: Slot] = [:]

    public init() {}

    /// Whether a line of `kind` may be written at `now`; `leftOut` is how many of its kind were not written in
    /// earlier windows (to be said once, now), and `last` is true for the last line this window allows.
    public mutating func admit(_ kind: String, now: Timestamp) -> (allowed: Bool, leftOut: Int, last: Bool) {
        var slot = self.slots[kind] ?? Slot(windowStart: now)
        var leftOut = 0
        if now - slot.windowStart >= Self.window {
            leftOut = slot.suppressed
            slot = Slot(windowStart: now)
        }
        defer { self.slots[kind] = slot }
        guard slot.used < Self.linesPerWindow else {
            slot.suppressed += 1
            return (false, leftOut, false)
        }
        slot.used += 1
        return (true, leftOut, slot.used == Self.linesPerWindow)
    }
}
