import CSleepProxyLinux
import Dispatch
import FoundationEssentials
import Logging
import NIOConcurrencyHelpers
import NIOCore
import SleepProxyControl
import SleepProxyCore
import SleepProxySystem
import SleepProxyWire

#if canImport(Glibc)
    import Glibc
#endif

/// Runs the pure `ProxyEngine` on a dedicated thread: takes events in batches, hands them to the engine, and
/// carries out what it decides: frames at once, mDNS at the end of the batch, journal entries with one append,
/// and registration replies only once that append is durable (an acknowledged registration survives a crash).
/// No rule lives here; the rules are the engine's (docs/coexistence.md).
///
/// A thread rather than a task because persisting means a blocking fdatasync, which must not stall the
/// two-thread cooperative pool (docs/linux.md §7), and because a batch per wake-up is exactly group commit.
public final class EngineRunner: @unchecked Sendable {
    // @unchecked: `engine`, `inventory` and `journal` are touched only on the engine thread; `status` is
    // guarded by `statusLock`; `mailbox` is itself thread-safe; `mdns`, `ssdpSockets` and `packets` are set in
    // init and never replaced, and keep their counts under locks or atomics of their own.

    let configuration: Configuration
    let logger: Logger
    /// On the boot clock: the uptime shown never goes backwards or jumps when the wall clock is set (docs/time.md).
    let startedAtBoot = SystemClock.now()
    /// Watched from the engine thread, so that a step of the wall clock is told once (docs/time.md).
    var wallClock = WallClockWatch(now: SystemClock.now(), wallNanoseconds: SystemClock.wallNanoseconds())
    let mailbox: Mailbox<Event>
    /// Every rule and all host state (registrar, responder, takeover), pure; touched only on the engine thread.
    var engine: ProxyEngine
    var mdns: MulticastSockets?
    var ssdpSockets: MulticastSockets?
    /// The multicast sockets' descriptors the engine polls (`notePolledSockets`), and the buffer it reads
    /// datagrams into; both the engine thread's alone.
    var polledSockets: (mdns: [CInt], ssdp: [CInt], all: [CInt]) = ([], [], [])
    var datagramBuffer: [UInt8] = []
    var packets: PacketLinks?
    var neighbours: NeighbourTable?
    /// Interfaces whose capture filter must follow the takeover's addresses; rebuilt once per pass of the engine
    /// loop, not once per registration (a burst of 100 new hosts rebuilt and re-attached the filter 100 times).
    var pendingWatches: Set<Int> = []
    /// The journal's sync thread, from the engine thread's start (`JournalSync`).
    var journalSync: JournalSync?
    /// When the capture filters were last rebuilt (`watchUpdateInterval`).
    var watchesAppliedAt: Timestamp?
    var monitor: LinkMonitor?
    public let wakeLog: WakeLog
    /// Every host's recent presence changes and wake decisions, for the status page (engine thread only), and the
    /// file that keeps them across restarts.
    var history = HistoryBook()
    let historyFile: HistoryFile
    /// History records of the batch under way, handed to the file once a batch (`flushHistory`).
    var historyRecords: [HistoryRecord] = []
    /// Each host's time asleep and awake by day (docs/savings.md), engine thread only; the power figures it is
    /// priced with (changed by a reload).
    var savings: SavingsLedger
    var power: PowerFigures
    var savingsAdvancedAt: Timestamp?
    var savingsWrittenAt: Timestamp?
    /// The running totals behind the counters (`creditSavings`): per host the time asleep already priced, and what
    /// it saved; every host together; the proxy's own use, and up to when it was counted.
    var savingsCredited: [String: Int64] = [:]
    var savedWattHoursSinceStart: [String: Double] = [:]
    var savedWattHoursInAll = 0.0
    var proxyUsedWattHours = 0.0
    var proxyCreditedAt: Timestamp?
    /// Each host's name (for the listing's order) and its name, MAC and addresses as one lower-case text (for
    /// `hosts --search`), kept while its registration is unchanged: formatting 20,000 addresses for every search
    /// took 60 ms at 10,000 hosts (sleepproxy-bench status). Engine thread only.
    var listingTexts: [OwnerKey: ListingText] = [:]

