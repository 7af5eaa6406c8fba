import NIOCore
import SleepProxyWire

/// What the packet side asks the I/O layer to do.
public enum TakeoverAction: Hashable, Sendable {
    /// A whole Ethernet frame, source MAC already the interface's own.
    case sendFrame([UInt8], interfaceIndex: Int)
    /// A magic packet as a UDP datagram to 255.255.255.255 port 9 on the interface.
    case sendWakeDatagram([UInt8], interfaceIndex: Int)
    /// A neighbour entry on the proxy machine: the proxied address is reached at the owner's MAC, so the proxy's
    /// own kernel never waits for an ARP/ND answer that our packet socket sends onto the wire instead.
    case setNeighbour(interfaceIndex: Int, address: IPAddress, mac: MACAddress)
    case removeNeighbour(interfaceIndex: Int, address: IPAddress)
    /// The addresses watched on the interface changed: rebuild the capture filter and multicast memberships.
    case watchChanged(interfaceIndex: Int)
    case event(WakeEvent)
    /// The probes of `address` went unanswered: the proxy now answers for it (the host is asleep there).
    case claimed(OwnerKey, address: IPAddress)
    /// The owner spoke for `address` itself (an ARP or neighbour discovery packet from its MAC): the proxy let
    /// go of that address only (`wasAnswering`: it had claimed it) and probes it again later.
    case ownerSeen(OwnerKey, address: IPAddress, signal: OwnerSignal, wasAnswering: Bool)
    /// Another sleep proxy claimed one of the host's addresses: `kept`, this proxy keeps answering for it; otherwise
    /// it stands by for the host (docs/several-proxies.md).
    case peerClaim(OwnerKey, peer: ProxyPeer, kept: Bool)
    /// A host stood by for is this proxy's again (the active proxy left), without a wake.
    case tookOver(OwnerKey, why: String)
    /// An mDNS question sent to a sleeping host's own address (docs/waking.md §7): for the responder to answer
    /// from the host's address, never a reason to wake. The engine consumes it.
    case unicastQuery(UnicastQuery)
    /// A machine that resolved the host lately, and is not sweeping, asked for one of its addresses that the proxy
    /// does not answer (its NIC does): the engine wakes the host if it holds it asleep (docs/adoption.md §4).
    case addressRequested(OwnerKey, address: IPAddress, client: IPAddress)
}

/// A datagram to port 5353 of an address the proxy answers for, as captured.
public struct UnicastQuery: Hashable, Sendable {
    public var payload: [UInt8]
    public var source: IPAddress
    public var sourcePort: UInt16
    /// The querier's MAC on the link, where the answer goes.
    public var sourceMAC: MACAddress
    /// The sleeping host's address it was sent to, which the answer comes from.
    public var destination: IPAddress
    /// The host that address belongs to: the only one whose records the answer may carry.
    public var host: OwnerKey
    public var interfaceIndex: Int
}

/// How the owner of a proxied address showed that it is up, as the takeover sees it on the wire.
public enum OwnerSignal: String, Hashable, Sendable, CustomStringConvertible {
    case arpRequest = "an ARP request from its MAC"
    case arpSender = "an ARP packet from its MAC giving the address as its own"
    case arpReply = "an ARP reply from its MAC"
    case neighbourSolicitation = "a neighbour solicitation from its MAC"
    case neighbourAdvertisement = "a neighbour advertisement from its MAC"
    public var description: String { self.rawValue }

    /// An answer to a question (ours or anyone's): a sleeping NIC with ARP or ND offload gives these for the
    /// addresses it kept, so during a wake they prove nothing about the host (docs/waking.md §6).
    var isAnswer: Bool { self == .arpReply || self == .neighbourAdvertisement }
}

public struct TakeoverConfiguration: Hashable, Sendable {
    public var policy = WakePolicy()
    /// Who may wake (docs/waking.md §5).
    public var sources = WakeSources()
    /// `wake-monitor-holdoff` (docs/waking.md §6); zero turns the monitor budget off.
    public var monitorHoldoff: Duration = WakeRules.defaultMonitorHoldoff
    /// Append six zero bytes when the host registered no SecureOn password, as Apple does. Off by default: some
    /// NICs ignore a magic packet with a zero trailer (docs/protocol.md §4.6).
    public var appendZeroPassword = false
    /// Also send each magic packet as a UDP broadcast to port 9.
    public var udpMagicPacket = false

    public init(
        policy: WakePolicy = WakePolicy(), sources: WakeSources = WakeSources(),
        monitorHoldoff: Duration = WakeRules.defaultMonitorHoldoff, appendZeroPassword: Bool = false,
        udpMagicPacket: Bool = false
    ) {
        self.policy = policy
        self.sources = sources
        self.monitorHoldoff = monitorHoldoff
        self.appendZeroPassword = appendZeroPassword
        self.udpMagicPacket = udpMagicPacket
    }
}

public struct TakeoverStatistics: Hashable, Sendable {
    public var framesSeen = 0
    public var malformedFrames = 0
    public var arpReplies = 0
    public var neighbourAdvertisements = 0
    public var wakes = 0
    public var magicPackets = 0
    public var wakesSuppressed = 0
    /// Connection requests to ports the host serves no service on (the gate's `no-service`).
    public var ignoredConnections = 0
    /// Traffic to a service that the gate declined for any other rule.
    public var wakesDeclined = 0
    /// Claims of a held address by another sleep proxy: no wake, one of the two stands by.
    public var peerClaims = 0
    public var ownerSeen = 0
    public var conflicts = 0
    public init() {}
}
