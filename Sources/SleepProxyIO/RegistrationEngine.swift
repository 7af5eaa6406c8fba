import CSleepProxyLinux
import Foundation
import Logging
import NIOCore
import SleepProxyControl
import SleepProxyCore
import SleepProxyWire

/// The single owner of registration state: a dedicated thread that takes datagrams in batches, runs them
/// through the pure `Registrar`, makes every acceptance durable with one journal append, and only then sends
/// the replies (an acknowledged registration survives a crash; sps-protocol §3.6 says what the reply holds).
///
/// A thread rather than a task because persisting means a blocking fdatasync, which must not stall the
/// two-thread cooperative pool (linux-notes §7), and because a batch per wake-up is exactly group commit.
public final class RegistrationEngine: @unchecked Sendable {
    // @unchecked: `registrar`, `inventory` and `journal` are touched only on the engine thread; `status` is
    // guarded by `statusLock`; `mailbox` is itself thread-safe.

    public struct Configuration: Sendable {
        public var registration: RegistrationConfiguration
        /// Interfaces to serve; empty means every up, multicast-capable, non-loopback interface.
        public var interfaces: [String]
        public var stateDirectory: URL
        /// The proxy's own advertisement; nil runs without the mDNS side (registration only).
        public var responder: ResponderConfiguration?
        /// Address takeover and wake; nil runs without the packet side.
        public var takeover: TakeoverConfiguration?

        public init(
            registration: RegistrationConfiguration = RegistrationConfiguration(), interfaces: [String] = [], stateDirectory: URL,
            responder: ResponderConfiguration? = nil, takeover: TakeoverConfiguration? = nil
        ) {
            self.registration = registration
            self.interfaces = interfaces
            self.stateDirectory = stateDirectory
            self.responder = responder
            self.takeover = takeover
        }
    }

    /// Events queued for the engine at most, per lane (`Event.lane`); beyond it they are dropped (and counted).
    static let mailboxCapacity = 4096
    /// Registrations made durable (one fdatasync) and answered together at most.
    static let maximumBatch = 32
    /// Events of any kind processed between two chances to answer registrations. Captured frames and mDNS
    /// packets do not count toward `maximumBatch` (they need no fdatasync): counted, the replies the proxy itself
    /// sends to registering hosts — captured on their way out, since those addresses are watched — split every
    /// burst of registrations into more batches, and so into more syncs.
    static let maximumBatchEvents = 256
    /// How often the interface list is re-read even when nothing asks for it.
    static let inventoryRefreshInterval: Duration = .seconds(30)

    enum Event {
        case datagram(bytes: [UInt8], remote: SocketAddress, interfaceIndex: Int?, channel: Channel)
        case mdns(bytes: [UInt8], remote: SocketAddress, interfaceIndex: Int, destination: IPAddress?)
        case frame(bytes: [UInt8], interfaceIndex: Int, outgoing: Bool)
        /// Netlink saw a link or address change.
        case linksChanged
        /// An admin request; `reply` is called on the engine thread once the change (if any) is durable.
        case control(ControlRequest, reply: @Sendable (ControlResponse) -> Void)
        /// Settings a reload (SIGHUP) changes in place.
        case reconfigure(takeover: TakeoverConfiguration?, expiryAction: RegistrationConfiguration.ExpiryAction, refusalReply: RegistrationConfiguration.RefusalReply)

        /// Mailbox lanes: registrations and the admin side, mDNS, captured frames. Each has its own bound, so a
        /// flood of one kind cannot keep the others out.
        static let lanes = 3
        static let framesLane = 2
        static let mdnsLane = 1

        var lane: Int {
            switch self {
            case .frame: Self.framesLane
            case .mdns: Self.mdnsLane
            case .datagram, .linksChanged, .control, .reconfigure: 0
            }
        }
    }

