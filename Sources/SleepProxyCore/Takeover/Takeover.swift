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

/// Address takeover and waking for the sleeping hosts (docs/protocol.md §4.3–4.6, §5.2), as a pure state machine.
///
/// For each host: wait a second, probe its addresses three times (ARP probes and DAD-style NS unicast to its wake
/// MAC); if it stays silent, announce (gratuitous ARP and unsolicited NA at 0, 1, 3, 7 s) and answer ARP and NS
/// for its addresses with the proxy's MAC. Traffic for its registered services starts a wake: magic packets every
/// 2 s, at most 15, until the host shows it is awake; then everything is released and the captured connection
/// requests are replayed to it. Frames come in with `now`; frames to send and decisions go out as actions.
public struct Takeover: Sendable {
    public var configuration: TakeoverConfiguration {
        didSet { self.gate.configuration = Self.gateConfiguration(self.configuration) }
    }
    public internal(set) var statistics = TakeoverStatistics()
    /// Decides which traffic wakes a host (docs/waking.md); the takeover carries its verdicts out.
    public internal(set) var gate: WakeGate
    /// Other sleep proxies on the served links (`Takeover+Peers.swift`).
    var peers: [InterfaceAddressKey: ProxyPeer] = [:]
    var pendingClaims: [PendingClaim] = []
    /// The metric this proxy advertises (AABBCC), to settle which of two proxies keeps a host.
    public var ownMetric = SleepProxyName.unrankable

    var interfaces: [Int: InterfaceContext] = [:]
    var hosts = HostTable()
    /// Watched address on an interface (by name) → its host. Changed only through `setOwner`.
    private(set) var addressOwners: [InterfaceAddressKey: OwnerKey] = [:]
    /// How many addresses of each family `addressOwners` holds per interface.
    private var watchedCounts: [String: WatchedCount] = [:]

    struct WatchedCount: Sendable {
        var v4 = 0
        var v6 = 0
    }
    struct InterfaceAddressKey: Hashable, Sendable {
        var interface: String
        var address: IPAddress
    }

    enum Phase: Hashable, Sendable {
        /// Not answering; probing starts at `next`.
        case waiting
        case probing(sent: Int)
        /// Answering; announcement `sent` of 4 is due at `next`.
        case announcing(sent: Int, startedAt: Timestamp)
        /// Answering, announcements done.
        case claimed
        /// The owner was seen more than `maximumProbeRestarts` times: never taken over again this epoch.
        case stopped
    }

    struct WakeProgress: Hashable, Sendable {
        var trigger: WakeTrigger
        var rule: WakeRule?
        var startedAt: Timestamp
        var attempts = 0
        var next: Timestamp
    }

    /// One proxied address. Apple keeps the takeover state per address record (docs/protocol.md §5.2, our
    /// docs/coexistence.md): a host that keeps one address alive (its IPv6 link-local, or a NIC answering
    /// neighbour solicitations in sleep) holds back only that address; the others are claimed and woken on.
    struct AddressState: Hashable, Sendable {
        var phase: Phase = .waiting
        var next: Timestamp?
        var restarts = 0
        var neighbourInstalled = false
        /// Before its claim the address was asked for by broadcast, so that a proxy already answering for it says
        /// so (we never claim second: Apple's proxy wakes the host on a later claim).
        var peerChecked = false

        var isClaimed: Bool {
            switch self.phase {
            case .announcing, .claimed: return true
            default: return false
            }
        }
    }

