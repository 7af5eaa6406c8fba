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
    /// One queue per lane, each event with its arrival number, so that one lane is taken out whole in O(1)
    /// (`take(lane:)`, called after every captured frame while a storm runs) and all of them are merged back
    /// into arrival order (`take(timeout:)`).
    private var queues: [[(sequence: UInt64, event: Event)]]
    private var sequence: UInt64 = 0
    private var droppedByLane: [Int]
    private var stopped = false
    let capacity: Int
    private let lane: @Sendable (Event) -> Int

    /// `lanes` lanes of `capacity` events each; `lane` tells an event's lane (0 ..< lanes).
    init(capacity: Int, lanes: Int = 1, lane: @escaping @Sendable (Event) -> Int = { _ in 0 }) {
        precondition(lanes >= 1 && capacity >= 1)
        self.capacity = capacity
        self.queues = Array(repeating: [], count: lanes)
        self.droppedByLane = Array(repeating: 0, count: lanes)
        self.lane = lane
    }

    /// Queues an event; false when its lane is full or the mailbox is stopped.
    @discardableResult
    func post(_ event: Event) -> Bool {
        let lane = min(max(0, self.lane(event)), self.queues.count - 1)
        self.condition.lock()
        defer { self.condition.unlock() }
        guard !self.stopped, self.queues[lane].count < self.capacity else {
            self.droppedByLane[lane] += 1
            return false
        }
        self.sequence &+= 1
        self.queues[lane].append((self.sequence, event))
        self.condition.signal()
        return true
    }

    /// Waits until there are events, `timeout` passes, or the mailbox is stopped; returns what is queued, in the
    /// order it arrived.
    func take(timeout: TimeInterval) -> (events: [Event], stopped: Bool) {
        self.condition.lock()
        defer { self.condition.unlock() }
        // Closures, not key paths: in this generic class a key path is built anew at every call (swift_getKeyPath
        // looks its types up by name), which was a tenth of the engine's time in a storm of mDNS questions.
        if self.queues.allSatisfy({ $0.isEmpty }), !self.stopped {
            self.condition.wait(seconds: timeout)
        }
        var taken: [Event] = []
        taken.reserveCapacity(self.queues.reduce(0) { $0 + $1.count })
        // Each lane is in arrival order already: merge them by always taking the earliest head.
        var heads = Array(repeating: 0, count: self.queues.count)
        while true {
            var earliest: Int? = nil
            for index in self.queues.indices where heads[index] < self.queues[index].count {
                if let current = earliest,
                    self.queues[current][heads[current]].sequence <= self.queues[index][heads[index]].sequence
                {
                    continue
                }
                earliest = index
            }
            guard let index = earliest else { break }
            taken.append(self.queues[index][heads[index]].event)
            heads[index] += 1
        }
        for index in self.queues.indices { self.queues[index].removeAll(keepingCapacity: true) }
        return (taken, self.stopped)
    }

    /// Takes the events of one lane queued now, without waiting; the other lanes' events stay, in their order.
    /// The engine answers mDNS queries this way between the registrations of a long batch.
    func take(lane: Int) -> [Event] {
        self.condition.lock()
        defer { self.condition.unlock() }
        guard !self.queues[lane].isEmpty else { return [] }
        let taken = self.queues[lane].map { $0.event }
        self.queues[lane].removeAll(keepingCapacity: true)
        return taken
    }

    /// Waits until `lane` has events or `finished()` holds (checked under the mailbox's lock, and again after each
    /// `poke`), and takes that lane's events. The engine answers queries this way while the journal syncs.
    func take(lane: Int, waitingUntil finished: () -> Bool) -> (events: [Event], finished: Bool) {
        self.condition.lock()
        defer { self.condition.unlock() }
        while self.queues[lane].isEmpty, !finished() { self.condition.wait(seconds: 1) }
        let taken = self.queues[lane].map { $0.event }
        self.queues[lane].removeAll(keepingCapacity: true)
        return (taken, finished())
    }

    /// Wakes a waiting `take` to look again.
    func poke() {
        self.condition.lock()
        self.condition.signal()
        self.condition.unlock()
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
