import FoundationEssentials

/// One request from `sleepproxyctl` to `sleepproxyd`. The JSON field names are the stable schema.
public struct ControlRequest: Codable, Hashable, Sendable {
    public enum Command: String, Codable, Hashable, Sendable {
        case status, hosts, host, wake, forget, events
        /// A host's history over the last day (`target`: a MAC or name), held or not.
        case history
        /// Decommissioning: wake every host and stop proxying it, so each re-registers elsewhere.
        case releaseAll = "release-all"
        /// The machines heard on the served links in the last day (docs/neighbours.md).
        case neighbours
        /// Keep a host that cannot register present (`target`: its MAC; docs/adoption.md), kept across restarts.
        case adopt
        /// Stop keeping an adopted host present (`target`: its MAC); a held one is withdrawn with goodbyes.
        case unadopt
        /// The adopted hosts, with what the proxy learned of each.
        case adopted
        /// What the daemon holds back to spare the SD card (the history's recent lines, journal entries no reply
        /// waits on) written to the state directory and synced now.
        case sync
        /// What the proxy saved over a month (`month`, `YYYY-MM`; the current one when absent): docs/savings.md.
        case savings
    }

    /// The most hosts one `hosts` page holds: what a status page or a dashboard asks for at a time, so that a
    /// proxy holding 10,000 hosts never builds 10,000 summaries for one look.
    public static let maximumPageSize = 1000

    public var version: Int
    public var command: Command
    /// `host`, `wake`, `forget`: a host name (`mac-mini`, `mac-mini.local`) or a primary MAC.
    public var target: String?
    /// `forget`: send goodbyes for the host's records (as on expiry) instead of dropping them silently.
    public var goodbyes: Bool?
    /// `events`: only this host (name or MAC), only events at or after `since`.
    public var since: Date?
    /// `events`: keep the connection open and send each new event as its own response line.
    public var follow: Bool?
    /// `release-all`: hand each host to the best other sleep proxy on its link first, and wake only those none
    /// took (docs/several-proxies.md).
    public var transfer: Bool?
    /// `hosts`: only hosts in this state (`asleep`, ...), only hosts whose name, MAC or address contains
    /// `search`, and a page of them: `limit` hosts from `offset` on in the listing's order (name, then MAC). The
    /// response's `total` counts every match.
    public var state: PresenceState?
    public var search: String?
    public var offset: Int?
    public var limit: Int?
    /// `savings`: the month, `YYYY-MM`.
    public var month: String?

    public init(
        command: Command, target: String? = nil, goodbyes: Bool? = nil, since: Date? = nil, follow: Bool? = nil,
        transfer: Bool? = nil, state: PresenceState? = nil, search: String? = nil, offset: Int? = nil,
        limit: Int? = nil
    ) {
        self.state = state
        self.search = search
        self.offset = offset
        self.limit = limit
        self.version = ControlProtocol.version
        self.command = command
        self.target = target
        self.goodbyes = goodbyes
        self.since = since
        self.follow = follow
        self.transfer = transfer
    }
}

/// The daemon's answer: `ok` with the part the command asked for, or `error` with one sentence.
public struct ControlResponse: Codable, Hashable, Sendable {
    public var version: Int
    public var ok: Bool
    public var error: String?
    public var status: DaemonStatus?
    public var hosts: [HostSummary]?
    public var host: HostDetail?
    public var events: [WakeLogEntry]?
    /// `release-all --transfer`: the hosts another proxy took, by MAC, with that proxy's label; the other
    /// `hosts` were woken.
    public var transferred: [String: String]?
    /// `hosts`: how many hosts matched, of which `hosts` is the page asked for.
    public var total: Int?
    /// `history`: the host's last day.
    public var history: HostHistory?
    /// Why a request was refused, for programs (the HTTP API's status code); `error` says it for people.
    public var refusal: Refusal?
    /// `neighbours`: the machines heard lately, by interface and MAC.
    public var neighbours: [NeighbourSummary]?
    /// `adopt`, `unadopt`, `adopted`: every adopted host, afterwards.
    public var adopted: [AdoptedSummary]?
    /// `savings`: the month asked for.
    public var savings: SavingsReport?

    public enum Refusal: String, Codable, Hashable, Sendable {
        /// The request itself was wrong (a bad page, an unknown state): asking again the same way fails again.
        case invalid
        /// No held host (or no history) by the name or MAC given.
        case notFound = "not-found"
        /// The daemon could not take the request now (its queue full, or it is stopping): ask again shortly.
        case unavailable
        /// The daemon tried and could not do it (no takeover to wake with, a wake held back, a write that failed).
        case failed
    }

    public init(
        ok: Bool = true, error: String? = nil, status: DaemonStatus? = nil, hosts: [HostSummary]? = nil,
        host: HostDetail? = nil, events: [WakeLogEntry]? = nil, transferred: [String: String]? = nil,
        total: Int? = nil, history: HostHistory? = nil
    ) {
        self.total = total
        self.history = history
        self.transferred = transferred
        self.version = ControlProtocol.version
        self.ok = ok
        self.error = error
        self.status = status
        self.hosts = hosts
        self.host = host
        self.events = events
    }

