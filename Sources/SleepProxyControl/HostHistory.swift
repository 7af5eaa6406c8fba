import FoundationEssentials

/// A host's history over a window, as the status page and `/api/v1/hosts/MAC` give it.
public struct HostHistory: Codable, Hashable, Sendable {
    public var mac: String
    public var hostName: String?
    public var from: Date
    public var to: Date
    /// Where the host stood at `from`, when a record before the window says (nil: nothing is known).
    public var stateAtStart: PresenceState?
    /// The records inside the window, oldest first.
    public var records: [HistoryRecord]

    public init(
        mac: String, hostName: String?, from: Date, to: Date, stateAtStart: PresenceState?, records: [HistoryRecord]
    ) {
        self.mac = mac
        self.hostName = hostName
        self.from = from
        self.to = to
        self.stateAtStart = stateAtStart
        self.records = records
    }

    /// A stretch of time in one state.
    public struct Span: Hashable, Sendable {
        public var from: Date
        public var to: Date
        /// nil: nothing is known (before the first record).
        public var state: PresenceState?
    }

    /// The window cut into stretches of one state each, in order, covering it without gaps or overlaps.
    public var spans: [Span] {
        var spans: [Span] = []
        var start = self.from
        var state = self.stateAtStart
        for record in self.records {
            guard let next = record.enteredState, next != state else { continue }
            // Never before the stretch it ends: records out of time order (a wall clock stepped back) draw no
            // stretch backwards and none twice (docs/time.md).
            let at = min(max(record.time, start), self.to)
            if at > start { spans.append(Span(from: start, to: at, state: state)) }
            start = at
            state = next
        }
        if self.to > start { spans.append(Span(from: start, to: self.to, state: state)) }
        return spans
    }

    /// The same history over its last `seconds` only.
    public func window(lastSeconds seconds: Double) -> HostHistory {
        let from = max(self.from, self.to.addingTimeInterval(-seconds))
        var state = self.stateAtStart
        var inside: [HistoryRecord] = []
        for record in self.records {
            if record.time < from {
                if let entered = record.enteredState { state = entered }
            } else {
                inside.append(record)
            }
        }
        return HostHistory(
            mac: self.mac, hostName: self.hostName, from: from, to: self.to, stateAtStart: state, records: inside)
    }

    /// Wake decisions in the window: wakes, their outcomes, declined and ignored connections.
    public var decisions: [WakeLogEntry] { self.records.compactMap(\.event) }
}
