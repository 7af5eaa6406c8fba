import CSleepProxyLinux
import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// A bounded queue between I/O threads (producers) and the engine thread (the only consumer).
///
/// The engine takes everything queued at once, which is what turns "whatever arrived while the last fdatasync
/// ran" into one batch. Events travel in lanes, each with its own bound: when a lane is full its new events are
/// dropped and counted, and the other lanes are untouched, so a LAN flooding ARP or mDNS sheds its own packets
/// and never crowds out a registration or an admin request. Order is kept across lanes.
///
/// The consumer waits in poll(2), beside descriptors it reads itself (the multicast sockets, docs/busy-lan.md): a
/// datagram then wakes the engine thread alone, instead of an event loop that woke the engine in turn.
final class Mailbox<Event>: @unchecked Sendable {
    // @unchecked: every field is guarded by `lock`'s mutex.
    private let lock = Condition()
    /// One queue per lane, each event with its arrival number, so that one lane is taken out whole in O(1)
    /// (`take(lane:)`, called after every captured frame while a storm runs) and all of them are merged back
    /// into arrival order (`take(timeout:)`).
    private var queues: [[(sequence: UInt64, event: Event)]]
    private var sequence: UInt64 = 0
    private var droppedByLane: [Int]
    private var stopped = false
    let capacity: Int
    private let lane: @Sendable (Event) -> Int
    /// An eventfd written when something comes for a consumer waiting in poll (`consumerWaiting`), once a wait.
    private let wake: CInt
    private var consumerWaiting = false
    /// How long an event posted without a wake-up (`post(_:prompt:)`) waits for the consumer at most, in
    /// nanoseconds; and when the oldest such event came (the monotonic clock), while the consumer waits.
    private let routineDelay: UInt64
    private var routineSince: UInt64?
    /// Wake-ups written for the consumer (for the tests).
    private var wakeUps = 0
    /// The consumer's poll set and what it found readable, kept from one wait to the next.
    private var pollEntries: [pollfd] = []
    private var readable: [CInt] = []

    /// `lanes` lanes of `capacity` events each; `lane` tells an event's lane (0 ..< lanes); an event posted as not
    /// prompt waits `routineDelay` at most. Throws when the system has no descriptor to give for the consumer's
    /// wake-up.
    init(
        capacity: Int, lanes: Int = 1, routineDelay: Duration = .milliseconds(250),
        lane: @escaping @Sendable (Event) -> Int = { _ in 0 }
    ) throws(SystemCallError) {
        precondition(lanes >= 1 && capacity >= 1 && routineDelay >= .zero)
        let wake = csp_wake_descriptor()
        guard wake >= 0 else { throw SystemCallError(function: "eventfd", errno: errno) }
        self.wake = wake
        self.capacity = capacity
        self.routineDelay =
            UInt64(routineDelay.components.seconds) * 1_000_000_000
            + UInt64(routineDelay.components.attoseconds / 1_000_000_000)
        self.queues = Array(repeating: [], count: lanes)
        self.droppedByLane = Array(repeating: 0, count: lanes)
        self.lane = lane
    }

    deinit { close(self.wake) }

    /// Queues an event; false when its lane is full or the mailbox is stopped.
    ///
    /// Not `prompt`: nothing is urgent about it (a device's routine address resolution, `CaptureWatch`), so a
    /// waiting consumer is not woken for it alone; it is taken, in its order, with the next event that does wake
    /// the consumer, or once it has waited `routineDelay` (looked at on every post and `wakeIfRoutineOverdue`).
    /// Waking a thread costs more than handling such an event (docs/busy-lan.md).
    @discardableResult
    func post(_ event: Event, prompt: Bool = true) -> Bool {
        let lane = min(max(0, self.lane(event)), self.queues.count - 1)
        self.lock.lock()
        defer { self.lock.unlock() }
        guard !self.stopped, self.queues[lane].count < self.capacity else {
            self.droppedByLane[lane] += 1
            return false
        }
        self.sequence &+= 1
        self.queues[lane].append((self.sequence, event))
        if prompt {
            self.wakeConsumer()
        } else if self.consumerWaiting {
            let now = Self.monotonicNanoseconds()
            if let since = self.routineSince {
                if now &- since >= self.routineDelay { self.wakeConsumer() }
            } else {
                self.routineSince = now
            }
        }
        return true
    }

    /// Wakes the consumer if an event posted as not prompt has waited `routineDelay` (the posting thread calls
    /// this when it has nothing else to post for a while).
    func wakeIfRoutineOverdue() {
        self.lock.lock()
        defer { self.lock.unlock() }
        guard let since = self.routineSince, Self.monotonicNanoseconds() &- since >= self.routineDelay else { return }
        self.wakeConsumer()
    }

    private static func monotonicNanoseconds() -> UInt64 {
        var time = timespec()
        clock_gettime(CLOCK_MONOTONIC, &time)
        return UInt64(time.tv_sec) * 1_000_000_000 + UInt64(time.tv_nsec)
    }

