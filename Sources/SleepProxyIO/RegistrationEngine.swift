import CSleepProxyLinux
import Foundation
import Logging
import NIOCore
import SleepProxyControl
import SleepProxyCore
import SleepProxyWire

/// Runs the pure `ProxyEngine` on a dedicated thread: takes events in batches, hands them to the engine, and
/// carries out what it decides: frames at once, mDNS at the end of the batch, journal entries with one append,
/// and registration replies only once that append is durable (an acknowledged registration survives a crash).
/// No rule lives here; the rules are the engine's (docs/coexistence.md).
///
/// A thread rather than a task because persisting means a blocking fdatasync, which must not stall the
/// two-thread cooperative pool (linux-notes §7), and because a batch per wake-up is exactly group commit.
public final class RegistrationEngine: @unchecked Sendable {
    // @unchecked: `engine`, `inventory` and `journal` are touched only on the engine thread; `status` is
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
        /// Held hosts by state (docs/coexistence.md).
        public var hostsByState: [HostState: Int] = [:]
    }

    private let configuration: Configuration
    let logger: Logger
    let startedAt = Date()
    private let mailbox = Mailbox<Event>(capacity: RegistrationEngine.mailboxCapacity, lanes: Event.lanes, lane: { $0.lane })
    /// Every rule and all host state (registrar, responder, takeover), pure; touched only on the engine thread.
    var engine: ProxyEngine
    private var mdns: MDNSSockets?
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
        for problem in replay.problems {
            logger.warning("state: \(problem) (\(journal.directory.path)/registrations.journal)")
        }
        let now = SystemClock.now()
        for registration in replay.registrations {
            logger.info("state: restored \(registration.hostName?.description ?? "?") (\(registration.key)), lease ends in \((registration.leaseExpiry - now).wholeSeconds) s")
        }
        for registration in replay.expired {
            logger.info("state: not restoring \(registration.hostName?.description ?? registration.key.description): its lease ended while the proxy was stopped")
        }
        let recordCount = replay.registrations.reduce(0) { $0 + $1.records.count }
        logger.info("state: restored \(replay.registrations.count) sleeping hosts with \(recordCount) records from \(journal.directory.path)")
        self.wakeLog = WakeLog(directory: configuration.stateDirectory)
        var takeover: Takeover? = nil
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
            takeover = Takeover(configuration: takeoverConfiguration)
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
        var responder: Responder? = nil
        if let responderConfiguration = configuration.responder {
            responder = Responder(configuration: responderConfiguration)
            self.mdns = MDNSSockets(logger: logger, sink: { [mailbox] event in mailbox.post(event) })
        }
        self.engine = ProxyEngine(registrar: Registrar(configuration: configuration.registration), responder: responder, takeover: takeover)
        // Nothing to carry out yet: interfaces are set when the thread starts, and restored hosts start silent.
        _ = self.engine.restore(replay.registrations, now: now)
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
            if let deadline = self.engine.nextDeadline() {
                timeout = min(1, max(0, Double((deadline - SystemClock.now()).nanosecondsClamped) / 1e9))
            } else {
                timeout = 1
            }
            let (events, stopped) = self.mailbox.take(timeout: timeout)
            if stopped {
                var batch = Batch()
                self.perform(self.engine.shutdown(), into: &batch)
                self.mdns?.sendAndWait(batch.transmissions)
                self.mdns?.close()
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

    /// What one batch has to carry out once the engine has seen all of it.
    struct Batch {
        var entries: [RegistrationJournal.Entry] = []
        var transmissions: [MDNSTransmission] = []
        var replies: [(Channel, SocketAddress, [UInt8])] = []
        var controlReplies: [(ControlResponse, @Sendable (ControlResponse) -> Void)] = []
    }

    private func process(_ events: [Event]) {
        let now = SystemClock.now()
        if now - self.inventoryReadAt > RegistrationEngine.inventoryRefreshInterval { self.refreshInventory(now: now) }
        var batch = Batch()
        for event in events {
            switch event {
            case .frame(let bytes, let interfaceIndex, let outgoing):
                self.packets?.consumed(bytes.count)
                self.perform(self.engine.receiveFrame(bytes, interfaceIndex: interfaceIndex, outgoing: outgoing, now: now), into: &batch)
            case .linksChanged:
                self.refreshInventory(now: now)
            case .reconfigure(let takeoverConfiguration, let expiryAction, let refusalReply):
                self.engine.reconfigure(takeover: takeoverConfiguration, expiryAction: expiryAction, refusalReply: refusalReply)
            case .control(let request, let reply):
                var actions: [EngineAction] = []
                let response = self.handleControl(request, now: now, actions: &actions)
                self.perform(actions, into: &batch)
                batch.controlReplies.append((response, reply))
            case .mdns(let bytes, let remote, let interfaceIndex, let destination):
                guard let source = IPAddress(remote), let port = remote.port else { continue }
                self.perform(self.engine.receiveMDNS(bytes, from: source, port: UInt16(port), destination: destination, interfaceIndex: interfaceIndex, now: now), into: &batch)
            case .datagram(let bytes, let remote, let interfaceIndex, let channel):
                guard let interface = self.servedInterface(index: interfaceIndex, now: now), let source = IPAddress(remote) else {
                    continue  // Apple's proxy too drops what did not arrive on an interface it serves (sps-protocol §3.6).
                }
                let (outcome, actions) = self.engine.receiveRegistration(bytes, from: source, on: interface.context, now: now)
                self.log(outcome, source: remote, interface: interface.context.name)
                self.perform(actions, into: &batch)
                if let reply = outcome.reply { batch.replies.append((channel, remote, reply)) }
            }
        }
        self.perform(self.engine.tick(now: now), into: &batch)
        // mDNS output does not wait for the journal: it reveals nothing a crash could take back that matters
        // (a record answered once and then lost to a crash is re-registered by its host on its next sleep).
        self.mdns?.send(batch.transmissions)
        batch.transmissions.removeAll()

        if !batch.entries.isEmpty {
            do {
                try self.journal.append(batch.entries, timeBase: SystemClock.timeBase())
            } catch {
                // Not durable, so not acknowledged: stay silent (the clients retry) and go back to what the journal
                // holds. (Keeping a copy of the state for this rare case would make every batch copy the whole
                // store, copy-on-write, once thousands of hosts sleep.)
                self.logger.error("state: cannot write \(self.journal.directory.path)/registrations.journal: \(error); \(batch.entries.count) changes not acknowledged")
                self.statusLock.withLock { self.status.persistenceFailures += 1 }
                batch.replies.removeAll()
                batch.controlReplies = batch.controlReplies.map { (ControlResponse.failure("the state directory could not be written (\(error)); nothing was changed"), $0.1) }
                self.reloadFromJournal(now: now)
            }
        }
        for (response, reply) in batch.controlReplies { reply(response) }
        // One hop to each channel's event loop for the whole batch, one flush: not one per reply.
        var byChannel: [ObjectIdentifier: (Channel, [AddressedEnvelope<ByteBuffer>])] = [:]
        for (channel, remote, reply) in batch.replies {
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
                try self.journal.compact(Array(self.engine.registrar.store.owners.values), timeBase: SystemClock.timeBase())
            } catch {
                self.logger.warning("state: compaction failed (\(error)); the journal keeps growing until it succeeds")
            }
        }
        self.publishStatus()
    }

    /// Carries out the engine's decisions: frames at once (a magic packet or an ARP reply must not wait for a log
    /// line; netlink changes go to the neighbour table's own thread, capture-filter changes to the end of the
    /// pass), the rest into the batch or the log.
    private func perform(_ actions: [EngineAction], into batch: inout Batch) {
        for action in actions {
            if case .packet(.sendFrame(let frame, let index)) = action { self.packets?.send(frame, interfaceIndex: index) }
        }
        for action in actions {
            switch action {
            case .journal(let entry):
                batch.entries.append(entry)
            case .transmit(let transmission):
                batch.transmissions.append(transmission)
            case .packet(let packet):
                switch packet {
                case .sendFrame, .event, .claimed, .ownerSeen:
                    break
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
                    let reason = WakeLog.entry(event, at: Date()).trigger.type
                    self.statusLock.withLock { self.status.wakesByReason[reason, default: 0] += 1 }
                }
                do {
                    try self.wakeLog.append(event, at: Date())
                } catch {
                    self.logger.warning("wake log: cannot write \(self.wakeLog.url.path): \(error)")
                }
            case .log(let level, let message):
                self.logger.log(level: level.loggerLevel, "\(message)")
            }
        }
    }

    private func applyPendingWatches() {
        guard !self.pendingWatches.isEmpty else { return }
        defer { self.pendingWatches.removeAll() }
        guard let takeover = self.engine.takeover else { return }
        for index in self.pendingWatches.sorted() {
            self.packets?.watch(takeover.watchedAddresses(interfaceIndex: index), interfaceIndex: index)
        }
    }

    /// Replaces the in-memory state with what the journal holds (after a failed append).
    private func reloadFromJournal(now: Timestamp) {
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
        self.mdns?.send(batch.transmissions)
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
        if self.engine.responder != nil { self.mdns?.serve(served) }
        var batch = Batch()
        self.perform(self.engine.setInterfaces(served, now: now), into: &batch)
        self.mdns?.send(batch.transmissions)
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
        let store = self.engine.registrar.store
        let statistics = self.engine.registrar.statistics
        let byState = self.engine.hostsByState
        self.statusLock.withLock {
            self.status.hostCount = store.hostCount
            self.status.recordCount = store.recordCount
            self.status.statistics = statistics
            self.status.hostsByState = byState
            self.status.batches += 1
            if let responder = self.engine.responder {
                self.status.responder = responder.statistics
                self.status.instanceLabel = responder.configuration.instanceLabel
            }
            if let takeover = self.engine.takeover { self.status.takeover = takeover.statistics }
        }
    }
}

extension EngineLogLevel {
    var loggerLevel: Logger.Level {
        switch self {
        case .debug: .debug
        case .info: .info
        case .notice: .notice
        case .warning: .warning
        case .error: .error
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