    struct Host: Sendable {
        var key: OwnerKey
        var hostName: String?
        var sequence: UInt8
        var wakeMAC: MACAddress
        var password: SecureOnPassword?
        var v4: [IPv4Address]
        var v6: [IPv6Address]
        var ports: Set<WakePolicy.Port>
        /// Ports the host serves that its registration does not name: its UPnP description URLs (docs/ssdp.md).
        /// Kept apart from `ports`, which every registration replaces.
        var otherPorts: Set<WakePolicy.Port> = []
        var states: [IPAddress: AddressState] = [:]
        /// The earliest `next` of any address: kept in step by `refreshNext`, so finding due hosts stays one
        /// comparison per host.
        var next: Timestamp?
        var wake: WakeProgress?
        var lastWakeEnded: Timestamp?
        /// Connection requests seen while waking, replayed to the host when it is up (lurtz/sleep-proxy's trick).
        var replay: [(at: Timestamp, client: String, frame: [UInt8])] = []
        /// False once the registration is gone (lease expired) and only the wake sequence remains.
        var registered = true
        /// Another proxy answers for the host; this one stands by.
        var standby: Standby?
        /// The proxy that handed the host to us (`release-all --transfer` there): it is leaving, and its last
        /// answers for the host are no reason to stand by for it.
        var handedOverBy: IPAddress?

        var macs: [MACAddress] {
            self.wakeMAC == self.key.primaryMAC ? [self.wakeMAC] : [self.wakeMAC, self.key.primaryMAC]
        }

        /// The proxy answers ARP/NDP for `address` now.
        func isAnswering(_ address: IPAddress) -> Bool {
            self.registered && (self.states[address]?.isClaimed ?? false)
        }

        /// The proxy answers for at least one of the host's addresses.
        var isAnsweringAny: Bool { self.registered && self.states.values.contains(where: \.isClaimed) }

        /// Every address gave up after too many restarts (or the registration is gone).
        var isStopped: Bool {
            !self.registered || (!self.states.isEmpty && self.states.values.allSatisfy { $0.phase == .stopped })
        }

        var addresses: [IPAddress] { self.v4.map(IPAddress.v4) + self.v6.map(IPAddress.v6) }

        mutating func refreshNext() {
            self.next = self.states.values.compactMap(\.next).min()
        }
    }

    public init(configuration: TakeoverConfiguration = TakeoverConfiguration()) {
        self.configuration = configuration
        self.gate = WakeGate(configuration: Self.gateConfiguration(configuration))
    }

    static func gateConfiguration(_ configuration: TakeoverConfiguration) -> WakeGate.Configuration {
        WakeGate.Configuration(
            policy: configuration.policy, sources: configuration.sources, monitorHoldoff: configuration.monitorHoldoff)
    }

    /// Sizes the host table and the address index for `hosts` hosts of two addresses (an IPv4 and a link-local
    /// IPv6 address, as a Mac registers), so that a storm does not stop to rehash them (`RecordStore.reserveCapacity`).
    public mutating func reserveCapacity(hosts: Int) {
        self.hosts.reserveCapacity(hosts)
        self.addressOwners.reserveCapacity(hosts * 2)
    }

    // MARK: - Interfaces and registrations

    /// The interfaces served. A host on an interface that went away keeps its state; it is served again when the
    /// interface returns (a cable pull must not forget sleeping hosts).
    public mutating func setInterfaces(_ contexts: [InterfaceContext]) -> [TakeoverAction] {
        let old = self.interfaces
        self.interfaces = Dictionary(contexts.map { ($0.index, $0) }, uniquingKeysWith: { first, _ in first })
        return contexts.filter { old[$0.index] != $0 }.map { .watchChanged(interfaceIndex: $0.index) }
    }

    /// Addresses whose traffic the capture filter must pass on the interface.
    public func watchedAddresses(interfaceIndex: Int) -> [IPAddress] {
        let list = self.watchList(interfaceIndex: interfaceIndex, limit: .max)
        return ((list.v4 ?? []).map(IPAddress.v4) + (list.v6 ?? []).map(IPAddress.v6)).sorted()
    }

