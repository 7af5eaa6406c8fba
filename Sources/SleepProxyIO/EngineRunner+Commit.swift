import CSleepProxyLinux
import FoundationEssentials
import Logging
import NIOCore
import SleepProxyControl
import SleepProxyCore
import SleepProxyWire

/// Timers, then the commit: a batch's mDNS goes out at once, its journal entries are made durable, and only then do the
/// registration and admin replies go out (an acknowledged registration survives a crash).
extension EngineRunner {
    func runTimers(now: Timestamp, into batch: inout Batch) {
        // Most batches of a busy LAN are one frame about nobody the proxy holds, with no timer due: a pass over
        // every machine's timers for each of them was a tenth of the daemon's time (docs/busy-lan.md).
        guard let first = self.engine.nextDeadline(), first <= now else { return }
        for slice in 1...EngineRunner.timerSlicesPerPass {
            self.perform(self.engine.tick(now: now, slice: EngineRunner.timerSlice), into: &batch)
            guard slice < EngineRunner.timerSlicesPerPass, let next = self.engine.nextDeadline(), next <= now
            else { break }
            self.answerWaitingQueries(into: &batch)
        }
    }

    func commit(_ batch: inout Batch, now: Timestamp) {
        // mDNS output does not wait for the journal: it reveals nothing a crash could take back that matters
        // (a record answered once and then lost to a crash is re-registered by its host on its next sleep).
        self.sendMulticast(&batch)

        if batch.journalEntries > 0 {
            do {
                // Queries answered during the sync may change a host (a sleeping host heard from is handed back),
                // which adds entries: those are written and synced in turn before any reply goes out.
                var writtenBytes = 0
                var writtenEntries = 0
                while writtenEntries < batch.journalEntries {
                    let bytes = Array(batch.journal[writtenBytes...])
                    let count = batch.journalEntries - writtenEntries
                    writtenBytes = batch.journal.count
                    writtenEntries = batch.journalEntries
                    // Synced only when a reply waits on it (a registration, an admin change). A batch of hand-backs,
                    // expiries or an adopted host held is kept for the next synced append (docs/state.md).
                    let needsSync = !batch.replies.isEmpty || !batch.controlReplies.isEmpty
                    guard needsSync else {
                        self.holdJournal(bytes, entries: count, now: now)
                        continue
                    }
                    let held = self.takeHeldJournal()
                    try self.journal.append(encoded: held.bytes + bytes, entries: held.entries + count) { write in
                        try self.syncAnsweringQueries(write, into: &batch)
                        self.statusLock.withLock { self.status.journalSyncs += 1 }
                    }
                }
                let refused = self.statusLock.withLock { () -> Int? in
                    guard self.status.journalProblem != nil else { return nil }
                    defer {
                        self.status.journalProblem = nil
                        self.status.journalFailuresInARow = 0
                    }
                    return self.status.journalFailuresInARow
                }
                if let refused {
                    self.logger.notice(
                        "state: \(self.journal.directory.path) can be written again (\(refused) batches of changes were refused meanwhile)"
                    )
                }
            } catch {
                // Not durable, so not acknowledged: stay silent (the clients retry) and go back to what the journal
                // holds. (Keeping a copy of the state for this rare case would make every batch copy the whole
                // store, copy-on-write, once thousands of hosts sleep.)
                let problem =
                    "the state directory \(self.journal.directory.path) cannot be written (\(error)): registrations are not acknowledged, and hosts go to another proxy or stay awake, until it can"
                let isNew = self.statusLock.withLock { () -> Bool in
                    self.status.persistenceFailures += 1
                    self.status.journalFailuresInARow += 1
                    defer { self.status.journalProblem = problem }
                    return self.status.journalProblem != problem
                }
                // A full disk fails every batch until it has room, and clients retry every second: the first
                // failure (or a new reason) is an error; the rest are counted for the recovery's line and logged
                // at debug, so that the network cannot write a line per packet (docs/scale.md, logging).
                let level: Logger.Level = isNew ? .error : .debug
                self.logger.log(
                    level: level,
                    "state: cannot write \(self.journal.directory.path)/registrations.journal: \(error); \(batch.journalEntries) changes not acknowledged"
                )
                batch.replies.removeAll()
                batch.controlReplies = batch.controlReplies.map {
                    (
                        ControlResponse.failure(
                            "the state directory could not be written (\(error)); nothing was changed"), $0.1
                    )
                }
                self.reloadFromJournal(now: now, level: level == .error ? .notice : .debug)
            }
        }
        for (response, reply) in batch.controlReplies { reply(response) }
        // One hop to each channel's event loop for the whole batch, one flush: not one per reply.
        var byChannel: [ObjectIdentifier: (Channel, [AddressedEnvelope<ByteBuffer>])] = [:]
        for (channel, remote, reply) in batch.replies {
            byChannel[ObjectIdentifier(channel), default: (channel, [])].1.append(
                AddressedEnvelope(remoteAddress: remote, data: ByteBuffer(bytes: reply)))
        }
        for (channel, envelopes) in byChannel.values {
            channel.eventLoop.execute {
                for envelope in envelopes { channel.write(envelope, promise: nil) }
                channel.flush()
            }
        }
    }

    /// Replaces the in-memory state with what the journal holds (after a failed append).
    func reloadFromJournal(now: Timestamp, level: Logger.Level) {
        let replay: RegistrationJournal.Replay
        do {
            replay = try self.journal.reread(timeBase: SystemClock.timeBase())
        } catch {
            // Neither writable nor readable: keep serving what memory holds rather than forget every host.
            self.logger.error("state: cannot read the journal back (\(error)); keeping the in-memory registrations")
            return
        }
        var batch = Batch()
        self.perform(self.engine.reload(replay.registrations, now: now), into: &batch)
        self.sendMulticast(&batch)
        self.logger.log(level: level, "state: reloaded \(replay.registrations.count) sleeping hosts from the journal")
    }
}
