import FoundationEssentials

/// A bounded queue between I/O threads (producers) and the engine thread (the only consumer).
///
/// The engine takes everything queued at once, which is what turns "whatever arrived while the last fdatasync
/// ran" into one batch. Events travel in lanes, each with its own bound: when a lane is full its new events are
/// dropped and counted, and the other lanes are untouched, so a LAN flooding ARP or mDNS sheds its own packets
/// and never crowds out a registration or an admin request. Order is kept across lanes.
final class Mailbox<Event>: @unchecked Sendable {
    // @unchecked: every field is guarded by `condition`.
    private let condition = Condition()
    private var events: [Event] = []
    private var queued: [Int]
    private var droppedByLane: [Int]
    private var stopped = false
    let capacity: Int
    private let lane: @Sendable (Event) -> Int

    /// `lanes` lanes of `capacity` events each; `lane` tells an event's lane (0 ..< lanes).
    init(capacity: Int, lanes: Int = 1, lane: @escaping @Sendable (Event) -> Int = { _ in 0 }) {
        precondition(lanes >= 1 && capacity >= 1)
        self.capacity = capacity
        self.queued = Array(repeating: 0, count: lanes)
        self.droppedByLane = Array(repeating: 0, count: lanes)
        self.lane = lane
    }

    /// Queues an event; false when its lane is full or the mailbox is stopped.
    @discardableResult
    func post(_ event: Event) -> Bool {
        let lane = min(max(0, self.lane(event)), self.queued.count - 1)
        self.condition.lock()
        defer { self.condition.unlock() }
        guard !self.stopped, self.queued[lane] < self.capacity else {
            self.droppedByLane[lane] += 1
            return false
        }
        self.queued[lane] += 1
        self.events.append(event)
        self.condition.signal()
        return true
    }

    /// Waits until there are events, `timeout` passes, or the mailbox is stopped; returns what is queued.
    func take(timeout: TimeInterval) -> (events: [Event], stopped: Bool) {
        self.condition.lock()
        defer { self.condition.unlock() }
        if self.events.isEmpty, !self.stopped {
            self.condition.wait(seconds: timeout)
        }
        let taken = self.events
        self.events.removeAll(keepingCapacity: true)
        for index in self.queued.indices { self.queued[index] = 0 }
        return (taken, self.stopped)
    }

    /// Takes the events of one lane queued now, without waiting; the other lanes' events stay, in their order.
    /// The engine answers mDNS queries this way between the registrations of a long batch.
    func take(lane: Int) -> [Event] {
        self.condition.lock()
        defer { self.condition.unlock() }
        guard self.queued[lane] > 0 else { return [] }
        var taken: [Event] = []
        var kept: [Event] = []
        kept.reserveCapacity(self.events.count)
        for event in self.events {
            if self.lane(event) == lane { taken.append(event) } else { kept.append(event) }
        }
        self.events = kept
        self.queued[lane] = 0
        return taken
    }

    /// Events refused because their lane was full or the mailbox stopped, in all lanes.
    var dropped: Int {
        self.condition.lock()
        defer { self.condition.unlock() }
        return self.droppedByLane.reduce(0, +)
    }

    /// The same, for one lane.
    func dropped(lane: Int) -> Int {
        self.condition.lock()
        defer { self.condition.unlock() }
        return self.droppedByLane[lane]
    }

    func stop() {
        self.condition.lock()
        self.stopped = true
        self.condition.signal()
        self.condition.unlock()
    }
}