    /// The watched addresses of each family on the interface, or nil for a family with more than `limit` of them
    /// (the capture filter then passes the family whole): found in O(1) then, because a proxy holding
    /// thousands of hosts is asked after every batch that brought a new one.
    public func watchList(interfaceIndex: Int, limit: Int = CaptureFilter.maximumAddresses) -> (
        v4: [IPv4Address]?, v6: [IPv6Address]?
    ) {
        guard let name = self.interfaces[interfaceIndex]?.name else { return ([], []) }
        let counts = self.watchedCounts[name] ?? WatchedCount()
        var v4: [IPv4Address]? = counts.v4 > limit ? nil : []
        var v6: [IPv6Address]? = counts.v6 > limit ? nil : []
        guard v4 != nil || v6 != nil else { return (nil, nil) }
        for slot in self.addressOwners.keys where slot.interface == name {
            switch slot.address {
            case .v4(let address): v4?.append(address)
            case .v6(let address): v6?.append(address)
            }
        }
        return (v4?.sorted { $0.rawValue < $1.rawValue }, v6?.sorted { ($0.high, $0.low) < ($1.high, $1.low) })
    }

    /// Files `address` on `interface` as `key`'s, keeping the per-family counts in step.
    mutating func setOwner(_ key: OwnerKey?, of address: IPAddress, on interface: String) {
        let slot = InterfaceAddressKey(interface: interface, address: address)
        let had = self.addressOwners[slot] != nil
        self.addressOwners[slot] = key
        let delta = (key != nil ? 1 : 0) - (had ? 1 : 0)
        guard delta != 0 else { return }
        var counts = self.watchedCounts[interface] ?? WatchedCount()
        if case .v4 = address { counts.v4 += delta } else { counts.v6 += delta }
        self.watchedCounts[interface] = counts
    }

    public var hostCount: Int { self.hosts.count }

    /// A registration was accepted (or restored at start). A new sleep epoch, or `restart` (a new registration
    /// sent by a host that is therefore awake), starts the takeover from the beginning a second later; a
    /// retransmission or a further part keeps the current state and picks up changed addresses and services.
    public mutating func registered(_ registration: OwnerRegistration, restart: Bool = false, now: Timestamp)
        -> [TakeoverAction]
    {
        var actions: [TakeoverAction] = []
        let key = registration.key
        var v4: [IPv4Address] = []
        var v6: [IPv6Address] = []
        for address in registration.addresses {
            switch address {
            case .v4(let a): v4.append(a)
            case .v6(let a): v6.append(a)
            }
        }
        // Sized once: growing a small set insert by insert was a measurable share of a registration storm.
        let services = registration.servicePorts
        var ports = Set<WakePolicy.Port>(minimumCapacity: services.count)
        for service in services {
            switch service.transport {
            case .tcp: ports.insert(WakePolicy.Port(.tcp, service.port))
            case .udp: ports.insert(WakePolicy.Port(.udp, service.port))
            case nil: break
            }
        }
        let owner = registration.owner
        var host =
            self.hosts[key]
            ?? Host(
                key: key, hostName: nil, sequence: owner.sequence, wakeMAC: owner.wakeMAC ?? key.primaryMAC,
                password: nil, v4: [], v6: [], ports: [])
        let isNew = self.hosts[key] == nil || !host.registered
        if !isNew, host.sequence != owner.sequence || restart {
            // The host registered a new sleep epoch (it was awake in between), or sent a new registration (it is
            // awake now): every address starts again.
            actions += self.release(&host, now: now)
            if host.wake != nil { actions += self.finishWake(&host, awake: true, now: now) }
            host.states = [:]
            // Which proxy answers for the host is settled afresh for the new epoch (docs/coexistence.md).
            host.standby = nil
            host.handedOverBy = nil
        } else if isNew {
            // A host whose lease had ended and that was being woken registers again: it is up, so the wake
            // worked.
            if host.wake != nil { actions += self.finishWake(&host, awake: true, now: now) }
            host.states = [:]
            host.registered = true
            host.standby = nil
            host.handedOverBy = nil
        }
        let oldAddresses = host.addresses
        host.hostName = registration.hostName?.description
        host.sequence = owner.sequence
        host.wakeMAC = owner.wakeMAC ?? key.primaryMAC
        host.password = owner.password
        host.v4 = v4
        host.v6 = v6
        host.ports = ports
        let index = self.index(of: key.interface)
        // Addresses that went away are released; new ones are probed on their own, a second from now
        // (docs/protocol.md §4.3), while the others keep their state.
        for address in oldAddresses where !host.addresses.contains(address) {
            if host.states[address]?.neighbourInstalled == true, let index {
                actions.append(.removeNeighbour(interfaceIndex: index, address: address))
            }
            host.states[address] = nil
            if self.addressOwners[InterfaceAddressKey(interface: key.interface, address: address)] == key {
                self.setOwner(nil, of: address, on: key.interface)
            }
        }
        host.states.reserveCapacity(host.addresses.count)
        for address in host.addresses where host.states[address] == nil {
            host.states[address] = AddressState(phase: .waiting, next: now + TakeoverRules.startDelay)
        }
        host.refreshNext()
        for address in host.addresses {
            self.setOwner(key, of: address, on: key.interface)
        }
        self.hosts[key] = host
        if oldAddresses != host.addresses || isNew, let index {
            actions.append(.watchChanged(interfaceIndex: index))
        }
        return actions
    }

