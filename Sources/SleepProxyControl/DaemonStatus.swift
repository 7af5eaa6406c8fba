import FoundationEssentials

/// What `sleepproxyctl status` and `/api/v1/status` show of the daemon as a whole.
public struct DaemonStatus: Codable, Hashable, Sendable {
    public var version: String
    public var startedAt: Date
    public var uptimeSeconds: Double
    public var interfaces: [String]
    public var advertisedName: String?
    public var hosts: Int
    public var records: Int
    public var registrationsAccepted: Int
    /// Refusals and malformed registrations by reason.
    public var refusals: [String: Int]
    public var queriesAnswered: Int
    public var wakes: Int
    public var magicPackets: Int
    /// Held hosts by state (`asleep`, `awake`, `waking`, `starting`); absent from daemons before 0.4.
    public var hostsByState: [PresenceState: Int]?
    /// SSDP (docs/ssdp.md); absent with `--no-ssdp` and from daemons before 0.5.
    public var upnp: UPnPStatus?
    /// Other sleep proxies heard on the served links (docs/several-proxies.md); absent from
    /// daemons before 0.6 and with `--no-takeover`.
    public var otherProxies: [OtherProxy]?
    /// Wakes and declined wakes over the last 24 hours, from the history (docs/status-page.md); absent from
    /// older daemons.
    public var lastDay: Activity?

    /// Hosts seen in the last 24 hours that the proxy does not hold now (woken and handed back, expired,
    /// forgotten), newest first, at most `DaemonStatus.recentHostsLimit`; absent from older daemons.
    public var recentHosts: [RecentHost]?
    /// The last SIGHUP: when, whether the file was taken, and what was wrong with it if not; absent before the
    /// first reload and from older daemons.
    public var lastReload: Reload?
    /// What an operator should fix, one sentence each: what the daemon found at start (a proxy machine that
    /// forwards sends ICMP redirects to the clients of sleeping hosts, with the remedy), and a state directory it
    /// cannot write now (until a write succeeds); empty when there is nothing, absent from older daemons.
    public var warnings: [String]?
    /// The Home Assistant link (docs/home-assistant.md); absent when `mqtt` is not set and from older daemons.
    public var mqtt: MQTTLinkStatus?
    /// What the proxy saved since it started (docs/savings.md); absent from older daemons.
    public var savings: SavingsCounters?

    /// Where the MQTT link stands, and what it carried.
    public struct MQTTLinkStatus: Codable, Hashable, Sendable {
        /// `mqtt://host:port` or `mqtts://...`.
        public var broker: String
        public var connected: Bool
        /// Why it is not connected (or the last thing that went wrong), in a sentence.
        public var problem: String?
        /// Connections the broker accepted since the daemon started.
        public var connects: Int
        /// Retained messages written, and those replaced by a newer state before the broker took them.
        public var published: Int
        public var superseded: Int
        /// Retained messages the proxy wants the broker to hold now.
        public var retained: Int
        /// Wake buttons pressed, presses past the budget (dropped: a flood on the command topics), and messages
        /// on a button's topic that are no press (replayed as retained, another payload).
        public var presses: Int
        public var pressesDropped: Int
        public var pressesIgnored: Int

        public init(broker: String) {
            self.broker = broker
            self.connected = false
            self.connects = 0
            self.published = 0
            self.superseded = 0
            self.retained = 0
            self.presses = 0
            self.pressesDropped = 0
            self.pressesIgnored = 0
        }
    }

    public struct Reload: Codable, Hashable, Sendable {
        public var time: Date
        public var succeeded: Bool
        /// The file's path when taken; the reason, with its line, when refused.
        public var message: String

        public init(time: Date, succeeded: Bool, message: String) {
            self.time = time
            self.succeeded = succeeded
            self.message = message
        }
    }

    /// Recent hosts listed at most: a page's worth.
    public static let recentHostsLimit = 100

    public struct RecentHost: Codable, Hashable, Sendable {
        public var mac: String
        public var name: String?
        /// Where its history last put it (`handed-back`, `gone`, ...).
        public var state: PresenceState
        /// When that last happened.
        public var since: Date
        public var lastWake: WakeLogEntry?

        public init(mac: String, name: String?, state: PresenceState, since: Date, lastWake: WakeLogEntry?) {
            self.mac = mac
            self.name = name
            self.state = state
            self.since = since
            self.lastWake = lastWake
        }
    }

    public struct Activity: Codable, Hashable, Sendable {
        public var wakes: Int
        /// Connections that woke nobody (declined by the wake gate, or to no service), collapsed lines counted
        /// in full.
        public var declined: Int
        /// Wakes by trigger (`connection`, `lease-expired`, ...).
        public var wakesByReason: [String: Int]

        public init(wakes: Int, declined: Int, wakesByReason: [String: Int]) {
            self.wakes = wakes
            self.declined = declined
            self.wakesByReason = wakesByReason
        }
    }

    public struct OtherProxy: Codable, Hashable, Sendable {
        public var interface: String
        public var address: String
        /// The advertised instance label, `AA-BB-CC-DD.F name` (lower AABBCC wins).
        public var label: String
        /// Its MAC, once it answered an ARP request.
        public var mac: String?
        public var heardSecondsAgo: Double

        public init(interface: String, address: String, label: String, mac: String?, heardSecondsAgo: Double) {
            self.interface = interface
            self.address = address
            self.label = label
            self.mac = mac
            self.heardSecondsAgo = heardSecondsAgo
        }
    }

    public struct UPnPStatus: Codable, Hashable, Sendable {
        /// Held hosts with UPnP devices, and their entries (devices and services).
        public var hosts: Int
        public var entries: Int
        /// Searches answered for sleeping hosts, and announcements sent on their behalf.
        public var responses: Int
        public var announcements: Int

        public init(hosts: Int, entries: Int, responses: Int, announcements: Int) {
            self.hosts = hosts
            self.entries = entries
            self.responses = responses
            self.announcements = announcements
        }
    }

    public init(
        version: String, startedAt: Date, uptimeSeconds: Double, interfaces: [String], advertisedName: String?,
        hosts: Int, records: Int,
        registrationsAccepted: Int, refusals: [String: Int], queriesAnswered: Int, wakes: Int, magicPackets: Int,
        hostsByState: [PresenceState: Int]? = nil, upnp: UPnPStatus? = nil, otherProxies: [OtherProxy]? = nil,
        lastDay: Activity? = nil, recentHosts: [RecentHost]? = nil, lastReload: Reload? = nil,
        warnings: [String]? = nil, mqtt: MQTTLinkStatus? = nil, savings: SavingsCounters? = nil
    ) {
        self.savings = savings
        self.mqtt = mqtt
        self.lastReload = lastReload
        self.warnings = warnings
        self.lastDay = lastDay
        self.recentHosts = recentHosts
        self.hostsByState = hostsByState
        self.upnp = upnp
        self.otherProxies = otherProxies
        self.version = version
        self.startedAt = startedAt
        self.uptimeSeconds = uptimeSeconds
        self.interfaces = interfaces
        self.advertisedName = advertisedName
        self.hosts = hosts
        self.records = records
        self.registrationsAccepted = registrationsAccepted
        self.refusals = refusals
        self.queriesAnswered = queriesAnswered
        self.wakes = wakes
        self.magicPackets = magicPackets
    }
}