    /// A copy of the interesting numbers, readable from any thread. Counts only: copying every host after each
    /// batch would cost more than the batch once thousands of hosts sleep.
    public struct Status: Sendable {
        public var hostCount = 0
        public var recordCount = 0
        public var statistics = RegistrationStatistics()
        public var droppedDatagrams = 0
        /// Captured frames dropped because the engine's frame queue was full (`PacketLinks.maximumQueuedBytes`).
        public var droppedFrames = 0
        public var persistenceFailures = 0
        public var batches = 0
        public var responder = ResponderStatistics()
        public var instanceLabel: String?
        public var takeover = TakeoverStatistics()
        /// Wakes started, by trigger type (`connection`, `address-conflict`, ...).
        public var wakesByReason: [String: Int] = [:]
    }

    private let configuration: Configuration
    let logger: Logger
    let startedAt = Date()
    private let mailbox = Mailbox<Event>(capacity: RegistrationEngine.mailboxCapacity, lanes: Event.lanes, lane: { $0.lane })
    var registrar: Registrar
    var responder: Responder?
    private var mdns: MDNSSockets?
    var takeover: Takeover?
    private var packets: PacketLinks?
    private var neighbours: NeighbourTable?
    /// Interfaces whose capture filter must follow the takeover's addresses; rebuilt once per pass of the engine
    /// loop, not once per registration (a burst of 100 new hosts rebuilt and re-attached the filter 100 times).
    private var pendingWatches: Set<Int> = []
    private var monitor: LinkMonitor?
    public let wakeLog: WakeLog
    var servedContexts: [InterfaceContext] = []
    private var inventory: InterfaceInventory
    private var inventoryReadAt: Timestamp
    private let journal: JournalFile
    private let statusLock = NSLock()
    private var status = Status()
    private var thread: Thread?
    private let finished = DispatchSemaphore(value: 0)