    /// A registration ended. Hand-back means the host is awake: release silently (and end a wake sequence with
    /// success). Expiry with the action "wake" keeps only the wake sequence; anything else releases.
    public mutating func removed(_ key: OwnerKey, reason: RemovalReason, wake: Bool, now: Timestamp) -> [TakeoverAction]
    {
        guard var host = self.hosts[key] else { return [] }
        var actions = self.release(&host, now: now)
        if reason == .handBack {
            if host.wake != nil { actions += self.finishWake(&host, awake: true, now: now) }
        }
        host.registered = false
        for address in host.addresses { host.states[address] = AddressState(phase: .stopped) }
        host.next = nil
        if wake, reason == .expired {
            self.hosts[key] = host
            actions += self.startWake(key, trigger: .leaseExpired, now: now)
        } else if host.wake != nil, reason != .handBack {
            self.hosts[key] = host  // an administrator's forget does not cancel a wake in progress
        } else {
            self.forget(key)
        }
        if let index = self.index(of: key.interface) { actions.append(.watchChanged(interfaceIndex: index)) }
        return actions
    }

    /// Drops a host entirely. Its addresses stayed mapped to it while only its wake sequence remained, so that
    /// the owner's own ARP or neighbour discovery could still end that sequence as a success (a wake outcome
    /// must tell the truth: docs/coexistence.md).
    mutating func forget(_ key: OwnerKey) {
        self.gate.forget(host: key)
        guard let host = self.hosts.removeValue(forKey: key) else { return }
        for address in host.addresses
        where self.addressOwners[InterfaceAddressKey(interface: key.interface, address: address)] == key {
            self.setOwner(nil, of: address, on: key.interface)
        }
    }

    /// Starts waking a host (an administrator, an mDNS conflict, lease expiry, or traffic for its services).
    public mutating func wake(_ key: OwnerKey, trigger: WakeTrigger, now: Timestamp) -> [TakeoverAction] {
        self.startWake(key, trigger: trigger, now: now)
    }

    /// The host showed it is up by something the takeover cannot see itself (its mDNS responder spoke). Every
    /// address it still probes waits as after an owner's ARP; a wake in progress ends with success. Claimed
    /// addresses are left to the caller, which hands the whole host back (docs/coexistence.md).
    public mutating func ownerActive(_ key: OwnerKey, now: Timestamp) -> [TakeoverAction] {
        guard var host = self.hosts[key] else { return [] }
        var actions: [TakeoverAction] = []
        if host.wake != nil { actions += self.finishWake(&host, awake: true, now: now) }
        for address in host.addresses {
            guard var state = host.states[address] else { continue }
            switch state.phase {
            case .waiting, .probing:
                state.phase = .waiting
                state.next = max(state.next ?? now, now + TakeoverRules.restartDelayBeforeAnnouncing)
                host.states[address] = state
            case .announcing, .claimed, .stopped:
                continue
            }
        }
        host.refreshNext()
        self.hosts[key] = host
        if !host.registered, host.wake == nil { self.forget(key) }
        return actions
    }