    struct ListingText {
        var updatedAt: Timestamp
        var name: String
        var text: [UInt8]
    }
    var inventory: InterfaceInventory
    var inventoryReadAt: Timestamp
    /// Hosts to speak for again at once, after a clean stop a moment ago (`ProxyEngine.resumeSpeaking`).
    var resumable: (keys: [OwnerKey], stoppedFor: Duration)?
    /// Events handled since the allocator last gave free memory back (`MemoryTuning.trim`).
    var eventsSinceTrim = 0
    /// The SSDP revision last saved, and when (`SSDPStateFile`).
    var ssdpSavedRevision = 0
    /// Hosts adopted in the configuration file, and with `sleepproxyctl adopt` (`AdoptionFile`).
    var adoptedInConfiguration: Set<MACAddress> = []
    var adoptedAtRunTime: Set<MACAddress> = []
    var ssdpSavedAt: Timestamp?
    /// What adopted hosts taught before the stop until the engine has it; the revision last saved, and when.
    var learnedAtStart: [OwnerRegistration]?
    var learnedSavedRevision: UInt64 = 0
    var learnedSavedAt: Timestamp?
    let journal: JournalFile
    /// Journal entries no reply waits on (hand-backs, expiries, adopted hosts held), kept for the next synced
    /// append, a settle or the stop (`holdJournal`, docs/state.md "SD-card wear").
    var heldJournal: [UInt8] = []
    var heldJournalEntries = 0
    var heldJournalSince: Timestamp?
    /// The runtime directory when it is not the state directory: where the live spoken-for record is kept
    /// (`SpokenForRecord`, memory; never on the state directory's card).
    var liveRecordDirectory: URL?
    /// The live record's path, made once: building a file URL looks at the disk (a stat to learn whether it is a
    /// directory), and done after every batch it was a sixth of the daemon's time on a busy LAN (docs/busy-lan.md).
    var liveRecordPath: String?
    /// A host joined the set spoken for since the live record was written, or left it (then it is written at once).
    var spokenForJoined = false
    var spokenForLeft = false
    /// The hosts the live record names (emptied when it is removed).
    var liveRecordKeys: Set<OwnerKey> = []
    var liveRecordAt: Timestamp?
    /// The live record is gone since a host left the set, until it is written again; nil `liveRecordAt` means
    /// never written, so the first pass writes it.
    var liveRecordRemoved = true
    let statusLock = NIOLock()
    var status = Status()
    /// When the counts by state were last taken: they cost a look at every host, so at most once a second.
    var hostsByStateAt: Timestamp?
    /// A batch ran since the counts by state were taken: they may be behind, and are taken again once
    /// `hostsByStateInterval` has passed even if nothing else happens (the loop wakes for it), so that a scrape or
    /// the Home Assistant link never shows a count more than a second old.
    var hostsByStateBehind = false
    /// `observeChanges`; guarded by `statusLock`.
    var changeObserver: (@Sendable () -> Void)?
    /// The engine thread is running (its `finished` will be signalled).
    let started = NIOLockedFlag()
    let finished = DispatchSemaphore(value: 0)

