import FoundationEssentials

/// One line of the wake log as stored in `wake-events.jsonl` and as the admin CLI shows it: a wake and its
/// reason, its outcome, or a connection that did not wake a host. The field names are the stable schema.
public struct WakeLogEntry: Codable, Hashable, Sendable {
    /// What happened; the JSON keeps the words `wake`, `awake`, `no-response`, `ignored`.
    public enum Kind: String, Codable, Hashable, Sendable, CaseIterable {
        /// Magic packets started.
        case wake
        /// The host showed it was up.
        case awake
        /// Fifteen magic packets and no sign of the host.
        case noResponse = "no-response"
        /// Traffic that was no reason to wake (a connection to a port the host registered no service on).
        case ignored
        /// Traffic to a service that the wake gate declined: a scanner, a source rule, a monitor (docs/waking.md).
        case declined
    }

    public var kind: Kind
    public var time: Date
    /// The sleeping host: primary MAC, interface, and host name when known.
    public var mac: String
    public var interface: String
    public var hostName: String?
    public var trigger: Trigger
    /// `awake`: seconds from the first magic packet until the host was seen.
    public var seconds: Double?
    /// `no-response`: magic packets sent.
    public var attempts: Int?
    /// `wake`, `ignored`, `declined`: the wake gate's rule (`resolved-first`, `scanner`, ...; docs/waking.md).
    public var rule: String?
    /// `ignored`, `declined`: packets of this kind since the last line about them, this one included.
    public var count: Int?
    /// A `declined` that found a scanner: distinct ports of one host and hosts it touched, and how long it is
    /// ignored after its last packet.
    public var scanPorts: Int?
    public var scanHosts: Int?
    public var quarantineSeconds: Int?
    /// The line as logged.
    public var summary: String

    public struct Trigger: Codable, Hashable, Sendable {
        /// Why; the JSON keeps the words `connection`, `mdns-conflict`, `netbios-conflict`, `address-conflict`,
        /// `lease-expired`, `administrator`, `address-request`.
        public enum Kind: String, Codable, Hashable, Sendable, CaseIterable {
            case connection
            case mdnsConflict = "mdns-conflict"
            /// Another machine registered one of the host's NetBIOS names.
            case netbiosConflict = "netbios-conflict"
            case addressConflict = "address-conflict"
            case leaseExpired = "lease-expired"
            case administrator
            /// A machine that resolved the host asked for its address, which its sleeping NIC answers.
            case addressRequest = "address-request"
        }

        public var type: Kind
        public var transport: String?
        public var client: String?
        public var clientPort: UInt16?
        public var port: UInt16?
        public var address: String?
        public var name: String?
        public var from: String?

        public init(
            type: Kind, transport: String? = nil, client: String? = nil, clientPort: UInt16? = nil, port: UInt16? = nil,
            address: String? = nil, name: String? = nil, from: String? = nil
        ) {
            self.type = type
            self.transport = transport
            self.client = client
            self.clientPort = clientPort
            self.port = port
            self.address = address
            self.name = name
            self.from = from
        }
    }

    public init(
        kind: Kind, time: Date, mac: String, interface: String, hostName: String?, trigger: Trigger, seconds: Double?,
        attempts: Int?, rule: String? = nil, count: Int? = nil, scanPorts: Int? = nil, scanHosts: Int? = nil,
        quarantineSeconds: Int? = nil, summary: String
    ) {
        self.kind = kind
        self.time = time
        self.mac = mac
        self.interface = interface
        self.hostName = hostName
        self.trigger = trigger
        self.seconds = seconds
        self.attempts = attempts
        self.rule = rule
        self.count = count
        self.scanPorts = scanPorts
        self.scanHosts = scanHosts
        self.quarantineSeconds = quarantineSeconds
        self.summary = summary
    }
}
