import CSleepProxyLinux
import FoundationEssentials
import Logging
import NIOCore
import SleepProxyControl
import SleepProxyCore
import SleepProxyWire

/// What the engine thread is configured with, what it takes in, and what it reports.
extension EngineRunner {
    public struct Configuration: Sendable {
        public var registration: RegistrationConfiguration
        /// Interfaces to serve; empty means every up, multicast-capable, non-loopback interface.
        public var interfaces: [String]
        public var stateDirectory: URL
        /// Where what changes often and matters little after a power cut lives between settles (the history's
        /// recent lines, the wake log): memory under systemd (`/run/sleep-proxy`), sparing the SD card
        /// (docs/state.md, "SD-card wear"). Nil: the state directory.
        public var runtimeDirectory: URL?
        /// The proxy's own advertisement; nil runs without the mDNS side (registration only).
        public var responder: ResponderConfiguration?
        /// Address takeover and wake; nil runs without the packet side.
        public var takeover: TakeoverConfiguration?
        /// SSDP for sleeping UPnP/DLNA hosts (docs/ssdp.md); `--no-ssdp` turns it off.
        public var ssdp: Bool
        /// Hosts adopted in the configuration file (`adopt = MAC`, docs/adoption.md).
        public var adopted: Set<MACAddress> = []
        /// What hosts and the proxy draw (`host-power`, `host-power-default`, `proxy-power`; docs/savings.md).
        public var power = PowerFigures()

        public init(
            registration: RegistrationConfiguration = RegistrationConfiguration(), interfaces: [String] = [],
            stateDirectory: URL,
            responder: ResponderConfiguration? = nil, takeover: TakeoverConfiguration? = nil, ssdp: Bool = false,
            adopted: Set<MACAddress> = [], power: PowerFigures = PowerFigures(), runtimeDirectory: URL? = nil
        ) {
            self.adopted = adopted
            self.power = power
            self.runtimeDirectory = runtimeDirectory
            self.registration = registration
            self.interfaces = interfaces
            self.stateDirectory = stateDirectory
            self.responder = responder
            self.takeover = takeover
            self.ssdp = ssdp
        }
    }

    /// Events queued for the engine at most, per lane (`Event.lane`); beyond it they are dropped (and counted).
    static let mailboxCapacity = 4096
    /// How long a captured frame of a device's routine address resolution (`CaptureWatch.isRoutine`) waits for the
    /// engine at most before it wakes the engine itself (`Mailbox.post(_:prompt:)`; the capture reader looks every
    /// `PacketLinks.receiveTimeout` when the link is quiet). Ours: what such a frame teaches (a peer's address, a
    /// scanner's requests, in their order) is as true a quarter of a second later, and on a LAN of hundreds of
    /// devices these frames were a quarter of what woke the engine (docs/busy-lan.md).
    static let routineFrameDelay: Duration = .milliseconds(250)
    /// Registrations made durable (one fdatasync) and answered together at most.
    static let maximumBatch = 32
    /// Events of any kind processed between two chances to answer registrations. Captured frames and mDNS
    /// packets do not count toward `maximumBatch` (they need no fdatasync): counted, the replies the proxy itself
    /// sends to registering hosts — captured on their way out, since those addresses are watched — split every
    /// burst of registrations into more batches, and so into more syncs.
    static let maximumBatchEvents = 256
    /// How often the interface list is re-read even when nothing asks for it.
    static let inventoryRefreshInterval: Duration = .seconds(30)
    /// Ours: after this many events the first idle moment returns freed heap to the system (a storm of 10,000
    /// registrations left about 45 MB more resident than the same hosts restored; sleepproxy-bench scale).
    static let trimAfterEvents = 10_000
    /// Ours (docs/scale.md): a pass runs its timers in slices of this many hosts (takeover steps) and announcements,
    /// and answers the queries that arrived between two slices; at most `timerSlicesPerPass` slices, so a pass
    /// does no more than `TakeoverRules.maximumHostsPerTick` hosts as before. While thousands of hosts are taken
    /// over together a query then waits for one slice (a few tenths of a millisecond), not for a whole pass.
    static let timerSlice = 2
    static let timerSlicesPerPass = 4
    /// Ours (docs/scale.md): capture filters are rebuilt at most this often. While a registration storm crosses the
    /// filter's 250 addresses (`CaptureFilter.maximumAddresses`) every pass changed it, and each change is a
    /// kernel compile of up to 250 compares on the engine thread (0.2-1.4 ms, sleepproxy-bench scale). A host's
    /// address matters to the filter once the host is taken over, seconds after it registered, so 50 ms late is
    /// never too late.
    static let watchUpdateInterval: Duration = .milliseconds(50)
    /// A pass with at most this many events is a quiet moment (a few queries, a timer).
    static let quietBatch = 4
    /// Ours: how long after the engine thread starts the start-up's code is handed back
    /// (`MemoryTuning.releaseStartupCode`, docs/memory.md). By then the journal is restored, every socket bound
    /// and every service running; only what runs again faults back in.
    public static let startupCodeReleaseDelay: Duration = .seconds(5)
    /// …and every half second before that (ours, docs/memory.md).
    static let startupCodeReleaseInterval: Duration = .milliseconds(500)

