import SleepProxyWire

/// One packet that might wake a sleeping host, as the takeover captured it: who sent it, to which host and
/// service, and the shape of its TCP header. `WakeGate` decides what it means (docs/waking.md).
public struct WakeCandidate: Hashable, Sendable {
    /// The TCP header fields that tell a person's connect() from a scanner's probe.
    public struct TCPShape: Hashable, Sendable {
        public var flags: TCPFlags
        public var window: UInt16
        /// Option kinds in order, NOPs left out (`TCPSegment.optionKinds`).
        public var optionKinds: [UInt8]
        public var sequenceNumber: UInt32

        public init(flags: TCPFlags, window: UInt16, optionKinds: [UInt8], sequenceNumber: UInt32) {
            self.flags = flags
            self.window = window
            self.optionKinds = optionKinds
            self.sequenceNumber = sequenceNumber
        }

        public init(_ segment: TCPSegment) {
            self.init(
                flags: segment.flags, window: segment.window, optionKinds: segment.optionKinds,
                sequenceNumber: segment.sequenceNumber)
        }

        public var isConnectionRequest: Bool { self.flags.contains(.syn) && !self.flags.contains(.ack) }
    }

    public var source: IPAddress
    /// The Ethernet source: the client's MAC on the link, or a router's for routed traffic.
    public var sourceMAC: MACAddress
    public var sourcePort: UInt16
    public var host: OwnerKey
    /// The host's primary and wake MACs (per-host rules are written with either).
    public var hostMACs: [MACAddress]
    public var destination: IPAddress
    public var port: WakePolicy.Port
    /// Nil for UDP.
    public var tcp: TCPShape?
    /// Ports the host serves: its registered services and its UPnP description URLs (docs/ssdp.md).
    public var servicePorts: Set<WakePolicy.Port>
    /// The source is on the link the host sleeps on (`InterfaceContext.isOnLink`); otherwise it was routed here.
    public var onLink: Bool
    /// For UDP: the datagram is the one-byte 0xFF IPsec NAT-T keepalive (docs/protocol.md §4.4).
    public var isNATKeepalive: Bool

    public init(
        source: IPAddress, sourceMAC: MACAddress, sourcePort: UInt16, host: OwnerKey, hostMACs: [MACAddress],
        destination: IPAddress, port: WakePolicy.Port, tcp: TCPShape?, servicePorts: Set<WakePolicy.Port>,
        onLink: Bool, isNATKeepalive: Bool = false
    ) {
        self.source = source
        self.sourceMAC = sourceMAC
        self.sourcePort = sourcePort
        self.host = host
        self.hostMACs = hostMACs
        self.destination = destination
        self.port = port
        self.tcp = tcp
        self.servicePorts = servicePorts
        self.onLink = onLink
        self.isNATKeepalive = isNATKeepalive
    }

    /// One connection attempt: a retransmitted SYN has the same one.
    var connection: ConnectionKey {
        ConnectionKey(source: self.source, sourcePort: self.sourcePort, destination: self.destination, port: self.port)
    }

    struct ConnectionKey: Hashable, Sendable {
        var source: IPAddress
        var sourcePort: UInt16
        var destination: IPAddress
        var port: WakePolicy.Port
    }
}

/// The rule behind a verdict: shown in the wake log, `sleepproxyctl`, the metrics' `reason` label and the log.
/// The raw values are the stable words of all of them (docs/waking.md lists each with its reason).
public enum WakeRule: String, Hashable, Sendable, CaseIterable, Codable, CustomStringConvertible {
    // Wakes.
    /// The source resolved the host's records through the proxy shortly before: an app's browse → resolve →
    /// connect.
    case resolvedFirst = "resolved-first"
    /// The source sent the identical SYN again after a second or more: only an operating system's connect()
    /// retransmits like that (docs/waking.md §3).
    case retransmitted
    /// Held for a moment; no scan showed itself meanwhile.
    case noScanSeen = "no-scan-seen"
    /// A data segment to SSH (port 22): an established session whose host fell asleep (docs/protocol.md §4.4).
    case sshSession = "ssh-session"

    // Holds.
    /// The first packet from a source that did not resolve the host: held to let a scan show itself.
    case holdingForScan = "holding-for-scan"
    /// A SYN shaped like a raw scanner's probe (small window, MSS only): it wakes only if retransmitted.
    case probeShape = "probe-shape"
    /// The source woke this host within `wake-monitor-holdoff` without resolving it (a port monitor): declined,
    /// retransmitted or not, until it resolves the host or the hold-off ends (docs/waking.md §6).
    case monitorBudget = "monitor-budget"

    // Declines.
    /// The host registered no service on that port (and no wake rule adds it).
    case noService = "no-service"
    /// The source touched several ports of a host, or several hosts, within seconds.
    case scanner
    /// A configured `wake-ignore-source`.
    case sourceIgnored = "source-ignored"
    /// A configured `wake-only-from` that does not name the source.
    case sourceNotAllowed = "source-not-allowed"
    /// From another subnet (through a router), and `wake-from-routed` is off.
    case routed
    /// Too many packets held at once (a flood): declined rather than woken.
    case busy

    public var description: String { self.rawValue }

    /// Whether a verdict with this rule wakes, holds or declines (each rule belongs to one).
    public var wakes: Bool {
        switch self {
        case .resolvedFirst, .retransmitted, .noScanSeen, .sshSession: return true
        default: return false
        }
    }
}

/// What `WakeGate` decided about one candidate.
public enum WakeVerdict: Hashable, Sendable {
    /// Wake the host now.
    case wake(WakeRule)
    /// Keep the packet (for replay) and ask again at `until` (the gate reports it from `due(now:)`), or sooner
    /// when a retransmission or a resolve settles it.
    case hold(until: Timestamp, WakeRule)
    /// Not a reason to wake.
    case decline(WakeRule)
    /// Not a wake candidate at all (a RST, a FIN, a stray ACK, a NAT-T keepalive): nothing to count or log.
    case ignore

    public var rule: WakeRule? {
        switch self {
        case .wake(let rule), .hold(_, let rule), .decline(let rule): return rule
        case .ignore: return nil
        }
    }
}
