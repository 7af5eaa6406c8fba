import SleepProxyWire

/// The numbers of adoption (docs/adoption.md), each with its reason.
public enum AdoptionRules {
    /// Hosts a person may adopt: a household has a few PCs, a NAS and a media server; each adopted MAC costs four
    /// instructions of the capture filter, whose jumps reach 255 instructions (docs/adoption.md §2).
    public static let maximumAdopted = 32
    /// Addresses kept per host, the newest first: its IPv4 address, its link-local IPv6 and a few global ones
    /// (privacy addresses rotate), as the neighbour book keeps them.
    public static let maximumAddresses = 8
    /// IPv4 addresses kept per host: the newest only. A home's hosts have one, and DHCP may hand the one before to
    /// another machine, which the proxy would then take for a thief of a sleeping host's address and wake it for.
    public static let maximumIPv4Addresses = 1
    /// Records kept per host: what a registration may hold (`RegistrationConfiguration`'s default), since an
    /// adopted host's records are handed to the engine as one.
    public static let maximumRecords = 400
    /// Bytes of records kept per host (uncompressed names and rdata): a NAS publishing a dozen services holds
    /// about 5 KB; 64 KiB bounds what a host flooding its own announcements can make us keep.
    public static let maximumRecordBytes = 64 * 1024
    /// Quiet this long after a word of its own that may have been its last (its sleep goodbyes, or any word when
    /// it was busy in the minute before), the host is asked for its name: 2 s + two questions a second apart keep
    /// the first answer within the 5 s users were promised (docs/adoption.md §3).
    public static let quietBeforeCheck: Duration = .seconds(2)
    /// How often an idle awake host is asked: one question and its one answer every 25 s are 4.8 packets a
    /// minute on the link (the goal is at most 6), and a host that falls asleep silently after being idle is held
    /// within 25 + 1 + 1 = 27 s (the goal is 30). Asking every 2 s, as 0.6.0 did, cost about 100 packets a minute
    /// (docs/adoption.md §3).
    public static let idleCheckInterval: Duration = .seconds(25)
    /// Words of its own within `busyWindow` that make a host busy: its next quiet spell may be sleep, so it is
    /// asked `quietBeforeCheck` after its last word. One lone word a minute (an answer to someone's browse) is an
    /// idle host's, and waits for the idle check.
    public static let busyWords = 2
    public static let busyWindow: Duration = .seconds(60)
    /// Goodbyes that come with other words of the host this long after them are a removal on an awake host; with
    /// only silence after them, a sleep (docs/adoption.md §3). macOS sends its sleep goodbyes once per address
    /// family, milliseconds apart, as its last packets; a removal while awake repeats its goodbye 2 s apart.
    public static let goodbyeBurst: Duration = .seconds(1)
    /// Questions for its name, a second apart (RFC 6762 §5.2: a querier waits at least a second before asking
    /// the same again); all unanswered a second after the last, it sleeps.
    public static let checkQuestions = 2
    public static let checkInterval: Duration = .seconds(1)
    /// RFC 6762 §10.2: a cache-flush record replaces the records of its name and type received more than a
    /// second before it (those within the second are parts of the same announcement).
    public static let cacheFlushGrace: Duration = .seconds(1)
    /// The lease an adopted host is held with while it sleeps: it never asked for one, and it is let go sooner
    /// when it shows itself or stays unreachable; after a month without a word it ends as any lease does.
    public static let heldLease: UInt32 = 30 * 86_400
    /// Wakes in a row that the host answered none of (no sign within the wake's 30 s each) before it is taken for
    /// off or away (a laptop that left the house, a PC switched off at the wall): one may be a Wi-Fi hiccup, two
    /// in a row are not (docs/adoption.md §5).
    public static let wakesBeforeAway = 2
    /// mDNS responses learned from one host a second at most; the rest still show it awake. RFC 6762 §6 lets a
    /// responder multicast a record once a second, so a real host needs a handful; a forged MAC flooding large
    /// announcements costs at most this many learning passes (`sleepproxy-bench adoption`).
    public static let maximumLearnedPerSecond = 10
    /// Service types asked for per host (each one question on the link): a NAS publishes a dozen; a forged MAC
    /// naming ever new types, and saying goodbye to them, makes the proxy ask no more than this many.
    public static let maximumTypesAsked = 64
    /// A quiet host the proxy could not hold (it holds as many hosts or records as `max-hosts` and `max-records`
    /// allow) is checked again after this long, not at every quiet spell: a full proxy stays full for a while.
    public static let refusedRetry: Duration = .seconds(60)
}

