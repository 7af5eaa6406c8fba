import HeapModule

/// Work items due at given times, each under a key it can be replaced or cancelled by. Scheduling, cancelling,
/// finding the next deadline and taking what is due cost O(log n) however many items wait: a proxy that has
/// just taken thousands of hosts over has thousands of announcements queued, and its loop asks for the next
/// deadline after every batch of packets.
///
/// Replaced and cancelled items stay in the heap until they surface (lazy deletion); the heap is rebuilt when
/// they outnumber the live ones, so it never holds more than about twice what is queued.
struct TimerQueue<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    private var items: [Key: Item] = [:]
    private var heap = Heap<Slot>()
    /// Orders items due at the same time by when they were scheduled, and tells a live heap slot from a stale one.
    private var serial: UInt64 = 0

    private struct Item: Sendable {
        var value: Value
        var due: Timestamp
        var serial: UInt64
    }

    private struct Slot: Comparable, Sendable {
        var due: Timestamp
        var serial: UInt64
        var key: Key

        static func == (lhs: Slot, rhs: Slot) -> Bool { lhs.due == rhs.due && lhs.serial == rhs.serial }
        static func < (lhs: Slot, rhs: Slot) -> Bool { (lhs.due, lhs.serial) < (rhs.due, rhs.serial) }
    }

    var count: Int { self.items.count }
    var isEmpty: Bool { self.items.isEmpty }

    subscript(key: Key) -> Value? { self.items[key]?.value }

    /// Every queued item, in no particular order.
    var values: [Value] { self.items.values.map { $0.value } }

    /// Queues `value` under `key` for `due`, replacing what the key held.
    mutating func schedule(_ value: Value, for key: Key, at due: Timestamp) {
        self.serial += 1
        self.items[key] = Item(value: value, due: due, serial: self.serial)
        self.heap.insert(Slot(due: due, serial: self.serial, key: key))
        if self.heap.count > 2 * self.items.count + 64 { self.rebuild() }
    }

    @discardableResult
    mutating func remove(_ key: Key) -> Value? {
        self.items.removeValue(forKey: key)?.value
    }

    /// Removes every item the predicate picks: a walk over all of them, for rare events (an interface gone).
    mutating func removeAll(where shouldRemove: (Key, Value) -> Bool) {
        self.items = self.items.filter { !shouldRemove($0.key, $0.value.value) }
    }

    mutating func removeAll() {
        self.items.removeAll()
        self.heap = Heap()
    }

    /// When the earliest item is due.
    mutating func nextDeadline() -> Timestamp? {
        self.dropStale()
        return self.heap.min?.due
    }

    /// Takes out the items due at or before `now`, earliest first (in scheduling order when due together), at
    /// most `limit` of them: the rest stay due, and the next deadline says so.
    mutating func takeDue(now: Timestamp, limit: Int = .max) -> [(key: Key, value: Value)] {
        var due: [(key: Key, value: Value)] = []
        while due.count < limit {
            self.dropStale()
            guard let first = self.heap.min, first.due <= now else { break }
            self.heap.removeMin()
            if let item = self.items.removeValue(forKey: first.key) { due.append((first.key, item.value)) }
        }
        return due
    }

    private func isLive(_ slot: Slot) -> Bool { self.items[slot.key]?.serial == slot.serial }

    private mutating func dropStale() {
        while let first = self.heap.min, !self.isLive(first) { self.heap.removeMin() }
    }

    private mutating func rebuild() {
        self.heap = Heap(self.items.map { Slot(due: $0.value.due, serial: $0.value.serial, key: $0.key) })
    }
}