    /// After a clean stop a moment ago (`ProxyEngine.resumeSpeaking`): the host was asleep then, so its addresses
    /// are answered for at once, announced as after a claim, instead of probed for four seconds first while the
    /// responder already speaks for it (ARP went unanswered for 3-4 s after every restart). A host that woke in
    /// the meantime shows itself on the wire and gets each address back as usual (`ownerSeen`).
    public mutating func resume(_ key: OwnerKey, now: Timestamp) -> [TakeoverAction] {
        guard var host = self.hosts[key], host.registered, let index = self.index(of: key.interface) else { return [] }
        var actions: [TakeoverAction] = []
        for address in host.addresses {
            guard var state = host.states[address] else { continue }
            switch state.phase {
            case .waiting, .probing:
                state.phase = .announcing(sent: 0, startedAt: now)
                state.next = now
                actions.append(.setNeighbour(interfaceIndex: index, address: address, mac: host.wakeMAC))
                state.neighbourInstalled = true
                host.states[address] = state
            case .announcing, .claimed, .stopped:
                continue
            }
        }
        host.refreshNext()
        self.hosts[key] = host
        return actions
    }

    /// Ports beyond the registered services whose connection requests wake the host, subject to the wake policy
    /// as those are: the TCP ports of its UPnP description URLs (docs/ssdp.md).
    public mutating func setOtherWakePorts(_ ports: Set<WakePolicy.Port>, for key: OwnerKey) {
        guard var host = self.hosts[key], host.otherPorts != ports else { return }
        host.otherPorts = ports
        self.hosts[key] = host
    }

    /// Magic packets are going out for the host.
    public func isWaking(_ key: OwnerKey) -> Bool { self.hosts[key]?.wake != nil }

    /// The hosts with a wake under way (few at any time).
    public var wakingHosts: Set<OwnerKey> { self.hosts.waking }

    /// The proxy answers for at least one of the host's addresses: it took the host over.
    public func isAnsweringAny(_ key: OwnerKey) -> Bool { self.hosts[key]?.isAnsweringAny ?? false }

    /// The host whose address `address` is on the interface (registered, or only being woken).
    public func host(owning address: IPAddress, interface: String) -> OwnerKey? {
        self.addressOwners[InterfaceAddressKey(interface: interface, address: address)]
    }

    /// The state of one host, for the admin side.
    public func state(of key: OwnerKey) -> HostStatus? {
        guard let host = self.hosts[key] else { return nil }
        var addresses: [(IPAddress, HostStatus.Phase)] = []
        for address in host.addresses {
            let state = host.states[address] ?? AddressState()
            let phase: HostStatus.Phase
            switch state.phase {
            case .waiting where host.standby != nil: phase = .standby
            case .waiting: phase = state.restarts > 0 ? .ownerSeen : .starting
            case .probing: phase = .probing
            case .announcing, .claimed: phase = .answering
            case .stopped: phase = .stopped
            }
            addresses.append((address, phase))
        }
        // The host's phase is its most advanced address's: answering on one address is answering.
        let order: [HostStatus.Phase] = [.answering, .probing, .starting, .standby, .ownerSeen, .stopped]
        let phase = order.first { candidate in addresses.contains { $0.1 == candidate } } ?? .stopped
        return HostStatus(
            phase: phase, waking: host.wake != nil, wakeAttempts: host.wake?.attempts ?? 0,
            probeRestarts: host.states.values.map(\.restarts).max() ?? 0, addresses: addresses)
    }

    public struct HostStatus: Sendable {
        public enum Phase: String, Hashable, Sendable {
            case starting, probing, answering, ownerSeen = "owner-seen", stopped
            /// Another proxy answers for the host; this one watches it and takes over if it leaves.
            case standby
        }
        public var phase: Phase
        public var waking: Bool
        public var wakeAttempts: Int
        public var probeRestarts: Int
        /// Each address with its own phase (docs/protocol.md §5.2: the state is per address).
        public var addresses: [(IPAddress, Phase)]
    }