    /// Opens the state directory and restores every unexpired registration, so they are served from the start.
    public init(configuration: Configuration, logger: Logger) throws {
        self.configuration = configuration
        self.logger = logger
        self.inventory = try InterfaceInventory.read()
        self.inventoryReadAt = SystemClock.now()
        for name in configuration.interfaces where self.inventory.interface(named: name) == nil {
            throw RegistrationEngineError(description: "unknown interface \(name): check `ip link` for its name, or leave --interface out to serve every interface")
        }
        let (journal, replay) = try JournalFile.open(directory: configuration.stateDirectory, timeBase: SystemClock.timeBase())
        self.journal = journal
        var registrar = Registrar(configuration: configuration.registration)
        for problem in replay.problems {
            logger.warning("state: \(problem) (\(journal.directory.path)/registrations.journal)")
        }
        let now = SystemClock.now()
        for registration in replay.registrations {
            registrar.restore(registration)
            logger.info("state: restored \(registration.hostName?.description ?? "?") (\(registration.key)), lease ends in \((registration.leaseExpiry - now).wholeSeconds) s")
        }
        for registration in replay.expired {
            logger.info("state: not restoring \(registration.hostName?.description ?? registration.key.description): its lease ended while the proxy was stopped")
        }
        logger.info("state: restored \(replay.registrations.count) sleeping hosts with \(registrar.store.recordCount) records from \(journal.directory.path)")
        self.registrar = registrar
        self.wakeLog = WakeLog(directory: configuration.stateDirectory)
        if let takeoverConfiguration = configuration.takeover {
            // Without CAP_NET_RAW the packet side cannot work at all: say so at start rather than run half a proxy.
            let probe = socket(AF_PACKET, Int32(SOCK_RAW.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            if probe < 0 {
                let code = errno
                if code == EPERM || code == EACCES {
                    throw RegistrationEngineError(description: "no permission to open raw packet sockets (CAP_NET_RAW) for address takeover and wake: run as root, grant CAP_NET_RAW and CAP_NET_ADMIN (the systemd unit in deploy/ does), or pass --no-takeover to answer mDNS only")
                }
            } else {
                close(probe)
            }
            let served = configuration.interfaces.isEmpty ? self.inventory.defaultServed.map(\.context.name) : configuration.interfaces
            for name in served {
                for problem in KernelSettings.takeoverProblems(interface: name) { logger.warning("kernel: \(problem)") }
            }
            var takeover = Takeover(configuration: takeoverConfiguration)
            for registration in registrar.store.owners.values { _ = takeover.registered(registration, now: now) }
            self.takeover = takeover
            self.packets = PacketLinks(logger: logger, sink: { [mailbox] bytes, index, outgoing in mailbox.post(.frame(bytes: bytes, interfaceIndex: index, outgoing: outgoing)) })
            do {
                self.neighbours = try NeighbourTable(logger: logger)
            } catch {
                logger.warning("\(error); the proxy machine's own connections to sleeping hosts will not wake them")
            }
            do {
                let monitor = try LinkMonitor(logger: logger, changed: { [mailbox] in mailbox.post(.linksChanged) })
                self.monitor = monitor
            } catch {
                logger.warning("\(error); interfaces are re-read every \(RegistrationEngine.inventoryRefreshInterval) instead")
            }
        }
        if let responderConfiguration = configuration.responder {
            self.responder = Responder(configuration: responderConfiguration)
            self.mdns = MDNSSockets(logger: logger, sink: { [mailbox] event in mailbox.post(event) })
        }
        self.publishStatus()
    }

    public func start() {
        let thread = Thread { [self] in
            self.run()
            self.finished.signal()
        }
        thread.name = "sleepproxy-registration-engine"
        self.thread = thread
        thread.start()
        self.monitor?.start()
    }

    /// Stops after the batch in progress; registrations stay in the journal for the next start. Safe to call
    /// more than once.
    public func stop() {
        self.mailbox.stop()
        if self.thread != nil {
            self.finished.wait()
            // Leave the semaphore signalled, so a second stop() returns at once instead of waiting forever.
            self.finished.signal()
        }
    }

    public var currentStatus: Status {
        self.statusLock.lock()
        defer { self.statusLock.unlock() }
        var status = self.status
        status.droppedDatagrams = self.mailbox.dropped - self.mailbox.dropped(lane: Event.framesLane)
        // Frames refused by the mailbox are counted by PacketLinks with those over its byte budget.
        status.droppedFrames = self.packets?.droppedFrames ?? 0
        return status
    }

    func post(_ event: Event) { self.mailbox.post(event) }

    /// Applies reloaded settings on the engine thread.
    public func reconfigure(takeover: TakeoverConfiguration?, expiryAction: RegistrationConfiguration.ExpiryAction, refusalReply: RegistrationConfiguration.RefusalReply) {
        self.mailbox.post(.reconfigure(takeover: takeover, expiryAction: expiryAction, refusalReply: refusalReply))
    }

    /// Runs an admin request on the engine thread; `reply` gets the answer (or a failure when the engine is full
    /// or stopping).
    public func control(_ request: ControlRequest, reply: @escaping @Sendable (ControlResponse) -> Void) {
        if !self.mailbox.post(.control(request, reply: reply)) {
            reply(.failure("the daemon is busy or stopping; try again"))
        }
    }

    // MARK: - The engine thread

    private func run() {
        self.refreshInventory(now: SystemClock.now())
        while true {
            self.applyPendingWatches()
            let timeout: TimeInterval
            if let deadline = [self.registrar.nextDeadline(), self.responder?.nextDeadline(), self.takeover?.nextDeadline()].compactMap({ $0 }).min() {
                timeout = min(1, max(0, Double((deadline - SystemClock.now()).nanosecondsClamped) / 1e9))
            } else {
                timeout = 1
            }
            let (events, stopped) = self.mailbox.take(timeout: timeout)
            if stopped {
                // The proxy's own records say goodbye (RFC 6762 §10.1); the sleeping hosts' stay for the next start.
                if var responder = self.responder {
                    self.mdns?.sendAndWait(Self.transmissions(responder.shutdown()))
                    self.responder = responder
                }
                self.mdns?.close()
                self.withTakeover { $0.shutdown() }
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
        }
    }

    /// Cuts what the mailbox held into batches of at most `maximumBatch` registrations (one fdatasync each) and
    /// `maximumBatchEvents` events, in order.
    static func batches<T>(_ events: [T], isRegistration: (T) -> Bool) -> [[T]] {
        var batches: [[T]] = []
        var current: [T] = []
        var registrations = 0
        for event in events {
            current.append(event)
            if isRegistration(event) { registrations += 1 }
            if registrations == Self.maximumBatch || current.count == Self.maximumBatchEvents {
                batches.append(current)
                current = []
                registrations = 0
            }
        }
        if !current.isEmpty { batches.append(current) }
        return batches
    }

    static func batches(_ events: [Event]) -> [[Event]] {
        self.batches(events) { if case .datagram = $0 { true } else { false } }
    }

    private func process(_ events: [Event]) {
        let now = SystemClock.now()
        if now - self.inventoryReadAt > RegistrationEngine.inventoryRefreshInterval { self.refreshInventory(now: now) }
        var entries: [RegistrationJournal.Entry] = []
        var replies: [(Channel, SocketAddress, [UInt8])] = []
        var outgoing: [MDNSTransmission] = []
        var controlReplies: [(ControlResponse, @Sendable (ControlResponse) -> Void)] = []

        for event in events {
            switch event {
            case .frame(let bytes, let interfaceIndex, let outgoing):
                self.packets?.consumed(bytes.count)
                self.withTakeover { $0.receive(frame: bytes, interfaceIndex: interfaceIndex, outgoing: outgoing, now: now) }
            case .linksChanged:
                self.refreshInventory(now: now)
            case .reconfigure(let takeoverConfiguration, let expiryAction, let refusalReply):
                if let takeoverConfiguration { self.takeover?.configuration = takeoverConfiguration }
                self.registrar.reconfigure(expiryAction: expiryAction, refusalReply: refusalReply)
            case .control(let request, let reply):
                controlReplies.append((self.handleControl(request, now: now, entries: &entries), reply))
            case .mdns(let bytes, let remote, let interfaceIndex, let destination):
                // In place (optional chaining), not on a copy: a copy would duplicate the responder's tables and
                // its answer cache on every packet.
                guard self.responder != nil, let source = IPAddress(remote), let port = remote.port else { continue }
                let store = self.registrar.store
                let actions = self.responder?.receive(bytes, from: source, port: UInt16(port), destination: destination, interfaceIndex: interfaceIndex, store: store, now: now) ?? []
                outgoing += self.perform(actions, entries: &entries, now: now)
            case .datagram(let bytes, let remote, let interfaceIndex, let channel):
                guard let interface = self.servedInterface(index: interfaceIndex, now: now), let source = IPAddress(remote) else {
                    continue  // Apple's proxy too drops what did not arrive on an interface it serves (sps-protocol §3.6).
                }
                let outcome = self.registrar.handle(datagram: bytes, from: source, on: interface.context, now: now)
                self.log(outcome, source: remote, interface: interface.context.name)
                if case .accepted(let acceptance) = outcome {
                    entries.append(.put(acceptance.registration))
                    self.responder?.registered(acceptance.registration, previous: acceptance.previous, now: now)
                    self.withTakeover { $0.registered(acceptance.registration, now: now) }
                }
                if let reply = outcome.reply { replies.append((channel, remote, reply)) }
            }
        }
        for expiry in self.registrar.expire(now: now) {
            let expired = expiry.registration
            entries.append(.remove(expired.key))
            self.responder?.removed(expired, reason: .expired, now: now)
            self.logger.notice("lease ended for \(expired.hostName?.description ?? "?") (\(expired.key)); records dropped with goodbyes; action: \(expiry.action.rawValue)")
            self.withTakeover { $0.removed(expired.key, reason: .expired, wake: expiry.action == .wake, now: now) }
        }
        self.withTakeover { $0.tick(now: now) }
        if self.responder != nil {
            let store = self.registrar.store
            let due = self.responder?.tick(store: store, now: now) ?? []
            outgoing += self.perform(due, entries: &entries, now: now)
        }
        // mDNS output does not wait for the journal: it reveals nothing a crash could take back that matters
        // (a record answered once and then lost to a crash is re-registered by its host on its next sleep).
        self.mdns?.send(outgoing)

        if !entries.isEmpty {
            do {
                try self.journal.append(entries, timeBase: SystemClock.timeBase())
            } catch {
                // Not durable, so not acknowledged: stay silent (the clients retry) and go back to what the journal
                // holds. (Keeping a copy of the state for this rare case would make every batch copy the whole
                // store, copy-on-write, once thousands of hosts sleep.)
                self.logger.error("state: cannot write \(self.journal.directory.path)/registrations.journal: \(error); \(entries.count) changes not acknowledged")
                self.statusLock.withLock { self.status.persistenceFailures += 1 }
                replies.removeAll()
                controlReplies = controlReplies.map { (ControlResponse.failure("the state directory could not be written (\(error)); nothing was changed"), $0.1) }
                self.reloadFromJournal()
            }
        }
        for (response, reply) in controlReplies { reply(response) }
        // One hop to each channel's event loop for the whole batch, one flush: not one per reply.
        var byChannel: [ObjectIdentifier: (Channel, [AddressedEnvelope<ByteBuffer>])] = [:]
        for (channel, remote, reply) in replies {
            byChannel[ObjectIdentifier(channel), default: (channel, [])].1.append(AddressedEnvelope(remoteAddress: remote, data: ByteBuffer(bytes: reply)))
        }
        for (channel, envelopes) in byChannel.values {
            channel.eventLoop.execute {
                for envelope in envelopes { channel.write(envelope, promise: nil) }
                channel.flush()
            }
        }
        // Compaction stalls the engine for a write and three syncs, so it waits for a quiet moment (a wake-up
        // with nothing queued) unless the journal has grown past twice the usual trigger.
        if self.journal.needsCompaction, events.isEmpty || self.journal.mustCompact {
            do {
                try self.journal.compact(Array(self.registrar.store.owners.values), timeBase: SystemClock.timeBase())
            } catch {
                self.logger.warning("state: compaction failed (\(error)); the journal keeps growing until it succeeds")
            }
        }
        self.publishStatus()
    }

    /// Carries out what the responder decided: hand-backs leave the store (journalled), conflicts are reported.
    private func perform(_ actions: [ResponderAction], entries: inout [RegistrationJournal.Entry], now: Timestamp) -> [MDNSTransmission] {
        var transmissions: [MDNSTransmission] = []
        for action in actions {
            switch action {
            case .transmit(let transmission):
                transmissions.append(transmission)
            case .handBack(let key, let sequence):
                guard let registration = self.registrar.remove(key) else { continue }
                entries.append(.remove(key))
                self.responder?.removed(registration, reason: .handBack, now: now)
                self.withTakeover { $0.removed(key, reason: .handBack, wake: false, now: now) }
                self.logger.notice("hand-back: \(registration.hostName?.description ?? "?") (\(key)) is awake (Owner sequence \(sequence)); its records were dropped silently")
            case .conflict(let key, let record, let source):
                self.logger.warning("conflict: \(source) answers \(record.name) \(record.type) differently from sleeping host \(key); waking the owner to defend it")
                self.withTakeover { $0.wake(key, trigger: .mdnsConflict(name: record.name.description, from: source.description), now: now) }
            case .renamed(let instance, let host):
                self.logger.notice("mdns: name conflict; now advertising \"\(instance)\" on host name \(host).local")
            }
        }
        return transmissions
    }

    /// Runs `body` on the takeover state in place (a copy would duplicate every host's state on each frame) and
    /// carries out its actions.
    func withTakeover(_ body: (inout Takeover) -> [TakeoverAction]) {
        guard self.takeover != nil else { return }
        let actions = body(&self.takeover!)
        self.performTakeover(actions)
    }

    /// Carries out what the packet side decided, at once (a wake's first magic packet must not wait for the batch).
    private func performTakeover(_ actions: [TakeoverAction]) {
        // Frames first: a magic packet or an ARP reply must not wait for a log line (netlink changes are queued to
        // the neighbour table's own thread, capture-filter changes to the end of the pass).
        var rest: [TakeoverAction] = []
        for action in actions {
            if case .sendFrame(let frame, let index) = action {
                self.packets?.send(frame, interfaceIndex: index)
            } else {
                rest.append(action)
            }
        }
        for action in rest {
            switch action {
            case .sendFrame:
                break
            case .sendWakeDatagram(let payload, let index):
                self.packets?.sendWakeDatagram(payload, interfaceIndex: index)
            case .setNeighbour(let index, let address, let mac):
                self.neighbours?.set(interfaceIndex: index, address: address, mac: mac)
            case .removeNeighbour(let index, let address):
                self.neighbours?.remove(interfaceIndex: index, address: address)
            case .watchChanged(let index):
                self.pendingWatches.insert(index)
            case .event(let event):
                if event.kind == .wake {
                    let reason = WakeLog.entry(event, at: Date()).trigger.type
                    self.statusLock.withLock { self.status.wakesByReason[reason, default: 0] += 1 }
                }
                if event.kind == .ignored { self.logger.info("wake: \(event.summary)") } else { self.logger.notice("wake: \(event.summary)") }
                do {
                    try self.wakeLog.append(event, at: Date())
                } catch {
                    self.logger.warning("wake log: cannot write \(self.wakeLog.url.path): \(error)")
                }
            }
        }
    }

    private func applyPendingWatches() {
        guard !self.pendingWatches.isEmpty else { return }
        defer { self.pendingWatches.removeAll() }
        guard let takeover = self.takeover else { return }
        for index in self.pendingWatches.sorted() {
            self.packets?.watch(takeover.watchedAddresses(interfaceIndex: index), interfaceIndex: index)
        }
    }

    static func transmissions(_ actions: [ResponderAction]) -> [MDNSTransmission] {
        actions.compactMap { if case .transmit(let transmission) = $0 { return transmission } else { return nil } }
    }

    /// Replaces the in-memory state with what the journal holds (after a failed append).
    private func reloadFromJournal() {
        let replay: RegistrationJournal.Replay
        do {
            replay = try self.journal.reread(timeBase: SystemClock.timeBase())
        } catch {
            // Neither writable nor readable: keep serving what memory holds rather than forget every host.
            self.logger.error("state: cannot read the journal back (\(error)); keeping the in-memory registrations")
            return
        }
        // The running configuration (a SIGHUP may have changed it since start), not the one started with.
        var registrar = Registrar(configuration: self.registrar.configuration)
        for registration in replay.registrations { registrar.restore(registration) }
        registrar.adoptStatistics(from: self.registrar)
        self.registrar = registrar
        // Whatever this batch took away in memory (a hand-back, a forget) is back: the packet side must hold those
        // hosts again too, or they would be answered over mDNS but never taken over or woken. A host it still
        // holds with the same sequence keeps its state.
        let now = SystemClock.now()
        for registration in replay.registrations { self.withTakeover { $0.registered(registration, now: now) } }
        self.logger.notice("state: reloaded \(replay.registrations.count) sleeping hosts from the journal")
    }

    private func servedInterface(index: Int?, now: Timestamp) -> InterfaceInventory.Interface? {
        guard let index else { return nil }
        if self.inventory.interface(index: index) == nil { self.refreshInventory(now: now) }
        guard let interface = self.inventory.interface(index: index) else { return nil }
        if self.configuration.interfaces.isEmpty {
            return self.inventory.defaultServed.contains { $0.context.index == index } ? interface : nil
        }
        return self.configuration.interfaces.contains(interface.context.name) ? interface : nil
    }

    private func refreshInventory(now: Timestamp) {
        do {
            self.inventory = try InterfaceInventory.read()
        } catch {
            self.logger.warning("interfaces: cannot read the interface list: \(error)")
        }
        self.inventoryReadAt = now
        let served = self.configuration.interfaces.isEmpty
            ? self.inventory.defaultServed.map(\.context)
            : self.inventory.interfaces.filter { self.configuration.interfaces.contains($0.context.name) && $0.isUp }.map(\.context)
        guard served != self.servedContexts else { return }
        self.servedContexts = served
        self.packets?.serve(served.map { (index: $0.index, name: $0.name) })
        self.withTakeover { $0.setInterfaces(served) }
        guard self.responder != nil else { return }
        self.mdns?.serve(served)
        self.mdns?.send(Self.transmissions(self.responder?.setInterfaces(served, now: now) ?? []))
    }

    private func log(_ outcome: RegistrationOutcome, source socketAddress: SocketAddress, interface: String) {
        let source = socketAddress.logDescription
        switch outcome {
        case .accepted(let acceptance):
            // Deriving the summary costs as much as the registration itself: only when the line is logged.
            guard self.logger.logLevel <= .notice else { return }
            let summary = acceptance.registration.summary
            let services = summary.services.map { "\($0.type.labelStrings.prefix(2).joined(separator: ".")):\($0.port)" }.joined(separator: ", ")
            self.logger.notice("registered \(summary.hostName?.description ?? "?") (\(acceptance.registration.key)) from \(source) on \(interface): \(acceptance.registration.records.count) records, lease \(acceptance.grantedLease) s, addresses \(summary.addresses.map(\.description).joined(separator: " ")), services [\(services)]\(acceptance.startedNewEpoch ? "" : " (update)")")
        case .malformed(let problem, _):
            self.logger.warning("registration from \(source) on \(interface) malformed (\(problem.rawValue)); answered FORMERR")
        case .refused(let reason, let reply):
            self.logger.warning("registration from \(source) on \(interface) refused (\(reason.rawValue)); \(reply == nil ? "no reply sent" : "answered REFUSED")")
        case .notImplemented(let opcode, _):
            self.logger.info("\(opcode) from \(source) on \(interface) on the registration port; answered NOTIMP")
        case .ignored(let reason):
            self.logger.debug("ignored a datagram from \(source) on \(interface) (\(reason.rawValue))")
        }
    }

    private func publishStatus() {
        let hostCount = self.registrar.store.hostCount
        let recordCount = self.registrar.store.recordCount
        let statistics = self.registrar.statistics
        self.statusLock.withLock {
            self.status.hostCount = hostCount
            self.status.recordCount = recordCount
            self.status.statistics = statistics
            self.status.batches += 1
            if let responder = self.responder {
                self.status.responder = responder.statistics
                self.status.instanceLabel = responder.configuration.instanceLabel
            }
            if let takeover = self.takeover { self.status.takeover = takeover.statistics }
        }
    }
}

public struct RegistrationEngineError: Error, CustomStringConvertible {
    public var description: String
}

extension SocketAddress {
    /// "192.0.2.2:5353" or "[fe80::2%eth0]:5353" for log lines.
    var logDescription: String {
        guard let ip = IPAddress(self), let port = self.port else { return "\(self)" }
        switch ip {
        case .v4: return "\(ip):\(port)"
        case .v6:
            if case .v6(let v6) = self, v6.address.sin6_scope_id != 0 {
                return "[\(ip)%\(v6.address.sin6_scope_id)]:\(port)"
            }
            return "[\(ip)]:\(port)"
        }
    }
}