/// A record learned from an adopted host's own mDNS, as it sent it (name, class, cache-flush bit, TTL, rdata).
public struct LearnedRecord: Hashable, Sendable {
    public var record: DNSResourceRecord
    public var learnedAt: Timestamp
}

/// One host a person adopted by its MAC (docs/adoption.md): what its own frames showed of it.
public struct AdoptedHost: Hashable, Sendable {
    public enum Phase: String, Hashable, Sendable {
        /// Not heard yet since it was adopted (or since the proxy started).
        case unheard
        /// Heard lately; quiet checks run when it falls silent.
        case watching
        /// It fell silent: questions for its name are out (`asked` so far).
        case checking
        /// It answered none: the engine holds it as a sleeping host.
        case held
        /// It answered none of `AdoptionRules.wakesBeforeAway` wakes in a row: off or away, not answered for until
        /// it is seen again.
        case away
    }

    public var mac: MACAddress
    /// The interface its frames came in on; nil until heard.
    public var interface: String?
    /// Its own addresses (IPv4 sources, ARP senders, IPv6 sources), the newest first.
    public var addresses: [IPAddress] = []
    /// What its responder published, in the order first learned (the order it answers in).
    public var records: [LearnedRecord] = []
    /// The last frame that only a running host sends (not ARP, neighbour discovery, MLD or IGMP, which a sleeping
    /// NIC answers itself: docs/adoption.md §4).
    public var lastSignOfLife: Timestamp?
    /// The last frame of any kind from it.
    public var lastHeard: Timestamp?
    public var phase: Phase = .unheard
    /// Questions for its name sent in the current check.
    public var asked = 0
    /// When the next check step is due; nil when none is.
    public var due: Timestamp?
    /// Bytes its records take (`AdoptionRules.maximumRecordBytes`).
    public var recordBytes = 0
    /// Its Windows names (docs/windows.md): learned from its name-service frames, answered for while it sleeps.
    public var windows = WindowsIdentity()
    /// The proxy's node-status and LLMNR questions since it was last held, and when the last went out
    /// (`WindowsRules.questionsPerSpell`, `questionInterval`).
    var nodeStatusAsks = 0
    var llmnrAsks = 0
    var windowsAskedAt: Timestamp?
    /// A node-status answer of its own was seen since it was last held: then its LLMNR name is asked.
    var nodeStatusSeen = false
    /// The proxy multicast a Probe (and, for an endpoint without XAddrs, a Resolve) for it this awake spell.
    var wsdProbed = false
    var wsdResolved = false
    /// Records refused by a bound, for the status and the log.
    public var refused = 0
    /// Wakes in a row it answered none of.
    public var failedWakes = 0
    /// It published mDNS records at some time: one that said goodbye to its name since (a clean shutdown) is not
    /// checked by address as a host that never published any is.
    public var hasPublished = false
    /// Goodbyes (TTL 0) for records it still published a moment before, not yet applied: a sleep's goodbyes are
    /// not removals (macOS 15 says goodbye to its service PTRs as it falls asleep), so they are applied only when
    /// the host goes on talking after them, and forgotten when it is held (docs/adoption.md §3).
    var pendingGoodbyes: Set<RecordIdentity> = []
    /// When the first of `pendingGoodbyes` came.
    var goodbyesAt: Timestamp?
    /// Its latest words of its own (not answers to the proxy's questions), the oldest first, at most
    /// `AdoptionRules.busyWords`: whether it was busy in the minute before.
    var recentWords: [Timestamp] = []
    /// The service types already asked for in this run (`_http._tcp.local.` ...).
    var typesAsked: Set<DNSName> = []
    /// The last response learned, as a hash of its bytes: a response repeated word for word (an answer to the
    /// same question from another querier) teaches nothing new.
    var lastResponse: Int?
    /// Responses learned in the current second, and when that second began (`maximumLearnedPerSecond`).
    var learnedThisSecond = 0
    var secondStarted: Timestamp?