    /// Waits until there are events, one of `descriptors` can be read, `timeout` passes, or the mailbox is
    /// stopped; hands the readable descriptors to `receive` (which posts what it reads here), and returns what is
    /// queued, in the order it arrived. The descriptors are looked at even when events are queued already, so that
    /// a steady stream of other events never leaves them unread.
    func take(
        timeout: TimeInterval, watching descriptors: [CInt] = [], receive: ([CInt]) -> Void = { _ in }
    ) -> (events: [Event], stopped: Bool) {
        self.lock.lock()
        defer { self.lock.unlock() }
        // Closures, not key paths: in this generic class a key path is built anew at every call (swift_getKeyPath
        // looks its types up by name), which was a tenth of the engine's time in a storm of mDNS questions.
        let idle = self.queues.allSatisfy({ $0.isEmpty }) && !self.stopped
        if idle || !descriptors.isEmpty {
            self.receiveLocked(self.waitLocked(seconds: idle ? timeout : 0, watching: descriptors), receive)
        }
        let count = self.queues.reduce(0) { $0 + $1.count }
        guard count > 0 else { return ([], self.stopped) }
        var taken: [Event] = []
        taken.reserveCapacity(count)
        // Each lane is in arrival order already: merge them by always taking the earliest head. The heads on the
        // stack: this runs at every wake-up.
        withUnsafeTemporaryAllocation(of: Int.self, capacity: self.queues.count) { heads in
            heads.initialize(repeating: 0)
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
        }
        for index in self.queues.indices { self.queues[index].removeAll(keepingCapacity: true) }
        return (taken, self.stopped)
    }

    /// Takes the events of one lane queued now, without waiting, after reading what `descriptors` hold now (through
    /// `receive`); the other lanes' events stay, in their order. The engine answers mDNS queries this way between
    /// the registrations of a long batch.
    func take(lane: Int, watching descriptors: [CInt] = [], receive: ([CInt]) -> Void = { _ in }) -> [Event] {
        self.lock.lock()
        defer { self.lock.unlock() }
        if !descriptors.isEmpty {
            self.receiveLocked(self.waitLocked(seconds: 0, watching: descriptors), receive)
        }
        guard !self.queues[lane].isEmpty else { return [] }
        let taken = self.queues[lane].map { $0.event }
        self.queues[lane].removeAll(keepingCapacity: true)
        return taken
    }

    /// Waits until `lane` has events or `finished()` holds (checked under the mailbox's lock, and again after each
    /// `poke`), reading `descriptors` meanwhile (through `receive`), and takes that lane's events. The engine
    /// answers queries this way while the journal syncs.
    func take(
        lane: Int, waitingUntil finished: () -> Bool, watching descriptors: [CInt] = [],
        receive: ([CInt]) -> Void = { _ in }
    ) -> (events: [Event], finished: Bool) {
        self.lock.lock()
        defer { self.lock.unlock() }
        while self.queues[lane].isEmpty, !finished() {
            self.receiveLocked(self.waitLocked(seconds: 1, watching: descriptors), receive)
        }
        let taken = self.queues[lane].map { $0.event }
        self.queues[lane].removeAll(keepingCapacity: true)
        return (taken, finished())
    }

    /// Wakes a waiting `take` to look again.
    func poke() {
        self.lock.lock()
        self.wakeConsumer()
        self.lock.unlock()
    }

    /// The lock held: the consumer, if it waits in poll, is woken (once, however many events come meanwhile).
    private func wakeConsumer() {
        guard self.consumerWaiting else { return }
        self.consumerWaiting = false
        self.routineSince = nil
        self.wakeUps += 1
        var one: UInt64 = 1
        _ = write(self.wake, &one, MemoryLayout<UInt64>.size)
    }

    /// The lock held, and released while waiting: polls the wake-up and `descriptors` for up to `seconds`
    /// (rounded up to a millisecond, so that a timer is never woken for just before its deadline) and returns the
    /// descriptors with something to read, or an error to collect.
    private func waitLocked(seconds: Double, watching descriptors: [CInt]) -> [CInt] {
        let milliseconds = CInt(max(0, min(seconds, 86_400) * 1000).rounded(.up))
        // The same two arrays every time (the consumer's alone): allocating them was a visible part of a busy LAN's
        // cost, paid on every datagram (docs/busy-lan.md).
        self.pollEntries.removeAll(keepingCapacity: true)
        self.pollEntries.append(pollfd(fd: self.wake, events: Int16(POLLIN), revents: 0))
        for descriptor in descriptors {
            self.pollEntries.append(pollfd(fd: descriptor, events: Int16(POLLIN), revents: 0))
        }
        if milliseconds > 0 { self.consumerWaiting = true }
        self.lock.unlock()
        let ready = poll(&self.pollEntries, nfds_t(self.pollEntries.count), milliseconds)
        self.lock.lock()
        self.consumerWaiting = false
        self.routineSince = nil
        self.readable.removeAll(keepingCapacity: true)
        guard ready > 0 else { return self.readable }
        if self.pollEntries[0].revents != 0 {
            var count: UInt64 = 0
            _ = read(self.wake, &count, MemoryLayout<UInt64>.size)
        }
        for entry in self.pollEntries.dropFirst() where entry.revents != 0 { self.readable.append(entry.fd) }
        return self.readable
    }

    /// The lock held: `receive` runs without it (it posts here).
    private func receiveLocked(_ readable: [CInt], _ receive: ([CInt]) -> Void) {
        guard !readable.isEmpty else { return }
        self.lock.unlock()
        receive(readable)
        self.lock.lock()
    }

    /// Whether the consumer waits in poll now, and how often it was woken (for the tests).
    var consumer: (waiting: Bool, wakeUps: Int) {
        self.lock.lock()
        defer { self.lock.unlock() }
        return (self.consumerWaiting, self.wakeUps)
    }

    /// Events refused because their lane was full or the mailbox stopped, in all lanes.
    var dropped: Int {
        self.lock.lock()
        defer { self.lock.unlock() }
        return self.droppedByLane.reduce(0, +)
    }

    /// The same, for one lane.
    func dropped(lane: Int) -> Int {
        self.lock.lock()
        defer { self.lock.unlock() }
        return self.droppedByLane[lane]
    }

    func stop() {
        self.lock.lock()
        self.stopped = true
        self.wakeConsumer()
        self.lock.unlock()
    }
}
