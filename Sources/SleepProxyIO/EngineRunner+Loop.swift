import CSleepProxyLinux
import FoundationEssentials
import Logging
import NIOCore
import SleepProxyControl
import SleepProxyCore
import SleepProxyWire

/// The engine thread: take a batch, hand it to `ProxyEngine`, carry out what it decided.
extension EngineRunner {
    // MARK: - The engine thread

    func run() {
        // The journal's replay (a decoded copy of every registration) is gone by now.
        MemoryTuning.trim()
        let sync = JournalSync(finished: { [mailbox = self.mailbox] in mailbox.poke() })
        do {
            try sync.start()
            self.journalSync = sync
        } catch {
            self.logger.warning("state: \(error); the journal is synced on the engine thread")
        }
        defer { self.journalSync?.stop() }
        self.refreshInventory(now: SystemClock.now())
        if let resumable = self.resumable {
            self.resumable = nil
            // The replay's code and the heap it freed go back before the burst of speaking again for every host
            // (the five-second release below hands back what the rest of the start touched): a restart must
            // never need more memory than registering the same hosts live did (docs/memory.md).
            MemoryTuning.releaseStartupCode()
            var batch = Batch()
            self.perform(
                self.engine.resumeSpeaking(
                    for: resumable.keys, stoppedFor: resumable.stoppedFor, now: SystemClock.now()),
                into: &batch)
            self.sendMulticast(&batch)
        }
        let running = SystemClock.now()
        var startupCodeReleased = false
        var resuming = self.engine.isResuming
        var codeReleasedAt = running
        while true {
            // The heap the burst of speaking again freed goes back at once, its code half a second later (below):
            // the first answers run much of the same code, and handing it back at once made them wait for it.
            if resuming, !self.engine.isResuming {
                resuming = false
                MemoryTuning.trim()
                codeReleasedAt = SystemClock.now()
            }
            let now = SystemClock.now()
            self.lookAtTheWallClock(now: now)
            if !startupCodeReleased, now - running >= EngineRunner.startupCodeReleaseDelay {
                startupCodeReleased = true
                let released = MemoryTuning.releaseStartupCode()
                self.logger.debug("memory: start-up over, \(released / 1024) KiB of code and constants handed back")
            } else if !startupCodeReleased, now - codeReleasedAt >= EngineRunner.startupCodeReleaseInterval {
                // Until then, every half second: each page of code faulted in brings its neighbours (the kernel maps
                // 64 KB around a fault), and a restart that speaks again for thousands of hosts runs much of the
                // daemon within seconds; handed back this often, only what the next moment runs comes back,
                // instead of the first seconds' pages all staying until the start is over (docs/memory.md).
                MemoryTuning.releaseStartupCode()
                codeReleasedAt = now
            }
            self.applyPendingWatches(now: SystemClock.now())
            var deadline = self.engine.nextDeadline()
            if !self.pendingWatches.isEmpty, let applied = self.watchesAppliedAt {
                let due = applied + EngineRunner.watchUpdateInterval
                deadline = min(deadline ?? due, due)
            }
            if self.hostsByStateBehind, let counted = self.hostsByStateAt {
                let due = counted + EngineRunner.hostsByStateInterval
                deadline = min(deadline ?? due, due)
            }
            let timeout: TimeInterval
            if let deadline {
                timeout = min(1, max(0, Double((deadline - SystemClock.now()).nanosecondsClamped) / 1e9))
            } else {
                timeout = 1
            }
            let (events, stopped) = self.mailbox.take(
                timeout: timeout, watching: self.polledSockets.all, receive: self.receiveDatagrams)
            if stopped {
                self.finish()
                break
            }
            if events.isEmpty {
                self.process([])
            } else {
                // Bounded batches: the first of a burst of registrations is answered after one sync of a few, not
                // after the whole burst has been processed.
                for batch in Self.batches(events) { self.process(batch) }
            }
            // Quiet after a burst (a registration storm, a wave of hosts falling asleep): the packets and copies it
            // allocated are free now, so give them back instead of keeping the peak for good. After the pass, so
            // that the queries it brought are answered first (a trim of a large heap is a millisecond or two).
            self.eventsSinceTrim += events.count
            if self.eventsSinceTrim >= EngineRunner.trimAfterEvents, events.count <= EngineRunner.quietBatch {
                MemoryTuning.trim()
                self.eventsSinceTrim = 0
            }
        }
    }

    /// One batch: each event handed to the engine, the timers run, the batch committed (mDNS at once, the journal
    /// made durable, then replies), and the housekeeping that follows every batch.
    func process(_ events: [Event]) {
        let now = SystemClock.now()
        if now - self.inventoryReadAt > EngineRunner.inventoryRefreshInterval { self.refreshInventory(now: now) }
        var batch = Batch()
        for event in Self.legacyQueriesFirst(events) { self.handle(event, now: now, into: &batch) }
        self.runTimers(now: now, into: &batch)
        self.commit(&batch, now: now)
        self.housekeeping(now: now)
    }

    /// The stop: what the next start needs written down, goodbyes for every host spoken for (sent before the
    /// sockets close), the sockets and captures closed.
    func finish() {
        // For the next start: which hosts to speak for again at once (`SpokenForRecord`).
        do {
            try SpokenForRecord.write(
                SpokenForRecord(
                    keys: self.engine.spokenForOrResuming, peers: self.engine.identifiedPeers, stoppedAt: Date()),
                directory: self.journal.directory)
        } catch {
            self.logger.warning(
                "state: cannot record the hosts spoken for (\(error)); they are probed first at the next start")
        }
        self.saveSSDP(now: SystemClock.now(), force: true)
        self.saveLearned(now: SystemClock.now(), force: true)
        self.flushHistory()
        self.writeHeldJournal(sync: true)
        self.journal.abandonCompaction()
        var batch = Batch()
        self.perform(self.engine.shutdown(), into: &batch)
        // After the goodbyes' presence changes: the last minutes, and what they changed, for the file.
        self.keepSavings(now: SystemClock.now(), force: true)
        self.mdns?.sendAndWait(batch.transmissions.map { ($0.destination, $0.bytes) })
        self.mdns?.close()
        self.ssdpSockets?.close()
        self.neighbours?.flush()
        self.monitor?.stop()
        self.packets?.close()
    }
}