    /// Opens the state directory and restores every unexpired registration, so they are served from the start.
    public init(configuration: Configuration, logger: Logger) throws {
        let mailbox = try Mailbox<Event>(
            capacity: EngineRunner.mailboxCapacity, lanes: Event.lanes, routineDelay: EngineRunner.routineFrameDelay,
            lane: { $0.lane })
        self.mailbox = mailbox
        self.configuration = configuration
        self.logger = logger
        self.inventory = try InterfaceInventory.read()
        self.inventoryReadAt = SystemClock.now()
        for name in configuration.interfaces where self.inventory.interface(named: name) == nil {
            throw EngineRunnerError(
                description:
                    "unknown interface \(name): check `ip link` for its name, or leave --interface out to serve every interface"
            )
        }
        // What starting touched so far (arguments, configuration, the bootstraps) goes back before the hosts are
        // restored, so that it is never resident beside them (docs/memory.md).
        MemoryTuning.trim()
        MemoryTuning.releaseStartupCode()
        // The history is read on a thread of its own while the journal is decoded on another and this one restores
        // its hosts: they share nothing, and the restart's first answer waits for all three (docs/memory.md,
        // "Restoring").
        let runtimeDirectory = Self.runtimeDirectory(configuration, logger: logger)
        let historyFile = HistoryFile(
            directory: configuration.stateDirectory, runtimeDirectory: runtimeDirectory, logger: logger)
        let historyRead = HistoryRead(
            historyFile, stateDirectory: configuration.stateDirectory, runtimeDirectory: runtimeDirectory)
        var takeover: Takeover? = nil
        var warnings: [String] = []
        if let takeoverConfiguration = configuration.takeover {
            // Without CAP_NET_RAW the packet side cannot work at all: say so at start rather than run half a proxy.
            let probe = socket(AF_PACKET, PosixSocket.raw | PosixSocket.closeOnExec, 0)
            if probe < 0 {
                let code = errno
                if code == EPERM || code == EACCES {
                    throw EngineRunnerError(
                        description:
                            "no permission to open raw packet sockets (CAP_NET_RAW) for address takeover and wake: run as root, grant CAP_NET_RAW and CAP_NET_ADMIN (the systemd unit in deploy/ does), or pass --no-takeover to answer mDNS only"
                    )
                }
            } else {
                close(probe)
            }
            let served =
                configuration.interfaces.isEmpty
                ? self.inventory.defaultServed.map(\.name) : configuration.interfaces
            for name in served {
                for problem in KernelSettings.takeoverProblems(interface: name) {
                    logger.warning("kernel: \(problem)")
                    warnings.append(problem)
                }
            }
            takeover = Takeover(configuration: takeoverConfiguration)
            self.packets = PacketLinks(
                logger: logger,
                sink: { [mailbox] bytes, index, outgoing, routine in
                    mailbox.post(.frame(bytes: bytes, interfaceIndex: index, outgoing: outgoing), prompt: !routine)
                }, idle: { [mailbox] in mailbox.wakeIfRoutineOverdue() })
            do {
                self.neighbours = try NeighbourTable(logger: logger)
            } catch {
                logger.warning("\(error); the proxy machine's own connections to sleeping hosts will not wake them")
            }
            do {
                let monitor = try LinkMonitor(logger: logger, changed: { [mailbox] in mailbox.post(.linksChanged) })
                self.monitor = monitor
            } catch {
                logger.warning(
                    "\(error); interfaces are re-read every \(EngineRunner.inventoryRefreshInterval) instead")
            }
        }
        var responder: Responder? = nil
        if let responderConfiguration = configuration.responder {
            responder = Responder(configuration: responderConfiguration)
            self.mdns = MulticastSockets(.mdns, logger: logger, sink: { [mailbox] event in mailbox.post(event) })
        }
        var ssdp: SSDPProxy? = nil
        if configuration.ssdp {
            ssdp = SSDPProxy(seed: UInt64.random(in: .min ... .max))
            self.ssdpSockets = MulticastSockets(.ssdp, logger: logger, sink: { [mailbox] event in mailbox.post(event) })
        }
        var engine = ProxyEngine(
            registrar: Registrar(configuration: configuration.registration), responder: responder, takeover: takeover,
            ssdp: ssdp)
        self.status.warnings = warnings
        // Each host restored as soon as the journal's last word on it is read, while the rest is decoded. Nothing
        // to carry out yet: interfaces are set when the thread starts, and restored hosts start silent.
        let opened = Result {
            try JournalFile.open(directory: configuration.stateDirectory, timeBase: SystemClock.timeBase()) {
                _ = engine.restore($0, now: SystemClock.now())
            }
        }
        self.engine = engine
        let (history, savings, spokenForAhead) = historyRead.wait()
        let (journal, replay) = try opened.get()
        if history.count > 0 { logger.info("state: restored the history of \(history.hostCount) hosts") }
        self.journal = journal
        for problem in replay.problems {
            logger.warning("state: \(problem) (\(journal.directory.path)/registrations.journal)")
        }
        let now = SystemClock.now()
        for registration in replay.registrations {
            logger.info(
                "state: restored \(registration.hostName?.description ?? "?") (\(registration.key)), lease ends in \((registration.leaseExpiry - now).wholeSeconds) s"
            )
        }
        for registration in replay.expired {
            logger.info(
                "state: not restoring \(registration.hostName?.description ?? registration.key.description): its lease ended while the proxy was stopped"
            )
        }
        let recordCount = replay.registrations.reduce(0) { $0 + $1.records.count }
        logger.info(
            "state: restored \(replay.registrations.count) sleeping hosts with \(recordCount) records from \(journal.directory.path)"
        )
        self.wakeLog = WakeLog(
            directory: runtimeDirectory ?? configuration.stateDirectory, stateDirectory: configuration.stateDirectory,
            history: history)
        self.historyFile = historyFile
        self.liveRecordDirectory = runtimeDirectory.flatMap {
            $0.standardizedFileURL == configuration.stateDirectory.standardizedFileURL ? nil : $0
        }
        self.liveRecordPath = self.liveRecordDirectory?.appendingPathComponent(SpokenForRecord.fileName).path
        self.history = history
        self.savings = savings
        self.power = configuration.power
        if configuration.ssdp {
            do {
                if let saved = try SSDPStateFile.read(directory: configuration.stateDirectory) {
                    let learned = saved.learned(now: now, at: Date())
                    Self.logLines(
                        of: self.engine.restoreSSDP(learned, from: SSDPStateFile.fileName), to: logger)
                }
            } catch {
                logger.warning(
                    "state: ignoring \(SSDPStateFile.fileName) (\(error)); UPnP servers are learned again when they next speak"
                )
            }
            self.ssdpSavedRevision = self.engine.upnpRevision ?? 0
        }
        do {
            self.adoptedAtRunTime = try AdoptionFile.read(directory: configuration.stateDirectory)?.macs() ?? []
        } catch {
            logger.error(
                "state: ignoring \(AdoptionFile.fileName) (\(error)); hosts adopted with sleepproxyctl adopt are not adopted until adopted again"
            )
        }
        self.learnedAtStart = LearnedHostsFile.readAtStart(directory: configuration.stateDirectory, logger: logger)
        // The first thing the engine thread does: adopted hosts held when the proxy stopped are held again.
        self.mailbox.post(.adopt(configuration.adopted))
        // Taken only once the journal's lock is ours: a start refused because another daemon holds the directory
        // must change nothing in it. Read ahead before the lock, it is used only if the file is still the one read
        // (a daemon that was stopping then may have written a new one since).
        if let taken = SpokenForRecord.take(
            stateDirectory: configuration.stateDirectory, runtimeDirectory: runtimeDirectory, ahead: spokenForAhead)
        {
            let stoppedFor = Date().timeIntervalSince1970 - taken.record.stoppedAt
            if stoppedFor >= 0, stoppedFor <= Double(EngineRules.resumeWindow.components.seconds) {
                self.resumable = (taken.keys, .milliseconds(Int64(stoppedFor * 1000)))
                self.engine.restorePeers(taken.record.proxyPeers(now: now), now: now)
            } else {
                logger.info(
                    "state: stopped \(Int(stoppedFor)) s ago, longer than \(EngineRules.resumeWindow.components.seconds) s: every restored host is probed before the proxy speaks for it"
                )
            }
        }
        self.publishStatus()
    }

