import HeapModule

extension Takeover {
    /// The hosts, with their timers in a heap: finding what is due, and when the next thing is, costs the same
    /// with ten hosts or ten thousand (the engine asks after every batch of packets; scanning every host each
    /// time made a registration storm quadratic).
    ///
    /// Every write goes through the subscript, which files the host's deadlines; entries left behind by a later
    /// change are skipped when they surface (lazy deletion) and the heap is rebuilt when they pile up.
    struct HostTable: Sendable {
        private(set) var storage: [OwnerKey: Host] = [:]
        private var timers = Heap<Timer>()
        /// The hosts with a wake under way, so that counting hosts by state looks at these few and not at all.
        private(set) var waking: Set<OwnerKey> = []

        private struct Timer: Comparable, Sendable {
            var time: Timestamp
            var key: OwnerKey
            static func < (lhs: Timer, rhs: Timer) -> Bool { (lhs.time, lhs.key) < (rhs.time, rhs.key) }
        }

        var count: Int { self.storage.count }
        var keys: Dictionary<OwnerKey, Host>.Keys { self.storage.keys }
        var values: Dictionary<OwnerKey, Host>.Values { self.storage.values }

        mutating func reserveCapacity(_ hosts: Int) { self.storage.reserveCapacity(hosts) }

        subscript(key: OwnerKey) -> Host? {
            get { self.storage[key] }
            set {
                guard let host = newValue else {
                    self.storage[key] = nil
                    self.waking.remove(key)
                    return
                }
                if host.wake != nil { self.waking.insert(key) } else { self.waking.remove(key) }
                let old = self.storage.updateValue(host, forKey: key)
                for time in [host.next, host.wake?.next] {
                    guard let time, time != old?.next, time != old?.wake?.next else { continue }
                    self.timers.insert(Timer(time: time, key: key))
                }
                if self.timers.count > 4 * self.storage.count + 64 { self.rebuild() }
            }
        }

        @discardableResult
        mutating func removeValue(forKey key: OwnerKey) -> Host? {
            self.waking.remove(key)
            return self.storage.removeValue(forKey: key)
        }

        /// Files the host's deadlines again (after `due` took them off the heap).
        mutating func refile(_ key: OwnerKey) {
            guard let host = self.storage[key] else { return }
            if let next = host.next { self.timers.insert(Timer(time: next, key: key)) }
            if let next = host.wake?.next, next != host.next { self.timers.insert(Timer(time: next, key: key)) }
        }

        /// The earliest deadline of any host.
        mutating func nextDeadline() -> Timestamp? {
            self.dropStale()
            return self.timers.min?.time
        }

        /// The hosts with something due at or before `now`, each once, earliest first, at most `limit` of them
        /// (the others stay due). `limit` is a pass's handful (`TakeoverRules.maximumHostsPerTick`): looking
        /// through those few for a repeat is cheaper than building a set on every pass, which showed in the
        /// profiles of a storm.
        mutating func due(now: Timestamp, limit: Int) -> [OwnerKey] {
            var keys: [OwnerKey] = []
            while keys.count < limit {
                self.dropStale()
                guard let first = self.timers.min, first.time <= now else { break }
                self.timers.removeMin()
                if !keys.contains(first.key) { keys.append(first.key) }
            }
            return keys
        }

        private func isLive(_ timer: Timer) -> Bool {
            guard let host = self.storage[timer.key] else { return false }
            return host.next == timer.time || host.wake?.next == timer.time
        }

        private mutating func dropStale() {
            while let first = self.timers.min, !self.isLive(first) { self.timers.removeMin() }
        }

        private mutating func rebuild() {
            var timers: [Timer] = []
            for (key, host) in self.storage {
                if let next = host.next { timers.append(Timer(time: next, key: key)) }
                if let next = host.wake?.next, next != host.next { timers.append(Timer(time: next, key: key)) }
            }
            self.timers = Heap(timers)
        }
    }
}