    /// The daemon is stopping: neighbour entries go (the next start installs them again); the hosts stay asleep.
    public mutating func shutdown() -> [TakeoverAction] {
        var actions: [TakeoverAction] = []
        for key in Array(self.hosts.keys) {
            guard var host = self.hosts[key] else { continue }
            actions += self.release(&host, now: Timestamp(nanoseconds: 0))
            self.hosts[key] = host
        }
        return actions
    }

    // MARK: - Timers

    public mutating func nextDeadline() -> Timestamp? {
        var deadline = self.hosts.nextDeadline()
        for candidate in [self.gate.nextDeadline(), self.pendingClaims.map(\.until).min()] {
            if let candidate { deadline = deadline.map { min($0, candidate) } ?? candidate }
        }
        return deadline
    }

    /// `source` resolved one of `host`'s names through the proxy (the responder saw the question): it vouches
    /// for the source's next connection (docs/waking.md §3).
    public mutating func noteResolve(by source: IPAddress, of host: OwnerKey, now: Timestamp) {
        guard self.hosts[host] != nil else { return }
        self.gate.noteResolve(by: source, of: host, now: now)
    }

    /// Steps the hosts due at `now`, `limit` of them at most (the rest stay due for the next call).
    public mutating func tick(now: Timestamp, limit: Int = TakeoverRules.maximumHostsPerTick) -> [TakeoverAction] {
        var actions: [TakeoverAction] = []
        actions += self.settlePendingClaims(now: now)
        // Held packets first: a wake they start is stepped with the host below.
        for (candidate, decision) in self.gate.due(now: now) {
            guard let host = self.hosts[candidate.host], host.isAnsweringAny || host.wake != nil else { continue }
            actions += self.carryOut(decision, for: candidate, now: now)
        }
        let due = self.hosts.due(now: now, limit: limit)
        for key in due {
            guard var host = self.hosts[key] else { continue }
            if let wake = host.wake, wake.next <= now {
                if wake.attempts < TakeoverRules.maximumWakeAttempts {
                    actions += self.sendBurst(&host, now: now)
                } else {
                    actions += self.finishWake(&host, awake: false, now: now)
                    if !host.registered {
                        self.hosts[key] = host
                        self.forget(key)
                        continue
                    }
                    // The proxy still holds the host: point the neighbours back at the proxy.
                    if host.isAnsweringAny { actions += self.announcementFrames(host) }
                }
            }
            if host.registered, host.standby != nil {
                if host.next.map({ $0 <= now }) ?? false { actions += self.standbyCheck(&host, now: now) }
            } else if host.registered {
                for address in host.addresses {
                    guard let next = host.states[address]?.next, next <= now else { continue }
                    actions += self.step(&host, address: address, now: now)
                }
                host.refreshNext()
            }
            self.hosts[key] = host
            // Its timers were taken off the heap as due: file what is due next, even if unchanged.
            self.hosts.refile(key)
        }
        return actions
    }

