import SleepProxyWire

/// What the composed engine asks the I/O layer to do. The I/O layer carries these out in order, frames first
/// within one call (a magic packet or an ARP reply must not wait behind a log line or a netlink request).
///
/// The two large payloads (a journal entry holds a whole registration, a wake event its trigger) are boxed: the
/// enum is as large as its largest case, and a restart's burst of 30,000 actions at 184 bytes each held 9 MB at
/// once (docs/memory.md); each of those two is one a registration or a wake, where a box costs nothing worth counting.
public enum EngineAction: Sendable {
    /// A change to make durable before any registration reply of the same batch goes out.
    indirect case journal(RegistrationJournal.Entry)
    /// An mDNS packet.
    case transmit(MDNSTransmission)
    /// An SSDP datagram (docs/ssdp.md).
    case ssdp(SSDPTransmission)
    /// A frame, a wake datagram, a neighbour-table change or a capture-filter change (never a decision: those
    /// are taken inside the engine).
    case packet(PacketAction)
    /// A wake started, succeeded, failed or was ignored: for the wake log, metrics and the admin side.
    indirect case wakeEvent(WakeEvent)
    /// A line for a person reading the log.
    case log(EngineLogLevel, String)
    /// A host entered another state: for its history (the status page's timeline, docs/status-page.md).
    case presence(PresenceChange)
    /// The reply to a registration, to send once the batch's journal entries are durable.
    case reply(RegistrationReply)
    /// The interfaces to serve changed: open sockets, captures and group memberships on these, close the others.
    case serve([InterfaceContext])
}

/// What the packet side asks of the I/O layer, once the engine has taken every decision the takeover reported:
/// only these reach it.
public enum PacketAction: Hashable, Sendable {
    /// A whole Ethernet frame, source MAC already the interface's own.
    case sendFrame([UInt8], interfaceIndex: Int)
    /// A magic packet as a UDP datagram to 255.255.255.255 port 9 on the interface.
    case sendWakeDatagram([UInt8], interfaceIndex: Int)
    /// A neighbour entry on the proxy machine for a proxied address (`TakeoverAction.setNeighbour`).
    case setNeighbour(interfaceIndex: Int, address: IPAddress, mac: MACAddress)
    case removeNeighbour(interfaceIndex: Int, address: IPAddress)
    /// The addresses watched on the interface changed: rebuild the capture filter and multicast memberships.
    case watchChanged(interfaceIndex: Int)
}

/// The engine's counts at one moment (`ProxyEngine.counts`); nil for a machine the daemon runs without.
public struct EngineCounts: Sendable {
    public var hosts: Int
    public var records: Int
    public var registrations: RegistrationStatistics
    public var responder: ResponderStatistics?
    public var instanceLabel: String?
    public var takeover: TakeoverStatistics?
    public var wakeDecisions: WakeGate.Statistics?
    public var ssdp: SSDPStatistics?
    /// Hosts handed back, by what showed them awake.
    public var handBacks: [HandBackSignal: Int]
    /// Multicast questions dropped as a storming device's repeats (`RepeatedQuestions`).
    public var repeatedQuestions = 0
    /// What was answered for sleeping Windows PCs (docs/windows.md).
    public var windows = WindowsStatistics()
}

/// A registration's reply and where it goes (the datagram's source; only an address a reply can go to,
/// `InterfaceContext.acceptsReply`).
public struct RegistrationReply: Hashable, Sendable {
    public var bytes: [UInt8]
    public var destination: IPAddress
    public var port: UInt16

    public init(bytes: [UInt8], destination: IPAddress, port: UInt16) {
        self.bytes = bytes
        self.destination = destination
        self.port = port
    }
}

/// A held host's move to another state, or the end of its registration: for its history.
public struct PresenceChange: Hashable, Sendable {
    public var host: OwnerKey
    public var hostName: String?
    public var state: HostState
    public var reason: HostStateReason

    public init(host: OwnerKey, hostName: String?, state: HostState, reason: HostStateReason) {
        self.host = host
        self.hostName = hostName
        self.state = state
        self.reason = reason
    }
}

public enum EngineLogLevel: Int, Comparable, Sendable {
    case debug, info, notice, warning, error

    public static func < (lhs: Self, rhs: Self) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// A sign that a host is up, with where it came from: kept for the admin side and the log.
public struct AwakeSignal: Hashable, Sendable, CustomStringConvertible {
    public var what: String
    public var at: Timestamp