    public static func failure(_ message: String, _ refusal: Refusal = .failed) -> ControlResponse {
        var response = ControlResponse(ok: false, error: message)
        response.refusal = refusal
        return response
    }
}

public struct HostSummary: Codable, Hashable, Sendable {
    public var name: String?
    public var mac: String
    public var interface: String
    public var addresses: [String]
    /// `_http._tcp:8080` per service.
    public var services: [String]
    public var leaseSeconds: Double
    /// Where the host stands: one of `PresenceState.held`.
    public var state: PresenceState
    public var lastWake: WakeLogEntry?
    /// The latest sign that the host was up ("mDNS from 192.0.2.2", "an ARP request from its MAC for ..."), and
    /// how long ago; absent when none was seen since it registered.
    public var lastSeenAwake: String?
    public var lastSeenAwakeSecondsAgo: Double?
    /// Each address with the takeover's state for it; absent with `--no-takeover` and from older daemons.
    public var addressStates: [HostDetail.AddressState]?

    public init(
        name: String?, mac: String, interface: String, addresses: [String], services: [String], leaseSeconds: Double,
        state: PresenceState, lastWake: WakeLogEntry?,
        lastSeenAwake: String? = nil, lastSeenAwakeSecondsAgo: Double? = nil,
        addressStates: [HostDetail.AddressState]? = nil
    ) {
        self.addressStates = addressStates
        self.lastSeenAwake = lastSeenAwake
        self.lastSeenAwakeSecondsAgo = lastSeenAwakeSecondsAgo
        self.name = name
        self.mac = mac
        self.interface = interface
        self.addresses = addresses
        self.services = services
        self.leaseSeconds = leaseSeconds
        self.state = state
        self.lastWake = lastWake
    }
}

/// A machine heard on a served link lately (`neighbours`): what it said of itself.
public struct NeighbourSummary: Codable, Hashable, Sendable {
    public var interface: String
    public var mac: String
    /// Newest first.
    public var addresses: [String]
    /// Host names its own mDNS responder published (`nas.local.`).
    public var names: [String]
    /// Service instances it published for itself (`Files._smb._tcp.local.`).
    public var services: [String]
    public var lastHeard: Date
    /// It registered with this proxy (it is held now).
    public var registered: Bool
    /// A person adopted it (docs/adoption.md); absent from older daemons.
    public var adopted: Bool?

    public init(
        interface: String, mac: String, addresses: [String], names: [String], services: [String], lastHeard: Date,
        registered: Bool, adopted: Bool? = nil
    ) {
        self.adopted = adopted
        self.interface = interface
        self.mac = mac
        self.addresses = addresses
        self.names = names
        self.services = services
        self.lastHeard = lastHeard
        self.registered = registered
    }
}

/// A host a person adopted by MAC (`adopted`, docs/adoption.md), and what its own frames taught.
public struct AdoptedSummary: Codable, Hashable, Sendable {
    public var mac: String
    /// Where it was heard; absent until it was.
    public var interface: String?
    /// `not heard yet`, `awake` (heard lately), `checking` (quiet: asked for its name), or, held as a sleeping
    /// host, that host's state (`asleep`, `waking`, ...).
    public var state: String
    /// Adopted in the configuration file (`adopt = MAC`) rather than with `sleepproxyctl adopt`.
    public var configured: Bool
    public var addresses: [String]
    public var names: [String]
    /// Service instances it published (`Files._smb._tcp.local.`).
    public var services: [String]
    /// Records learned from its own mDNS, and those a bound refused.
    public var records: Int
    public var refused: Int
    /// Seconds since a frame only a running host sends; absent until one came.
    public var lastSignOfLifeSecondsAgo: Double?
    /// Held asleep while its own NIC answers ARP or neighbour solicitations for it (docs/adoption.md §4).
    public var nicAnswers: Bool
    /// Its NetBIOS names (`WINPC<20>`, a group's marked `(group)`) and the name it answers over LLMNR, as learned
    /// from its own frames (docs/windows.md); absent from daemons before 0.8.0.
    public var netbiosNames: [String]?
    public var llmnrName: String?
    /// Its WS-Discovery endpoint (`urn:uuid:…`), as its Hello or its matches gave it.
    public var wsdEndpoint: String?

    public init(
        mac: String, interface: String?, state: String, configured: Bool, addresses: [String], names: [String],
        services: [String], records: Int, refused: Int, lastSignOfLifeSecondsAgo: Double?, nicAnswers: Bool,
        netbiosNames: [String]? = nil, llmnrName: String? = nil, wsdEndpoint: String? = nil
    ) {
        self.wsdEndpoint = wsdEndpoint
        self.netbiosNames = netbiosNames
        self.llmnrName = llmnrName
        self.mac = mac
        self.interface = interface
        self.state = state
        self.configured = configured
        self.addresses = addresses
        self.names = names
        self.services = services
        self.records = records
        self.refused = refused
        self.lastSignOfLifeSecondsAgo = lastSignOfLifeSecondsAgo
        self.nicAnswers = nicAnswers
    }
}