    enum Event {
        case datagram(bytes: [UInt8], remote: SocketAddress, interfaceIndex: Int?, channel: Channel)
        /// A datagram of a multicast socket, with where it came from (scope dropped: `interfaceIndex` says it), the
        /// interface it came in on and where it was sent, from packet info.
        case mdns(bytes: [UInt8], source: IPAddress, port: UInt16, interfaceIndex: Int, destination: IPAddress?)
        case ssdp(bytes: [UInt8], source: IPAddress, port: UInt16, interfaceIndex: Int, destination: IPAddress?)
        case frame(bytes: [UInt8], interfaceIndex: Int, outgoing: Bool)
        /// Netlink saw a link or address change.
        case linksChanged
        /// An mDNS or SSDP socket closed under us (NIO closes a datagram channel on most write errors): open the
        /// served interfaces' sockets again.
        case multicastSocketClosed
        /// An admin request; `reply` is called on the engine thread once the change (if any) is durable.
        case control(ControlRequest, reply: @Sendable (ControlResponse) -> Void)
        /// `release-all --transfer`: the exchanges with the other proxies are over (`taken`: the hosts they took,
        /// with the taker's label); the rest are woken, then `reply` answers the admin request.
        case transfersDone(taken: [OwnerKey: String], reply: @Sendable (ControlResponse) -> Void)
        /// Settings a reload (SIGHUP) changes in place.
        case reconfigure(
            takeover: TakeoverConfiguration?, expiryAction: RegistrationConfiguration.ExpiryAction,
            refusalReply: RegistrationConfiguration.RefusalReply, power: PowerFigures)
        /// The configuration file's adopted hosts (at start and on SIGHUP).
        case adopt(Set<MACAddress>)

        /// Mailbox lanes: registrations and the admin side, mDNS, captured frames, SSDP. Each has its own bound, so
        /// a flood of one kind (an M-SEARCH storm) cannot keep the others out.
        static let lanes = 4
        static let framesLane = 2
        static let mdnsLane = 1
        static let ssdpLane = 3

        var lane: Int {
            switch self {
            case .frame: Self.framesLane
            case .mdns: Self.mdnsLane
            case .ssdp: Self.ssdpLane
            case .datagram, .linksChanged, .multicastSocketClosed, .control, .reconfigure, .transfersDone, .adopt:
                0
            }
        }
    }

    /// A copy of the interesting numbers, readable from any thread. Counts only: copying every host after each
    /// batch would cost more than the batch once thousands of hosts sleep.
    public struct Status: Sendable {
        /// The last SIGHUP's outcome (`noteReload`).
        public var lastReload: DaemonStatus.Reload?
        /// Problems found at start that an operator should fix (`KernelSettings.takeoverProblems`).
        public var warnings: [String] = []
        /// Why the last journal write failed, until one succeeds (a full disk): shown with the warnings.
        public var journalProblem: String?
        /// Failed journal writes since the last one that succeeded.
        public var journalFailuresInARow = 0
        public var hostCount = 0
        public var recordCount = 0
        public var statistics = RegistrationStatistics()
        public var droppedDatagrams = 0
        /// Multicast questions dropped as a storming device's repeats (`EngineCounts.repeatedQuestions`).
        public var repeatedQuestions = 0
        /// Captured frames dropped because the engine's frame queue was full (`PacketLinks.maximumQueuedBytes`).
        public var droppedFrames = 0
        /// Unicast answers (mDNS and SSDP) the engine thread left to the event loops (`MulticastSockets.send`).
        public var unicastSendsDeferred = 0
        /// Unicast datagrams the kernel refused (no route, a firewall, a broadcast address), dropped.
        public var unicastSendsFailed = 0
        /// mDNS and SSDP sockets that closed under us and were opened again.
        public var multicastSocketsReopened = 0
        public var persistenceFailures = 0
        /// Journal writes made durable with fdatasync (those no reply waited on are not: docs/state.md).
        public var journalSyncs = 0
        public var batches = 0
        public var responder = ResponderStatistics()
        public var instanceLabel: String?
        public var takeover = TakeoverStatistics()
        /// Hosts handed back, by what showed them awake.
        public var handBacks: [HandBackSignal: Int] = [:]
        /// What the wake gate decided, by rule (docs/waking.md).
        public var wakeDecisions = WakeGate.Statistics()
        /// Wakes started, by trigger type (`connection`, `address-conflict`, ...).
        public var wakesByReason: [WakeLogEntry.Trigger.Kind: Int] = [:]
        /// Held hosts by state (docs/coexistence.md).
        public var hostsByState: [HostState: Int] = [:]
        /// Nil with `--no-ssdp`.
        public var ssdp: SSDPStatistics?
        /// What was answered for sleeping Windows PCs (docs/windows.md).
        public var windows = WindowsStatistics()
        /// What the proxy saved since it started (`EngineRunner.creditSavings`).
        public var savings: SavingsCounters?
        /// SSDP entries learned for registered hosts, and heard from addresses not registered.
        public var ssdpEntries = 0
        public var ssdpUnclaimedEntries = 0
        /// The Home Assistant link, when there is one (`HomeAssistantLink`).
        public var mqtt: DaemonStatus.MQTTLinkStatus?
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
        /// Journal entries, encoded as they come (`JournalFile.append(encoded:entries:)`).
        var journal: [UInt8] = []
        var journalEntries = 0
        let timeBase = SystemClock.timeBase()
        var transmissions: [MDNSTransmission] = []
        var ssdp: [SSDPTransmission] = []
        var replies: [(Channel, SocketAddress, [UInt8])] = []
        var controlReplies: [(ControlResponse, @Sendable (ControlResponse) -> Void)] = []
    }
}
