import CSleepProxyLinux
import FoundationEssentials
import Logging
import NIOCore
import SleepProxyControl
import SleepProxyCore
import SleepProxyWire

/// Handling: each event of a batch given to the engine, and the engine's actions carried out.
extension EngineRunner {
    func handle(_ event: Event, now: Timestamp, into batch: inout Batch) {
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
        case .reconfigure(let takeoverConfiguration, let expiryAction, let refusalReply, let power):
            // What slept until now is priced at the figures it slept under.
            self.creditSavings()
            self.power = power
            self.perform(
                self.engine.reconfigure(
                    takeover: takeoverConfiguration, expiryAction: expiryAction, refusalReply: refusalReply),
                into: &batch)
        case .adopt(let macs):
            self.configureAdoption(macs, now: now, into: &batch)
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
        case .mdns(let bytes, let source, let port, let interfaceIndex, let destination):
            self.perform(
                self.engine.receiveMDNS(
                    bytes, from: source, port: port, destination: destination, interfaceIndex: interfaceIndex,
                    now: now), into: &batch)
        case .ssdp(let bytes, let source, let port, let interfaceIndex, let destination):
            self.perform(
                self.engine.receiveSSDP(
                    bytes, from: source, port: port, destination: destination, interfaceIndex: interfaceIndex,
                    now: now), into: &batch)
        case .datagram(let bytes, let remote, let interfaceIndex, let channel):
            guard let interface = self.servedInterface(index: interfaceIndex, now: now),
                let source = IPAddress(remote)
            else {
                // Apple's proxy too drops what did not arrive on an interface it serves (docs/protocol.md §3.6).
                return
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
                self.savingsWoke(event)
                let entry = WakeLog.entry(event, at: Date())
                self.recordHistory(HistoryRecord(entry))
                do {
                    try self.wakeLog.append(entry)
                } catch {
                    self.logger.warning("wake log: cannot write \(self.wakeLog.url.path): \(error)")
                }
            case .presence(let change):
                // For the live spoken-for record (`keepSpokenForLive`): a host leaves the set only if the record
                // names it.
                let presence = PresenceState(change.state)
                let named = self.liveRecordKeys.contains(change.host)
                self.savingsEntered(change)
                if presence == .asleep || presence == .waking {
                    if !named { self.spokenForJoined = true }
                } else if named {
                    self.spokenForLeft = true
                }
                self.recordHistory(
                    HistoryRecord(
                        time: Date(), mac: change.host.primaryMAC.description, hostName: change.hostName,
                        state: PresenceState(change.state), note: change.reason.rawValue))
            case .log(let level, let message):
                self.logger.log(level: level.loggerLevel, "\(message)")
            case .reply(let registrationReply):
                // Only a registration datagram's actions carry a reply, and they come with its channel.
                guard let (channel, remote) = reply else { return }
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
            // The rate limit counts from now, not from the batch's start (RFC 6762 §6.2).
            self.engine.multicastSent(at: SystemClock.now())
        }
        if !batch.ssdp.isEmpty {
            self.ssdpSockets?.send(batch.ssdp.map { ($0.destination, $0.bytes) })
            batch.ssdp.removeAll()
        }
    }
}