    public var description: String { self.what }
}

/// What showed a host the proxy spoke for to be awake, so that it got everything back (the metrics' `signal`).
public enum HandBackSignal: String, CaseIterable, Hashable, Sendable {
    /// Its mDNS carried an Owner option with a new sequence (docs/protocol.md §5.1).
    case ownerOption = "owner-option"
    /// Its own mDNS responder spoke, without an Owner option (docs/coexistence.md).
    case mdns
    /// It probed its own names over mDNS.
    case ownNameProbe = "own-name-probe"
    /// Its SSDP (docs/ssdp.md).
    case ssdp
    /// An adopted host's own traffic other than ARP and neighbour discovery, seen by its MAC (docs/adoption.md §3).
    case ownTraffic = "own-traffic"
}

/// Why a host's registration ends. The one place that ends it is `ProxyEngine.removeHost`.
public enum HostRemoval: Hashable, Sendable {
    /// The host is awake and said so (an Owner option with a new sequence, or its own mDNS after the takeover).
    case handBack(why: String, signal: HandBackSignal)
    /// The lease ran out.
    case expired(RegistrationConfiguration.ExpiryAction)
    /// `sleepproxyctl forget`.
    case forgotten(goodbyes: Bool)
    /// `sleepproxyctl release-all`: woken first, then dropped silently.
    case released
    /// `sleepproxyctl release-all --transfer`: another proxy took it (its label); dropped silently, no wake.
    case transferred(to: String)
    /// The journal does not hold it (a failed append was undone, `ProxyEngine.reload`): dropped silently, and
    /// nothing written (the journal already says so).
    case reloaded
    /// An adopted host answered none of its last wakes (`AdoptionRules.wakesBeforeAway`): off or away, withdrawn
    /// with goodbyes so that browsers stop listing it (docs/adoption.md §5).
    case unreachable
}

/// Rules of the composed engine that are ours, beyond Apple's, each with its reason.
public enum EngineRules {
    /// A host with no address to probe (or a proxy running with `--no-takeover`) is asked for its host name over
    /// mDNS instead: three queries a second apart starting a second after it registered, as the address probes
    /// are timed (docs/protocol.md §4.3), and it is taken to be asleep when none of them drew a word from it.
    public static let quietProbeCount = 3
    public static let quietProbeInterval: Duration = .seconds(1)
    public static let quietStartDelay: Duration = .seconds(1)
    /// Ours (docs/scale.md): the host-sized tables (store, name and address indexes, takeover, presence, SSDP) are
    /// sized at start for `--max-hosts`, up to this many hosts; past it they grow as they fill. 10,000 is the
    /// scale the proxy is measured at (sleepproxy-bench scale); beyond it the bookkeeping written at start would
    /// cost more than the stalls it saves.
    public static let reservedHostsLimit = 10_000
    /// Names a typical Mac registers: its host name, five service instances, and the reverse-mapping names of its
    /// IPv4 and IPv6 address (the service types are shared by every host and add a handful in all).
    public static let reservedNamesPerHost = 8
    /// A clean stop shorter than this (an upgrade, a restart) lets the proxy speak again at once for the hosts
    /// it spoke for (`ProxyEngine.resumeSpeaking`). Longer, and nobody knows what the hosts did meanwhile: they
    /// are probed first. A minute covers a restart and a package upgrade, not an outage.
    public static let resumeWindow: Duration = .seconds(60)
    /// Up to this many hosts spoken for again after a restart get a log line each; more, and one line counts
    /// them: a campus proxy restarting with 10,000 hosts asleep wrote 10,000 lines, and built them before it
    /// answered anyone (docs/scale.md).
    public static let resumeLinesLimit = 20
    /// Hosts spoken for again after a restart in one call, the rest a slice a tick: ours (docs/memory.md), sized
    /// so that a slice's actions stay far below the allocator's threshold for a mapping of their own (128 KiB at
    /// 80 bytes an action, three actions a host); with `resumeSliceInterval`, 10,000 hosts take 80 ms.
    public static let resumeSlice = 256
    /// …one slice every 2 ms: 10,000 hosts (40 slices) are spoken for again within 80 ms of the start, and what
    /// each slice hands the I/O layer (netlink changes, history lines, announcements) is gone before the next comes.
    public static let resumeSliceInterval: Duration = .milliseconds(2)
}
