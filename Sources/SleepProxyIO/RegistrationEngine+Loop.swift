import CSleepProxyLinux
import FoundationEssentials
import Logging
import NIOCore
import SleepProxyControl
import SleepProxyCore
import SleepProxyWire

/// The engine thread: take a batch, hand it to `ProxyEngine`, carry out what it decided.
extension RegistrationEngine {
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
            var batch = Batch()
            self.perform(
                self.engine.resumeSpeaking(
                    for: resumable.keys, stoppedFor: resumable.stoppedFor, now: SystemClock.now()),
                into: &batch)
            self.sendMulticast(&batch)
        }
        let running = SystemClock.now()
        var startupCodeReleased = false
        while true {
            if !startupCodeReleased, SystemClock.now() - running >= RegistrationEngine.startupCodeReleaseDelay {
                startupCodeReleased = true
                let released = MemoryTuning.releaseStartupCode()
                self.logger.debug("memory: start-up over, \(released / 1024) KiB of code and constants handed back")
            }
            self.applyPendingWatches(now: SystemClock.now())
            var deadline = self.engine.nextDeadline()
            if !self.pendingWatches.isEmpty, let applied = self.watchesAppliedAt {
                let due = applied + RegistrationEngine.watchUpdateInterval
                deadline = min(deadline ?? due, due)
            }
            let timeout: TimeInterval
            if let deadline {
                timeout = min(1, max(0, Double((deadline - SystemClock.now()).nanosecondsClamped) / 1e9))
            } else {
                timeout = 1
            }
            let (events, stopped) = self.mailbox.take(timeout: timeout)
            if stopped {
                // For the next start: which hosts to speak for again at once (`SpokenForRecord`).
                do {
                    try SpokenForRecord.write(
                        SpokenForRecord(keys: self.engine.spokenFor, stoppedAt: Date()),
                        directory: self.journal.directory)
                } catch {
                    self.logger.warning(
                        "state: cannot record the hosts spoken for (\(error)); they are probed first at the next start")
                }
                self.saveSSDP(now: SystemClock.now(), force: true)
                self.flushHistory()
                self.journal.abandonCompaction()
                var batch = Batch()
                self.perform(self.engine.shutdown(), into: &batch)
                self.mdns?.sendAndWait(batch.transmissions.map { ($0.destination, $0.bytes) })
                self.mdns?.close()
                self.ssdpSockets?.close()
                self.neighbours?.flush()
                self.monitor?.stop()
                self.packets?.close()
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
            if self.eventsSinceTrim >= RegistrationEngine.trimAfterEvents, events.count <= RegistrationEngine.quietBatch
            {
                MemoryTuning.trim()
                self.eventsSinceTrim = 0
            }
        }
    }

    func process(_ events: [Event]) {
        let now = SystemClock.now()
        if now - self.inventoryReadAt > RegistrationEngine.inventoryRefreshInterval { self.refreshInventory(now: now) }
        var batch = Batch()
        for event in Self.legacyQueriesFirst(events) {
            switch event {
            case .frame(let bytes, let interfaceIndex, let outgoing):
                self.packets?.consumed(bytes.count)
                self.perform(
                    self.engine.receiveFrame(bytes, interfaceIndex: interfaceIndex, outgoing: outgoing, now: now),
                    into: &batch)
                self.answerWaitingQueries(into: &batch)
            case .linksChanged:
                self.refreshInventory(now: now)
            case .multicastSocketClosed:
                self.serve(self.engine.servedInterfaces)
            case .historyLoaded(let book):
                self.historyLoaded(book)
            case .reconfigure(let takeoverConfiguration, let expiryAction, let refusalReply):
                self.engine.reconfigure(
                    takeover: takeoverConfiguration, expiryAction: expiryAction, refusalReply: refusalReply)
            case .control(let request, let reply) where request.command == .releaseAll && request.transfer == true:
                self.startTransfers(reply: reply, now: now)
            case .transfersDone(let taken, let reply):
                let summaries = self.engine.registrations.values.sorted { $0.key < $1.key }.map {
                    self.summary(of: $0, now: now)
                }
                self.perform(self.engine.finishTransfers(taken: taken, now: now), into: &batch)
                var byMAC: [String: String] = [:]
                for (key, label) in taken { byMAC[key.primaryMAC.description] = label }
                batch.controlReplies.append((ControlResponse(hosts: summaries, transferred: byMAC), reply))
            case .control(let request, let reply):
                var actions: [EngineAction] = []
                let response = self.handleControl(request, now: now, actions: &actions)
                self.perform(actions, into: &batch)
                batch.controlReplies.append((response, reply))
            case .mdns(let bytes, let remote, let interfaceIndex, let destination):
                guard let source = IPAddress(remote), let port = remote.port else { continue }
                self.perform(
                    self.engine.receiveMDNS(
                        bytes, from: source, port: UInt16(port), destination: destination,
                        interfaceIndex: interfaceIndex, now: now), into: &batch)
            case .ssdp(let bytes, let remote, let interfaceIndex, let destination):
                guard let source = IPAddress(remote), let port = remote.port else { continue }
                self.perform(
                    self.engine.receiveSSDP(
                        bytes, from: source, port: UInt16(port), destination: destination,
                        interfaceIndex: interfaceIndex, now: now), into: &batch)
            case .datagram(let bytes, let remote, let interfaceIndex, let channel):
                guard let interface = self.servedInterface(index: interfaceIndex, now: now),
                    let source = IPAddress(remote)
                else {
                    // Apple's proxy too drops what did not arrive on an interface it serves (docs/protocol.md §3.6).
                    continue
                }
                // The accepted registration's line costs as much as the registration: only when it is logged.
                self.engine.logsRegistrations = self.logger.logLevel <= .notice
                let actions = self.engine.receiveRegistration(
                    bytes, from: source, port: UInt16(exactly: remote.port ?? 0) ?? 0, on: interface, now: now)
                // The reply goes back by the socket the datagram came in on, to its source as the kernel gave it
                // (an IPv6 link-local source keeps its scope).
                self.perform(actions, into: &batch, replyingVia: (channel, remote))
                self.answerWaitingQueries(into: &batch)
            }
        }
        for slice in 1...RegistrationEngine.timerSlicesPerPass {
            self.perform(self.engine.tick(now: now, slice: RegistrationEngine.timerSlice), into: &batch)
            guard slice < RegistrationEngine.timerSlicesPerPass, let next = self.engine.nextDeadline(), next <= now
            else { break }
            self.answerWaitingQueries(into: &batch)
        }
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
                    try self.journal.append(encoded: bytes, entries: count) { fd in
                        try self.syncAnsweringQueries(fd, into: &batch)
                    }
                }
            } catch {
                // Not durable, so not acknowledged: stay silent (the clients retry) and go back to what the journal
                // holds. (Keeping a copy of the state for this rare case would make every batch copy the whole
                // store, copy-on-write, once thousands of hosts sleep.)
                self.logger.error(
                    "state: cannot write \(self.journal.directory.path)/registrations.journal: \(error); \(batch.journalEntries) changes not acknowledged"
                )
                self.statusLock.withLock { self.status.persistenceFailures += 1 }
                batch.replies.removeAll()
                batch.controlReplies = batch.controlReplies.map {
                    (
                        ControlResponse.failure(
                            "the state directory could not be written (\(error)); nothing was changed"), $0.1
                    )
                }
                self.reloadFromJournal(now: now)
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
        self.flushHistory()
        self.publishStatus()
    }

    /// The batch with its legacy queries (mDNS from a port other than 5353) moved to the front, the rest in
    /// order. RFC 6762 §6.7 expects their answer at once, and a query that came in behind a burst of 32
    /// registrations waited for all of them (several milliseconds). Moving one ahead by a few milliseconds is
    /// safe: what it says about its sender (that it is up) was as true a moment earlier, and a registration from
    /// the same host in the same batch starts that host over as awake anyway. Multicast queries and responses
    /// (port 5353) keep their place.
    static func legacyQueriesFirst(_ events: [Event]) -> [Event] {
        func isLegacy(_ event: Event) -> Bool {
            if case .mdns(_, let remote, _, _) = event, let port = remote.port, port != Int(MDNSRules.port) {
                return true
            }
            return false
        }
        guard events.count > 1, events.contains(where: isLegacy) else { return events }
        return events.filter(isLegacy) + events.filter { !isLegacy($0) }
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

    /// Queries that arrived while this batch's registrations are handled are answered now, between two of them,
    /// instead of after the batch and its fdatasync (a batch of 32 registrations of Mac-sized hosts is about ten
    /// milliseconds of work; RFC 6762 §6.7 expects a legacy query's answer at once). Their answers go out with the
    /// batch's other mDNS output, which never waits for the journal.
    func answerWaitingQueries(into batch: inout Batch) {
        self.answer(self.mailbox.take(lane: Event.mdnsLane), into: &batch)
    }

    /// Makes the journal's latest write durable on the sync thread (`JournalSync`) and answers the mDNS lane
    /// until it is; without that thread, syncs here.
    func syncAnsweringQueries(_ fd: Int32, into batch: inout Batch) throws {
        guard let sync = self.journalSync else {
            _ = try retryingSyscall("fdatasync") { fdatasync(fd) }
            return
        }
        sync.begin(fd)
        while true {
            let (waiting, finished) = self.mailbox.take(lane: Event.mdnsLane, waitingUntil: { sync.isFinished })
            self.answer(waiting, into: &batch)
            if finished { break }
        }
        try sync.take()?.get()
    }

    private func answer(_ waiting: [Event], into batch: inout Batch) {
        guard !waiting.isEmpty else { return }
        let now = SystemClock.now()
        for case .mdns(let bytes, let remote, let interfaceIndex, let destination) in waiting {
            guard let source = IPAddress(remote), let port = remote.port else { continue }
            self.perform(
                self.engine.receiveMDNS(
                    bytes, from: source, port: UInt16(port), destination: destination, interfaceIndex: interfaceIndex,
                    now: now), into: &batch)
        }
        self.sendMulticast(&batch)
    }

    /// Carries out the engine's decisions: frames at once (a magic packet or an ARP reply must not wait for a log
    /// line; netlink changes go to the neighbour table's own thread, capture-filter changes to the end of the
    /// pass), the rest into the batch or the log.
    func perform(
        _ actions: [EngineAction], into batch: inout Batch, replyingVia reply: (Channel, SocketAddress)? = nil
    ) {
        // Interfaces first (their captures must be open for the frames that follow), then frames, ahead of
        // everything else.
        for action in actions {
            switch action {
            case .serve(let interfaces): self.serve(interfaces)
            case .packet(.sendFrame(let frame, let index)): self.packets?.send(frame, interfaceIndex: index)
            default: continue
            }
        }
        for action in actions {
            switch action {
            case .journal(let entry):
                batch.journal += RegistrationJournal.encode(entry, timeBase: batch.timeBase)
                batch.journalEntries += 1
            case .transmit(let transmission):
                batch.transmissions.append(transmission)
            case .ssdp(let transmission):
                batch.ssdp.append(transmission)
            case .packet(let packet):
                switch packet {
                case .sendFrame:
                    continue  // sent above, ahead of everything else
                case .sendWakeDatagram(let payload, let index):
                    self.packets?.sendWakeDatagram(payload, interfaceIndex: index)
                case .setNeighbour(let index, let address, let mac):
                    self.neighbours?.set(interfaceIndex: index, address: address, mac: mac)
                case .removeNeighbour(let index, let address):
                    self.neighbours?.remove(interfaceIndex: index, address: address)
                case .watchChanged(let index):
                    self.pendingWatches.insert(index)
                }
            case .wakeEvent(let event):
                if event.kind == .wake {
                    let reason = WakeLog.kind(event.trigger)
                    self.statusLock.withLock { self.status.wakesByReason[reason, default: 0] += 1 }
                }
                let entry = WakeLog.entry(event, at: Date())
                self.recordHistory(HistoryRecord(entry))
                do {
                    try self.wakeLog.append(entry)
                } catch {
                    self.logger.warning("wake log: cannot write \(self.wakeLog.url.path): \(error)")
                }
            case .presence(let change):
                self.recordHistory(
                    HistoryRecord(
                        time: Date(), mac: change.host.primaryMAC.description, hostName: change.hostName,
                        state: PresenceState(change.phase), note: change.why))
            case .log(let level, let message):
                self.logger.log(level: level.loggerLevel, "\(message)")
            case .reply(let registrationReply):
                // Only a registration datagram's actions carry a reply, and they come with its channel.
                guard let (channel, remote) = reply else { continue }
                batch.replies.append((channel, remote, registrationReply.bytes))
            case .serve:
                continue  // done above, ahead of everything else
            }
        }
    }

    /// mDNS and SSDP output of the batch so far, sent now.
    func sendMulticast(_ batch: inout Batch) {
        if !batch.transmissions.isEmpty {
            self.mdns?.send(batch.transmissions.map { ($0.destination, $0.bytes) })
            batch.transmissions.removeAll()
        }
        if !batch.ssdp.isEmpty {
            self.ssdpSockets?.send(batch.ssdp.map { ($0.destination, $0.bytes) })
            batch.ssdp.removeAll()
        }
    }

    func applyPendingWatches(now: Timestamp) {
        guard !self.pendingWatches.isEmpty else { return }
        if let applied = self.watchesAppliedAt, now - applied < RegistrationEngine.watchUpdateInterval { return }
        self.watchesAppliedAt = now
        defer { self.pendingWatches.removeAll() }
        for index in self.pendingWatches.sorted() {
            guard let list = self.engine.watchList(interfaceIndex: index) else { continue }
            self.packets?.watch(v4: list.v4, v6: list.v6, interfaceIndex: index)
        }
    }

    /// Replaces the in-memory state with what the journal holds (after a failed append).
    func reloadFromJournal(now: Timestamp) {
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
        self.logger.notice("state: reloaded \(replay.registrations.count) sleeping hosts from the journal")
    }
}