    /// One step of probing or announcing one address.
    mutating func step(_ host: inout Host, address: IPAddress, now: Timestamp) -> [TakeoverAction] {
        guard var state = host.states[address] else { return [] }
        defer { host.states[address] = state }
        guard let index = self.index(of: host.key.interface), let context = self.interfaces[index] else {
            state.next = now + TakeoverRules.probeInterval  // the interface is away; try again later
            return []
        }
        var actions: [TakeoverAction] = []
        if state.phase == .waiting { state.phase = .probing(sent: 0) }
        if case .probing(let sent) = state.phase {
            if sent < TakeoverRules.probeCount {
                // docs/protocol.md §4.3: probes go unicast to the owner's wake MAC: only it should answer.
                switch address {
                case .v4(let v4):
                    actions.append(
                        .sendFrame(
                            ARPPacket.probe(from: context.macAddress, for: v4).frame(
                                destination: host.wakeMAC, source: context.macAddress
                            ).bytes, interfaceIndex: index))
                case .v6(let v6):
                    let ns = NeighborDiscoveryMessage(kind: .solicitation, target: v6)
                    actions.append(
                        .sendFrame(
                            ns.frame(
                                ethernetSource: context.macAddress, ethernetDestination: host.wakeMAC, source: .any,
                                destination: v6.solicitedNodeMulticast
                            ).bytes, interfaceIndex: index))
                }
                state.phase = .probing(sent: sent + 1)
                state.next = now + TakeoverRules.probeInterval
                return actions
            }
            // Before claiming, where other proxies are known: ask for the address by broadcast once, so that one
            // already answering for the host says so and this proxy stands by instead of claiming second.
            if !state.peerChecked, case .v4(let v4) = address, !self.peers(on: context.name).isEmpty,
                let check = self.whoHas(v4, on: context)
            {
                state.peerChecked = true
                state.next = now + TakeoverRules.probeInterval
                return [check]
            }
            // Silence: the host sleeps on this address. Take it over.
            state.phase = .announcing(sent: 0, startedAt: now)
            actions.append(.setNeighbour(interfaceIndex: index, address: address, mac: host.wakeMAC))
            state.neighbourInstalled = true
            actions.append(.claimed(host.key, address: address))
        }
        switch state.phase {
        case .announcing(let sent, let startedAt):
            actions += self.announcementFrames(host, addresses: [address])
            let offsets = TakeoverRules.announcementOffsets
            if sent + 1 < offsets.count {
                state.phase = .announcing(sent: sent + 1, startedAt: startedAt)
                state.next = startedAt + offsets[sent + 1]
            } else {
                state.phase = .claimed
                state.next = nil
            }
        default:
            state.next = nil
        }
        return actions
    }

    /// Gratuitous ARP and unsolicited NA (O set, RFC 4861 §7.2.6) saying the proxy's MAC has the addresses
    /// (by default every address the proxy answers for).
    func announcementFrames(_ host: Host, addresses: [IPAddress]? = nil) -> [TakeoverAction] {
        guard let index = self.index(of: host.key.interface), let context = self.interfaces[index] else { return [] }
        var actions: [TakeoverAction] = []
        for address in addresses ?? host.addresses.filter(host.isAnswering) {
            switch address {
            case .v4(let v4):
                actions.append(
                    .sendFrame(
                        ARPPacket.announcement(from: context.macAddress, for: v4).frame(
                            destination: .broadcast, source: context.macAddress
                        ).bytes, interfaceIndex: index))
            case .v6(let v6):
                actions.append(Self.unsolicitedAdvertisement(of: v6, at: context.macAddress, from: context))
            }
        }
        return actions
    }

    /// An unsolicited neighbour advertisement to all nodes, Override set (RFC 4861 §7.2.6), saying `address` is at
    /// `linkLayer`, sent from the proxy's interface with its own MAC as the Ethernet source.
    static func unsolicitedAdvertisement(
        of address: IPv6Address, at linkLayer: MACAddress, from context: InterfaceContext
    )
        -> TakeoverAction
    {
        let na = NeighborDiscoveryMessage(
            kind: .advertisement, flags: [.override], target: address, targetLinkLayerAddress: linkLayer)
        let frame = na.frame(
            ethernetSource: context.macAddress, ethernetDestination: IPv6Address.allNodes.multicastMAC, source: address,
            destination: .allNodes)
        return .sendFrame(frame.bytes, interfaceIndex: context.index)
    }

    /// Stops answering for the host's addresses (all, or `only` one) and removes the proxy machine's neighbour
    /// entries for them.
    func release(_ host: inout Host, only: IPAddress? = nil, now: Timestamp) -> [TakeoverAction] {
        var actions: [TakeoverAction] = []
        let index = self.index(of: host.key.interface)
        for address in host.addresses where only == nil || only == address {
            guard var state = host.states[address] else { continue }
            if state.neighbourInstalled, let index {
                actions.append(.removeNeighbour(interfaceIndex: index, address: address))
            }
            state.neighbourInstalled = false
            host.states[address] = state
        }
        return actions
    }

    func index(of interface: String) -> Int? {
        self.interfaces.first { $0.value.name == interface }?.key
    }
}