    public init(mac: MACAddress) { self.mac = mac }

    /// The name its address records give (the name most of them carry).
    public var hostName: DNSName? { OwnerSummary.claims(of: self.records.map(\.record)).hostName }
}

/// What a frame from an adopted host showed.
public struct AdoptionHeard: Hashable, Sendable {
    public var mac: MACAddress
    public var interface: String
    /// A frame only a running host sends.
    public var signOfLife: Bool
    /// It carried goodbyes (TTL 0) for records the host published.
    public var saidGoodbye = false
    /// Its records changed (learned, replaced or said goodbye to).
    public var recordsChanged: Bool
    /// Service types it publishes that have not been asked for yet.
    public var newTypes: [DNSName]
    /// Ask its node status at this IPv4 address (docs/windows.md §2): once an awake spell.
    public var askNodeStatus: IPv4Address? = nil
    /// Ask it this name over LLMNR at this IPv4 address: once its node status named it.
    public var askLLMNR: (name: String, address: IPv4Address)? = nil
    /// Multicast a WS-Discovery Probe for devices (nil endpoint) or a Resolve of its endpoint: once its node status
    /// showed a PC, and its endpoint is not known whole.
    public var askWSD: WSDQuestion? = nil

    public static func == (lhs: AdoptionHeard, rhs: AdoptionHeard) -> Bool {
        lhs.mac == rhs.mac && lhs.interface == rhs.interface && lhs.signOfLife == rhs.signOfLife
            && lhs.saidGoodbye == rhs.saidGoodbye && lhs.recordsChanged == rhs.recordsChanged
            && lhs.newTypes == rhs.newTypes && lhs.askNodeStatus == rhs.askNodeStatus
            && lhs.askLLMNR?.name == rhs.askLLMNR?.name && lhs.askLLMNR?.address == rhs.askLLMNR?.address
            && lhs.askWSD == rhs.askWSD
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(self.mac)
        hasher.combine(self.signOfLife)
    }
}

/// The proxy's WS-Discovery question about an awake PC (docs/windows.md §5).
public enum WSDQuestion: Hashable, Sendable {
    /// A Probe for devices: every device answers, the PC among them.
    case probe
    /// A Resolve of its endpoint, whose match carries its XAddrs.
    case resolve(endpoint: String)
}

/// What comes due for the adopted hosts at a time.
public enum AdoptionStep: Hashable, Sendable {
    /// Ask the host's name (a check), on its interface. `everyFamily`: on IPv4 and IPv6 both; otherwise on one
    /// family only (IPv4 where the host has an IPv4 address), since one question and one answer are all a check
    /// needs, and only a check left unanswered is asked again on both, for a host whose responder speaks one.
    case askName(MACAddress, DNSName, interface: String, everyFamily: Bool)
    /// A host that never said its name (a Windows PC that publishes nothing): ask for its IPv4 address by ARP,
    /// unicast to its MAC, as the takeover's probes do. Its NIC may answer that in sleep, so such a host is held
    /// only when nothing does (docs/adoption.md §4).
    case probeAddress(MACAddress, IPv4Address, interface: String)
    /// A PC that publishes nothing over mDNS but has NetBIOS names: its node status asked at its IPv4 address,
    /// which only its running host answers (docs/windows.md §4).
    case askNetBIOS(MACAddress, IPv4Address, interface: String)
    /// It answered none of the questions: it sleeps.
    case fellQuiet(MACAddress)
}
