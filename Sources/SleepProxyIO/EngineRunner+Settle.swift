import FoundationEssentials
import Logging
import SleepProxyControl
import SleepProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// What reaches the SD card, and when (docs/state.md, "SD-card wear"). A registration or a renewal is synced
/// before it is acknowledged: that is one page written, and the one write a day of a home cannot do without.
/// What no reply waits on waits for it: journal entries for hand-backs, expiries and adopted hosts ride the next
/// synced append, and the history settles from the runtime directory every `HistoryFile.settleInterval`.
extension EngineRunner {
    /// Keeps journal entries no reply waits on for the next synced append. Lost only if the daemon dies before
    /// it: then a host restored from the journal that is in fact awake is probed before the proxy speaks for it
    /// and handed back at its first word (docs/state.md), as after a power cut before.
    func holdJournal(_ bytes: [UInt8], entries: Int, now: Timestamp) {
        if self.heldJournal.isEmpty { self.heldJournalSince = now }
        self.heldJournal += bytes
        self.heldJournalEntries += entries
    }

    func takeHeldJournal() -> (bytes: [UInt8], entries: Int) {
        defer {
            self.heldJournal = []
            self.heldJournalEntries = 0
            self.heldJournalSince = nil
        }
        return (self.heldJournal, self.heldJournalEntries)
    }

    /// Writes what is held, synced or not; kept to try again if the write fails.
    @discardableResult
    func writeHeldJournal(sync: Bool) -> Bool {
        guard self.heldJournalEntries > 0 else { return true }
        let held = self.takeHeldJournal()
        do {
            try self.journal.append(encoded: held.bytes, entries: held.entries) { write in
                try write.perform(sync: sync)
                if sync { self.statusLock.withLock { self.status.journalSyncs += 1 } }
            }
            return true
        } catch {
            self.logger.warning("state: cannot write \(self.journal.directory.path)/registrations.journal: \(error)")
            // Kept for the next try while within the bound; past it given up, as a crash would: the hosts concerned
            // are probed before they are spoken for after the next start.
            if held.bytes.count <= Self.heldJournalLimitBytes {
                self.heldJournal = held.bytes + self.heldJournal
                self.heldJournalEntries += held.entries
                self.heldJournalSince = self.heldJournalSince ?? SystemClock.now()
            }
            return false
        }
    }

    /// Ours: the most journal bytes held in memory (about 60 entries of a typical host). Hand-backs and holds come
    /// from the network (an adopted host, or frames claiming to be it, can flap for hours with no registration to
    /// ride on), so what is held must not grow with them; past it they are written at once, unsynced.
    static let heldJournalLimitBytes = 64 << 10

    /// Whether held entries go to the file now, though no synced append came: past `heldJournalLimitBytes`, or once
    /// as old as a history settle.
    static func heldJournalIsDue(bytes: Int, since: Timestamp?, now: Timestamp) -> Bool {
        guard let since else { return false }
        return bytes > Self.heldJournalLimitBytes || now - since >= HistoryFile.settleInterval
    }

    func settleHeldJournal(now: Timestamp) {
        guard Self.heldJournalIsDue(bytes: self.heldJournal.count, since: self.heldJournalSince, now: now) else {
            return
        }
        self.writeHeldJournal(sync: false)
    }

    /// `sleepproxyctl sync`: everything held written to the state directory and synced now (before pulling the
    /// power, or taking a copy of the state directory).
    func syncState() -> ControlResponse {
        self.flushHistory()
        self.keepSavings(now: SystemClock.now(), force: true)
        let journalWritten = self.writeHeldJournal(sync: true)
        let historySettled = self.historyFile.settleNow()
        guard journalWritten, historySettled else {
            return .failure(
                "the state directory \(self.journal.directory.path) could not be written: \(journalWritten ? "the history" : "the journal") is kept for the next try"
            )
        }
        return ControlResponse()
    }

    /// Keeps the live spoken-for record in the runtime directory (`SpokenForRecord`): removed at once when a host
    /// left the set (a crash then probes every host first, which is always safe) and written again within
    /// `SpokenForRecord.liveInterval`, as when one joined; touched every interval otherwise. Rewriting it at every
    /// hand-back of a morning's wave would encode every host held each batch.
    func keepSpokenForLive(now: Timestamp) {
        guard let directory = self.liveRecordDirectory, let path = self.liveRecordPath else { return }
        if self.spokenForLeft, !self.liveRecordRemoved {
            self.liveRecordRemoved = true
            self.liveRecordKeys = []
            _ = unlink(path)
        }
        if let last = self.liveRecordAt, now - last < SpokenForRecord.liveInterval { return }
        self.liveRecordAt = now
        if self.spokenForLeft || self.spokenForJoined || self.liveRecordRemoved {
            self.spokenForLeft = false
            self.spokenForJoined = false
            self.liveRecordRemoved = false
            let keys = self.engine.spokenForOrResuming
            do {
                try SpokenForRecord.write(
                    SpokenForRecord(keys: keys, peers: self.engine.identifiedPeers, stoppedAt: Date()),
                    directory: directory)
                self.liveRecordKeys = Set(keys)
            } catch {
                self.liveRecordKeys = []
                _ = unlink(path)
            }
        } else {
            _ = utimes(path, nil)
        }
    }
}
