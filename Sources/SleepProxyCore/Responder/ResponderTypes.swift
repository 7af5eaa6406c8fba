import SleepProxyWire

/// One mDNS packet the responder wants on the wire.
public struct MDNSTransmission: Hashable, Sendable {
    public enum Destination: Hashable, Sendable {
        /// 224.0.0.251 or ff02::fb, port 5353, out of one interface.
        case multicast(interfaceIndex: Int, family: IPFamily)
        /// A querier's own address and port (QU, direct unicast and legacy unicast answers).
        case unicast(address: IPAddress, port: UInt16, interfaceIndex: Int)
    }

    public var destination: Destination
    public var message: DNSMessage
    public var bytes: [UInt8]

    init(destination: Destination, message: DNSMessage, bytes: [UInt8]) {
        self.destination = destination
        self.message = message
        self.bytes = bytes
    }
}

/// What the responder asks of the rest of the proxy.
public enum ResponderAction: Hashable, Sendable {
    case transmit(MDNSTransmission)
    /// Another host answered one of a sleeping host's unique records with different data (RFC 6762 §9): the
    /// owner must wake to defend its name (docs/protocol.md §4.5).
    case conflict(OwnerKey, record: DNSResourceRecord, from: IPAddress)
    /// The host probed its own names with exactly the records the proxy holds for it: its responder is running,
    /// so the host is awake (docs/coexistence.md).
    case ownerProbing(OwnerKey)
    /// Another sleep proxy advertised itself (its `_sleep-proxy._udp` PTR, from its own address; TTL 0 is its
    /// goodbye): the takeover keeps a list of them (docs/several-proxies.md).
    /// `port`: its registration port, from the instance's SRV record when the same packet carries it.
    case proxyAdvertised(label: String, port: UInt16?, ttl: UInt32, from: IPAddress, interfaceIndex: Int)
    /// `source` asked for a sleeping host's SRV, TXT or address records (or ANY): the resolve step of browse →
    /// resolve → connect, which vouches for its next connection to the host (docs/waking.md §3).
    case resolved(OwnerKey, by: IPAddress)
    /// The proxy's own advertised name or host name lost a conflict and was changed (RFC 6762 §9).
    case renamed(instanceLabel: String, hostLabel: String)
}

/// Counters for status and metrics.
public struct ResponderStatistics: Hashable, Sendable {
    public var queries = 0
    public var legacyQueries = 0
    public var responsesSeen = 0
    public var answeredQueries = 0
    public var packetsSent = 0
    public var suppressedByKnownAnswer = 0
    public var suppressedAsDuplicate = 0
    public var malformed = 0
    public var offLink = 0
    public var conflicts = 0
    public var renames = 0

    public init() {}
}

/// The proxy's own DNS-SD identity (docs/protocol.md §1.1).
public struct ResponderConfiguration: Hashable, Sendable {
    /// `II-PP-MM-TT.F Name`, the instance label of `_sleep-proxy._udp.local.`.
    public var instanceLabel: String
    /// The first label of the host name the SRV points at (`<label>.local.`).
    public var hostLabel: String
    /// The UDP port registrations arrive on.
    public var registrationPort: UInt16
    /// Seeds the jitter of response delays; tests fix it, the daemon draws it at random.
    public var seed: UInt64

    public init(instanceLabel: String, hostLabel: String, registrationPort: UInt16, seed: UInt64) {
        self.instanceLabel = instanceLabel
        self.hostLabel = hostLabel
        self.registrationPort = registrationPort
        self.seed = seed
    }
}

/// SplitMix64: a small, fast, seedable generator for jitter (not for anything secret).
struct Jitter: Sendable {
    var state: UInt64

    mutating func next() -> UInt64 {
        self.state &+= 0x9E37_79B9_7F4A_7C15
        var z = self.state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// A random duration in `milliseconds`.
    mutating func milliseconds(_ range: ClosedRange<Int64>) -> Duration {
        let span = UInt64(range.upperBound - range.lowerBound + 1)
        return .milliseconds(range.lowerBound + Int64(self.next() % span))
    }
}

/// Whose records one answer may carry: every sleeping host's and the proxy's own, less the hosts the same packet
/// showed awake (handed back: neither answered nor defended); or, for a question sent to one sleeping host's own
/// address, that host's records alone (docs/waking.md §7).
public struct AnswerScope: Hashable, Sendable {
    public var excluded: Set<OwnerKey>
    public var only: OwnerKey?

    public static let everyone = AnswerScope()

    public init(excluding excluded: Set<OwnerKey> = [], only: OwnerKey? = nil) {
        self.excluded = excluded
        self.only = only
    }

    func admits(_ owner: OwnerKey) -> Bool {
        (self.only == nil || self.only == owner) && (self.excluded.isEmpty || !self.excluded.contains(owner))
    }

    /// The proxy's own records (its sleep proxy service, its name) belong to no host: never in a host's answer.
    var admitsOwn: Bool { self.only == nil }

    var isEveryone: Bool { self.only == nil && self.excluded.isEmpty }
}

/// An mDNS packet the responder took (`Responder.decode`): decoded once, for the engine's decisions and then the
/// responder's answers.
public struct ReceivedMDNS: Sendable {
    public var message: DNSMessage
    public var source: IPAddress
    public var port: UInt16
    /// The group or one of the proxy's addresses (packet info); nil when the kernel did not say.
    public var destination: IPAddress?
    public var interfaceIndex: Int
    public var context: InterfaceContext
    /// The packet's length, counted against `MDNSRules.maximumHeldBytes` when it is held.
    public var size: Int
}
