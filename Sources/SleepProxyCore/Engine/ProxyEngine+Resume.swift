import SleepProxyWire

/// A restart a moment after a clean stop: the hosts spoken for then are spoken for again, a slice at a time, and a
/// question about one still waiting brings it forward (docs/scale.md, docs/memory.md).
extension ProxyEngine {
    /// After a clean stop a moment ago (an upgrade, `systemctl restart`): the hosts the proxy was speaking for
    /// then are spoken for again at once, instead of vanishing from browsers for the seconds that probing them
    /// again takes. Beyond Apple, whose proxy forgets everything when it stops (docs/coexistence.md). Their
    /// addresses are answered for at once too (`Takeover.resume`), and any sign of life from one hands it back
    /// silently, as for a host that wakes. Call once the interfaces are set.
    ///
    /// The first `EngineRules.resumeSlice` hosts are spoken for in this call, the rest by later ticks, a slice each
    /// `EngineRules.resumeSliceInterval` apart: 10,000 hosts at once held 9 MB of actions, and their netlink
    /// changes, history lines and first announcements together more, than registering them live ever needed
    /// (docs/memory.md).
    ///
    /// A question about a host still waiting for its slice speaks for it at once (`resumeAsked`).
    public mutating func resumeSpeaking(for keys: [OwnerKey], stoppedFor: Duration, now: Timestamp) -> [EngineAction] {
        // In order, so that a question can find its host among those still waiting without a table beside them.
        self.resuming = Resuming(keys: keys.sorted(), stoppedFor: stoppedFor)
        return self.resumeSlice(now: now)
    }

    /// The other proxies known before a restart a moment ago (`Takeover.restorePeers`): given before the hosts
    /// are spoken for again, so that the one that took them over meanwhile is known as a proxy.
    public mutating func restorePeers(_ peers: [ProxyPeer], now: Timestamp) {
        self.takeover?.restorePeers(peers, now: now)
    }

    /// A restart's hosts still to speak for again (`resumeSpeaking`).
    struct Resuming: Sendable {
        var keys: [OwnerKey]
        var stoppedFor: Duration
        var next = 0
        var resumed = 0
        /// When the next slice is due.
        var due = Timestamp(nanoseconds: 0)

        /// Whether `key` is among the hosts no slice has come to yet (`keys` is in order).
        func isWaiting(_ key: OwnerKey) -> Bool {
            var low = self.next
            var high = self.keys.count
            while low < high {
                let middle = (low + high) / 2
                if self.keys[middle] < key { low = middle + 1 } else { high = middle }
            }
            return low < self.keys.count && self.keys[low] == key
        }
    }

    /// The next slice of a restart's hosts, and the line that counts them once the last is done.
    mutating func resumeSlice(now: Timestamp) -> [EngineAction] {
        guard var job = self.resuming, job.due <= now else { return [] }
        var actions: [EngineAction] = []
        let end = min(job.next + EngineRules.resumeSlice, job.keys.count)
        for key in job.keys[job.next..<end] { actions += self.resume(key, in: &job, now: now) }
        job.next = end
        job.due = now + EngineRules.resumeSliceInterval
        guard end == job.keys.count else {
            self.resuming = job
            return actions
        }
        self.resuming = nil
        if job.keys.count > EngineRules.resumeLinesLimit {
            actions.append(
                .log(
                    .info,
                    "\(job.resumed) hosts were asleep when the proxy stopped \(Self.seconds(job.stoppedFor)) s ago: the proxy answers for them again at once and probes their addresses"
                ))
        }
        return actions
    }

    /// One of a restart's hosts spoken for again, unless it is already (asked about before its slice) or no longer
    /// waits for it (gone, or shown up meanwhile).
    private mutating func resume(_ key: OwnerKey, in job: inout Resuming, now: Timestamp) -> [EngineAction] {
        guard self.presence[key]?.state == .starting, let registration = self.registrar.store[key] else { return [] }
        job.resumed += 1
        var actions = self.transition(registration, logs: job.keys.count <= EngineRules.resumeLinesLimit, now: now) {
            $0.resumed(detail: "\(Self.seconds(job.stoppedFor))")
        }
        actions += self.withTakeover(now: now) { $0.resume(key, now: now) }
        return actions
    }

    /// A question, during a restart's slices, about a name one of the hosts still waiting owns alone: that host is
    /// spoken for now, before the question is answered, instead of staying silent until its slice comes (with
    /// 10,000 hosts the last comes a quarter of a second after the first on a small machine; docs/scale.md).
    /// Only a unique name brings its host forward: a browse for a service type names every host offering it, and
    /// is answered for each as its slice comes, as the slices were made for (docs/memory.md).
    mutating func resumeAsked(_ message: DNSMessage, on interface: String, now: Timestamp) -> [EngineAction] {
        guard var job = self.resuming, !message.flags.isResponse else { return [] }
        var actions: [EngineAction] = []
        for question in message.questions {
            for key in self.registrar.store.uniqueHolders(of: question.name, on: interface)
            where job.isWaiting(key) {
                actions += self.resume(key, in: &job, now: now)
            }
        }
        self.resuming = job
        return actions
    }
}
