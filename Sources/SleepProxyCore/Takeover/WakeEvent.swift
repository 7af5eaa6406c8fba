import SleepProxyWire

/// Why a host was woken (or would have been).
public enum WakeTrigger: Hashable, Sendable, CustomStringConvertible {
    public enum Transport: String, Hashable, Sendable { case tcp, udp }

    /// Traffic for one of the host's services: the client and the port it wanted.
    case connection(transport: Transport, client: IPAddress, clientPort: UInt16, port: UInt16)
    /// Another responder answered one of the host's unique mDNS records differently.
    case mdnsConflict(name: DNSName, from: IPAddress)
    /// Another machine registered one of the host's unique NetBIOS names (docs/windows.md §4).
    case netbiosConflict(name: String, from: IPAddress)
    /// Another machine (its MAC) claimed one of the host's addresses (ARP or neighbour discovery).
    case addressConflict(address: IPAddress, from: MACAddress)
    /// The lease ran out while the host slept (expiry action "wake").
    case leaseExpired
    /// An administrator asked for it.
    case administrator
    /// A machine that had just resolved the host asked for its address (ARP or neighbour solicitation), which the
    /// host's own sleeping NIC answers: the one sign of a connection the proxy can see (docs/adoption.md §4).
    case addressRequest(client: IPAddress, address: IPAddress)

    public var description: String {
        switch self {
        case .connection(let transport, let client, let clientPort, let port):
            return "\(transport.rawValue) connection from \(client) port \(clientPort) to port \(port)"
        case .mdnsConflict(let name, let from): return "mDNS conflict on \(name) from \(from)"
        case .netbiosConflict(let name, let from): return "NetBIOS name \(name) registered by \(from)"
        case .addressConflict(let address, let from): return "address \(address) claimed by \(from)"
        case .leaseExpired: return "lease expired"
        case .administrator: return "administrator"
        case .addressRequest(let client, let address):
            return "\(client) asked for \(address) after resolving the host"
        }
    }
}

/// One line of the wake log (docs/waking.md §8): a wake and why, how it ended, or traffic that was not a reason.
public struct WakeEvent: Hashable, Sendable {
    public enum Kind: String, Hashable, Sendable {
        /// Magic packets started.
        case wake
        /// The host showed it is awake (ARP, neighbour discovery or a new Owner sequence).
        case awake
        /// No sign of the host after the last magic packet.
        case noResponse = "no-response"
        /// A connection attempt to a port the host did not register: not woken.
        case ignored
        /// Traffic to a registered service that the wake gate declined (a scanner, a source rule, a monitor that
        /// woke the host lately): not woken (docs/waking.md).
        case declined
    }

    public var kind: Kind
    /// Monotonic time of the event (the I/O layer adds the wall-clock time when it records it).
    public var at: Timestamp
    public var host: OwnerKey
    public var hostName: String?
    public var trigger: WakeTrigger
    /// For `awake`: seconds from the first magic packet. For `noResponse`: magic packets sent.
    public var seconds: Double?
    public var attempts: Int?
    /// For `wake`, `ignored` and `declined` from traffic: the wake gate's rule (docs/waking.md).
    public var rule: WakeRule?
    /// For `ignored` and `declined`: how many such packets since the last line about them, this one included.
    public var count: Int?
    /// For a `declined` that found a scanner: what it touched and how long it is ignored.
    public var scan: WakeGate.ScanSummary?

    public init(
        kind: Kind, at: Timestamp, host: OwnerKey, hostName: String?, trigger: WakeTrigger, seconds: Double? = nil,
        attempts: Int? = nil, rule: WakeRule? = nil, count: Int? = nil, scan: WakeGate.ScanSummary? = nil
    ) {
        self.kind = kind
        self.at = at
        self.host = host
        self.hostName = hostName
        self.trigger = trigger
        self.seconds = seconds
        self.attempts = attempts
        self.rule = rule
        self.count = count
        self.scan = scan
    }

    static func twoDecimals(_ value: Double) -> String {
        let hundredths = Int((value * 100).rounded())
        let fraction = hundredths % 100
        return "\(hundredths / 100).\(fraction < 10 ? "0" : "")\(fraction)"
    }

    public var summary: String {
        let who = "\(self.hostName ?? "?") (\(self.host))"
        switch self.kind {
        case .wake: return "waking \(who): \(self.trigger)" + (self.rule.map { " (\($0))" } ?? "")
        case .awake: return "\(who) is awake after \(Self.twoDecimals(self.seconds ?? 0)) s (woken for \(self.trigger))"
        case .noResponse:
            return
                "\(who) showed no sign of waking after \(self.attempts ?? 0) magic packets (woken for \(self.trigger))"
        case .ignored:
            return "not waking \(who) for \(self.trigger): no registered service on that port\(self.times)"
        case .declined:
            let why: String
            if let scan = self.scan {
                let hosts = scan.hosts == 1 ? "1 host" : "\(scan.hosts) hosts"
                why =
                    "a scanner (\(scan.ports) ports of one host, \(hosts) within \(WakeRules.scanWindow.components.seconds) s); it wakes nobody for \(scan.quarantine.components.seconds) s after its last packet"
            } else {
                why = self.rule?.rawValue ?? "declined"
            }
            return "not waking \(who) for \(self.trigger): \(why)\(self.times)"
        }
    }

    /// ", 12 times since the last line" when the gate collapsed several.
    private var times: String {
        guard let count = self.count, count > 1 else { return "" }
        return ", \(count) times since the last line"
    }
}