    /// The runtime directory, made if need be (owner and group only: the history names hosts); nil, with a
    /// warning, when it cannot be, so that the state directory takes its files.
    static func runtimeDirectory(_ configuration: Configuration, logger: Logger) -> URL? {
        guard let directory = configuration.runtimeDirectory else { return nil }
        do {
            try FileManager.default.createDirectory(
                at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o750])
            return directory
        } catch {
            logger.warning(
                "state: cannot use the runtime directory \(directory.path) (\(error)); the history and the wake log are written to the state directory as they come"
            )
            return nil
        }
    }

    public func start() throws(SystemCallError) {
        try self.monitor?.start()
        try self.historyFile.start()
        try startThread(name: "engine") { [self] in
            self.run()
            self.finished.signal()
        }
        self.started.value = true
    }

    /// Stops after the batch in progress; registrations stay in the journal for the next start. Safe to call
    /// more than once.
    public func stop() {
        self.mailbox.stop()
        if self.started.value {
            self.finished.wait()
            // Leave the semaphore signalled, so a second stop() returns at once instead of waiting forever.
            self.finished.signal()
            self.historyFile.stop()
        }
    }

    func post(_ event: Event) { self.mailbox.post(event) }

    /// Applies reloaded settings on the engine thread.
    public func reconfigure(
        takeover: TakeoverConfiguration?, expiryAction: RegistrationConfiguration.ExpiryAction,
        refusalReply: RegistrationConfiguration.RefusalReply, power: PowerFigures? = nil
    ) {
        self.mailbox.post(
            .reconfigure(
                takeover: takeover, expiryAction: expiryAction, refusalReply: refusalReply,
                power: power ?? self.configuration.power))
    }

    /// The configuration file's adopted hosts after a reload.
    public func adopt(_ macs: Set<MACAddress>) {
        self.mailbox.post(.adopt(macs))
    }

    /// Runs an admin request on the engine thread; `reply` gets the answer (or a failure when the engine is full
    /// or stopping).
    public func control(_ request: ControlRequest, reply: @escaping @Sendable (ControlResponse) -> Void) {
        if !self.mailbox.post(.control(request, reply: reply)) {
            reply(.failure("the daemon is busy or stopping; try again", .unavailable))
        }
    }

    /// Called on the engine thread after a batch that changed a host's presence or made a wake decision (what
    /// the history records), so that the Home Assistant link reads the news within a second. Must return at once.
    public func observeChanges(_ observer: @escaping @Sendable () -> Void) {
        self.statusLock.withLock { self.changeObserver = observer }
    }

    /// The Home Assistant link's own counts and connection state, for `status`, the metrics and the warnings.
}
