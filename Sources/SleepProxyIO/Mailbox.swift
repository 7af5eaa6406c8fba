import Foundation

/// A bounded queue between I/O threads (producers) and the engine thread (the only consumer).
///
/// The engine takes everything queued at once, which is what turns "whatever arrived while the last fdatasync
/// ran" into one batch. When the queue is full, new events are dropped and counted: under a flood the proxy
/// sheds load instead of growing without bound.
final class Mailbox<Event>: @unchecked Sendable {
    // @unchecked: every field is guarded by `condition`.
    private let condition = NSCondition()
    private var events: [Event] = []
    private var stopped = false
    private var droppedCount = 0
    let capacity: Int

    init(capacity: Int) { self.capacity = capacity }

    /// Queues an event; false when the queue is full or stopped.
    @discardableResult
    func post(_ event: Event) -> Bool {
        self.condition.lock()
        defer { self.condition.unlock() }
        guard !self.stopped, self.events.count < self.capacity else {
            self.droppedCount += 1
            return false
        }
        self.events.append(event)
        self.condition.signal()
        return true
    }

    /// Waits until there are events, `timeout` passes, or the mailbox is stopped; returns what is queued.
    func take(timeout: TimeInterval) -> (events: [Event], stopped: Bool) {
        self.condition.lock()
        defer { self.condition.unlock() }
        if self.events.isEmpty, !self.stopped {
            _ = self.condition.wait(until: Date(timeIntervalSinceNow: max(0, timeout)))
        }
        let taken = self.events
        self.events.removeAll(keepingCapacity: true)
        return (taken, self.stopped)
    }

    /// Events refused because the queue was full or stopped.
    var dropped: Int {
        self.condition.lock()
        defer { self.condition.unlock() }
        return self.droppedCount
    }

    func stop() {
        self.condition.lock()
        self.stopped = true
        self.condition.signal()
        self.condition.unlock()
    }
}