public struct HostDetail: Codable, Hashable, Sendable {
    public struct Record: Codable, Hashable, Sendable {
        public var name: String
        public var type: String
        public var ttl: UInt32
        public var unique: Bool
        public var data: String

        public init(name: String, type: String, ttl: UInt32, unique: Bool, data: String) {
            self.name = name
            self.type = type
            self.ttl = ttl
            self.unique = unique
            self.data = data
        }
    }

    public var summary: HostSummary
    public var sequence: Int
    public var wakeMAC: String
    public var hasPassword: Bool
    public var registeredSecondsAgo: Double
    public var records: [Record]
    public var wakeHistory: [WakeLogEntry]
    /// Each address with the takeover's state for it (`answering`, `probing`, `starting`, `owner-seen`,
    /// `stopped`): the owner answering for one address holds back only that one.
    public var addressStates: [AddressState]?
    /// What the host advertises over SSDP (UPnP devices and services), as the proxy answers for it while it sleeps
    /// (docs/ssdp.md); nil when the daemon runs with `--no-ssdp`.
    public var upnp: [UPnPEntry]?
    /// The host's last day (docs/status-page.md); absent from older daemons.
    public var history: HostHistory?

    public struct UPnPEntry: Codable, Hashable, Sendable {
        /// The NT: `upnp:rootdevice`, `uuid:…`, or a device or service type.
        public var type: String
        public var usn: String
        public var location: String
        public var server: String?
        public var maxAge: Int
        public var bootID: UInt32?
        public var configID: UInt32?
        /// Seconds since the host itself last announced or answered it.
        public var heardSecondsAgo: Double

        public init(
            type: String, usn: String, location: String, server: String?, maxAge: Int, bootID: UInt32?,
            configID: UInt32?, heardSecondsAgo: Double
        ) {
            self.type = type
            self.usn = usn
            self.location = location
            self.server = server
            self.maxAge = maxAge
            self.bootID = bootID
            self.configID = configID
            self.heardSecondsAgo = heardSecondsAgo
        }
    }

    public struct AddressState: Codable, Hashable, Sendable {
        /// The takeover's state for one address; the JSON keeps the words.
        public enum Phase: String, Codable, Hashable, Sendable, CaseIterable {
            case starting, probing, answering, ownerSeen = "owner-seen", stopped
            /// Another sleep proxy answers for the address; this one stands by.
            case standby
        }

        public var address: String
        public var state: Phase
        public init(address: String, state: Phase) {
            self.address = address
            self.state = state
        }
    }

    public init(
        summary: HostSummary, sequence: Int, wakeMAC: String, hasPassword: Bool, registeredSecondsAgo: Double,
        records: [Record], wakeHistory: [WakeLogEntry],
        addressStates: [AddressState]? = nil, upnp: [UPnPEntry]? = nil, history: HostHistory? = nil
    ) {
        self.history = history
        self.addressStates = addressStates
        self.upnp = upnp
        self.summary = summary
        self.sequence = sequence
        self.wakeMAC = wakeMAC
        self.hasPassword = hasPassword
        self.registeredSecondsAgo = registeredSecondsAgo
        self.records = records
        self.wakeHistory = wakeHistory
    }
}

/// "2h 5m", "45 s", "3d 4h": durations as people read them.
public enum HumanDuration {
    public static func format(_ seconds: Double) -> String {
        guard seconds.isFinite else { return "-" }
        let total = Int(max(0, seconds.rounded()))
        let days = total / 86400, hours = total % 86400 / 3600, minutes = total % 3600 / 60, secs = total % 60
        if days > 0 { return "\(days)d \(hours)h" }
        if hours > 0 { return "\(hours)h \(minutes)m" }
        if minutes > 0 { return "\(minutes)m \(secs)s" }
        return "\(secs)s"
    }

    /// "90s", "15m", "2h", "7d" (or a bare number of seconds) as seconds; nil for anything else.
    public static func parse(_ text: String) -> Double? {
        let units: [Character: Double] = ["s": 1, "m": 60, "h": 3600, "d": 86400]
        var body = Substring(text.lowercased())
        while body.first?.isWhitespace == true { body = body.dropFirst() }
        while body.last?.isWhitespace == true { body = body.dropLast() }
        var unit = 1.0
        if let last = body.last, let factor = units[last] {
            unit = factor
            body = body.dropLast()
        }
        guard let value = Double(body), value >= 0, value.isFinite else { return nil }
        return value * unit
    }
}

// Keyed by state, the counts stay a JSON object ({"asleep": 2}) rather than a list of pairs.
extension PresenceState: CodingKeyRepresentable {}
