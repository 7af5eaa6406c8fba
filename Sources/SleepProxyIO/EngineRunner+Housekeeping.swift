import CSleepProxyLinux
import FoundationEssentials
import Logging
import NIOCore
import SleepProxyControl
import SleepProxyCore
import SleepProxyWire

/// Housekeeping after every batch: the journal compacted when it grew, SSDP's knowledge and the history saved,
/// the status published, the capture filters brought up to date.
extension EngineRunner {
    func housekeeping(now: Timestamp) {
        // The new journal is written by a thread of its own (`JournalFile.startCompaction`); the engine only
        // carries over what was appended meanwhile and renames it into place.
        do {
            if try self.journal.finishCompaction() { MemoryTuning.trim() }
        } catch {
            self.logger.warning("state: journal compaction did not complete (\(error)); it is tried again later")
        }
        if !self.journal.isCompacting, self.journal.needsCompaction(liveHosts: self.engine.hostCount) {
            do {
                try self.journal.startCompaction(
                    Array(self.engine.registrations.values), timeBase: SystemClock.timeBase())
            } catch {
                self.logger.warning("state: journal compaction did not complete (\(error)); it is tried again later")
            }
        }
        self.saveSSDP(now: now, force: false)
        self.saveLearned(now: now, force: false)
        self.flushHistory()
        self.keepSavings(now: now)
        self.settleHeldJournal(now: now)
        self.keepSpokenForLive(now: now)
        self.publishStatus()
    }

    /// Saves what SSDP knows when it changed, at most every `SSDPStateFile.saveInterval` (or now, at a stop).
    func saveSSDP(now: Timestamp, force: Bool) {
        guard let revision = self.engine.upnpRevision, revision != self.ssdpSavedRevision else { return }
        if !force, let last = self.ssdpSavedAt, now - last < SSDPStateFile.saveInterval { return }
        self.ssdpSavedAt = now
        do {
            try SSDPStateFile(self.engine.upnpLearned, now: now, savedAt: Date()).write(
                directory: self.journal.directory)
            self.ssdpSavedRevision = revision
        } catch {
            self.logger.warning("state: cannot save \(SSDPStateFile.fileName): \(error)")
        }
    }

    /// Saves what adopted hosts taught when it changed, at most every `LearnedHostsFile.saveInterval` (or now, at a
    /// stop). Not before the saved copy was given to the engine: the start must not overwrite it with nothing.
    func saveLearned(now: Timestamp, force: Bool) {
        guard self.learnedAtStart == nil, self.engine.adoptionRevision != self.learnedSavedRevision else { return }
        if !force, let last = self.learnedSavedAt, now - last < LearnedHostsFile.saveInterval { return }
        self.learnedSavedAt = now
        do {
            try LearnedHostsFile.write(
                self.engine.adoptedLearned(now: now), timeBase: SystemClock.timeBase(),
                directory: self.journal.directory)
            self.learnedSavedRevision = self.engine.adoptionRevision
        } catch {
            self.logger.warning("state: cannot save \(LearnedHostsFile.fileName): \(error)")
        }
    }

    func applyPendingWatches(now: Timestamp) {
        guard !self.pendingWatches.isEmpty else { return }
        if let applied = self.watchesAppliedAt, now - applied < EngineRunner.watchUpdateInterval { return }
        self.watchesAppliedAt = now
        defer { self.pendingWatches.removeAll() }
        for index in self.pendingWatches.sorted() {
            guard let list = self.engine.watchList(interfaceIndex: index) else { continue }
            let macs = self.engine.adoptedMACs
            self.packets?.watch(
                v4: list.v4, v6: list.v6, macs: macs, nameService: !macs.isEmpty, interfaceIndex: index)
        }
    }
}

extension EngineRunner {
    /// Tells the operator once when the wall clock was set (NTP on a box with no clock of its own, `date -s`).
    /// Nothing else needs to happen: leases, holds, wake windows and rate limits run on the boot clock, and the
    /// history keeps its records in the order they came (docs/time.md).
    func lookAtTheWallClock(now: Timestamp) {
        guard let step = self.wallClock.look(now: now, wallNanoseconds: SystemClock.wallNanoseconds()) else { return }
        let seconds = Double(step.nanosecondsClamped) / 1e9
        self.logger.notice(
            "clock: the wall clock was set \(seconds > 0 ? "forward" : "back") by \(HumanDuration.format(abs(seconds))); leases, holds and wake windows are unchanged (they run on the boot clock)"
        )
    }
}
