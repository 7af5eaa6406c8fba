import CSleepProxyLinux
import FoundationEssentials
import Logging
import NIOCore
import SleepProxyControl
import SleepProxyCore
import SleepProxyWire

/// Queries first: legacy questions answered ahead of the batch, and the mDNS lane answered while the journal
/// syncs (RFC 6762 §6.7 expects a legacy query's answer at once).
extension EngineRunner {
    /// The batch with its legacy queries (mDNS from a port other than 5353) moved to the front, the rest in
    /// order. RFC 6762 §6.7 expects their answer at once, and a query that came in behind a burst of 32
    /// registrations waited for all of them (several milliseconds). Moving one ahead by a few milliseconds is
    /// safe: what it says about its sender (that it is up) was as true a moment earlier, and a registration from
    /// the same host in the same batch starts that host over as awake anyway. Multicast queries and responses
    /// (port 5353) keep their place.
    static func legacyQueriesFirst(_ events: [Event]) -> [Event] {
        func isLegacy(_ event: Event) -> Bool {
            if case .mdns(_, _, let port, _, _) = event, port != MDNSRules.port {
                return true
            }
            return false
        }
        guard events.count > 1, events.contains(where: isLegacy) else { return events }
        return events.filter(isLegacy) + events.filter { !isLegacy($0) }
    }

    /// Queries that arrived while this batch's registrations are handled are answered now, between two of them,
    /// instead of after the batch and its fdatasync (a batch of 32 registrations of Mac-sized hosts is about ten
    /// milliseconds of work; RFC 6762 §6.7 expects a legacy query's answer at once). Their answers go out with the
    /// batch's other mDNS output, which never waits for the journal.
    func answerWaitingQueries(into batch: inout Batch) {
        self.answer(
            self.mailbox.take(
                lane: Event.mdnsLane, watching: self.polledSockets.mdns, receive: self.receiveDatagrams),
            into: &batch)
    }

    /// Makes the journal's latest write durable on the sync thread (`JournalSync`) and answers the mDNS lane
    /// until it is; without that thread, syncs here.
    func syncAnsweringQueries(_ write: JournalWrite, into batch: inout Batch) throws {
        guard let sync = self.journalSync else {
            try write.perform(sync: true)
            return
        }
        sync.begin(write)
        while true {
            let (waiting, finished) = self.mailbox.take(
                lane: Event.mdnsLane, waitingUntil: { sync.isFinished }, watching: self.polledSockets.mdns,
                receive: self.receiveDatagrams)
            self.answer(waiting, into: &batch)
            if finished { break }
        }
        try sync.take()?.get()
    }

    /// The multicast sockets the engine thread reads itself (`MulticastSockets.receive`), noted again after each
    /// `serve`, which alone opens and closes them (asking the sockets at every batch took their lock and built
    /// arrays, on a busy LAN's every datagram).
    func notePolledSockets() {
        self.polledSockets.mdns = self.mdns?.receivingSockets ?? []
        self.polledSockets.ssdp = self.ssdpSockets?.receivingSockets ?? []
        self.polledSockets.all = self.polledSockets.mdns + self.polledSockets.ssdp
    }

    /// What waits on `readable` goes to the mailbox's lanes, on the engine thread.
    func receiveDatagrams(_ readable: [CInt]) {
        for socket in readable {
            if self.polledSockets.mdns.contains(socket) {
                self.mdns?.receive(from: socket, into: &self.datagramBuffer)
            } else if self.polledSockets.ssdp.contains(socket) {
                self.ssdpSockets?.receive(from: socket, into: &self.datagramBuffer)
            }
        }
    }

    private func answer(_ waiting: [Event], into batch: inout Batch) {
        guard !waiting.isEmpty else { return }
        let now = SystemClock.now()
        for case .mdns(let bytes, let source, let port, let interfaceIndex, let destination) in waiting {
            self.perform(
                self.engine.receiveMDNS(
                    bytes, from: source, port: port, destination: destination, interfaceIndex: interfaceIndex,
                    now: now), into: &batch)
        }
        self.sendMulticast(&batch)
    }
}
