import NIOCore
import SleepProxyWire

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
    /// The machines heard on the served links lately (`NeighbourBook`).
    public internal(set) var neighbours = NeighbourBook()
    /// Proxies that said goodbye lately, with when (`PeerRules.departedPeerMemory`): a restart comes back.
    var departedPeers: [InterfaceAddressKey: (peer: ProxyPeer, at: Timestamp)] = [:]
    var pendingClaims: [PendingClaim] = []
    /// Address requests for hosts whose NIC answers for them, held and judged (`Takeover+AddressRequests.swift`).
    var heldRequests: [HeldRequest] = []
    var recentRequests: [RecentRequest] = []
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
    struct AddressProbe: Hashable, Sendable {
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
        /// The registration's buffer, spelled out only for a wake's event: a string built for every host was a
        /// sixth of the takeover's part of a restart at 10,000 hosts (docs/scale.md).
        var hostName: DNSName?
        var sequence: UInt8
        var wakeMAC: MACAddress
        var password: SecureOnPassword?
        var v4: [IPv4Address]
        var v6: [IPv6Address]
        var ports: Set<WakePolicy.Port>
        /// Ports the host serves that its registration does not name: its UPnP description URLs (docs/ssdp.md).
        /// Kept apart from `ports`, which every registration replaces.
        var otherPorts: Set<WakePolicy.Port> = []
        var states: [IPAddress: AddressProbe] = [:]
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
        /// Handed over asleep and not seen since: its addresses are probed quickly, without the check for another
        /// proxy (`Takeover.probeInterval`). Once the host shows itself it is a host like any other again.
        var probesQuickly = false

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
            host.probesQuickly = false
        } else if isNew {
            // A host whose lease had ended and that was being woken registers again: it is up, so the wake
            // worked.
            if host.wake != nil { actions += self.finishWake(&host, awake: true, now: now) }
            host.states = [:]
            host.registered = true
            host.standby = nil
            host.handedOverBy = nil
            host.probesQuickly = false
        }
        let oldAddresses = host.addresses
        host.hostName = registration.hostName
        host.sequence = owner.sequence
        host.wakeMAC = owner.wakeMAC ?? key.primaryMAC
        host.password = owner.password
        host.v4 = v4
        host.v6 = v6
        host.ports = ports
        let index = self.index(of: key.interface)
        // Spelled out once: `addresses` builds an array each time it is read.
        let addresses = host.addresses
        // Addresses that went away are released; new ones are probed on their own, a second from now
        // (docs/protocol.md §4.3), while the others keep their state.
        for address in oldAddresses where !addresses.contains(address) {
            if host.states[address]?.neighbourInstalled == true, let index {
                actions.append(.removeNeighbour(interfaceIndex: index, address: address))
            }
            host.states[address] = nil
            if self.addressOwners[InterfaceAddressKey(interface: key.interface, address: address)] == key {
                self.setOwner(nil, of: address, on: key.interface)
            }
        }
        host.states.reserveCapacity(addresses.count)
        for address in addresses where host.states[address] == nil {
            host.states[address] = AddressProbe(phase: .waiting, next: now + TakeoverRules.startDelay)
        }
        host.refreshNext()
        for address in addresses {
            self.setOwner(key, of: address, on: key.interface)
        }
        self.hosts[key] = host
        if oldAddresses != addresses || isNew, let index {
            actions.append(.watchChanged(interfaceIndex: index))
        }
        return actions
    }

    /// A registration ended, as its presence's ending says (`HostPresence.Ending`): the addresses are released;
    /// `endsWake` ends a wake sequence under way as a success (the host is up); `wake` keeps only a new wake
    /// sequence (a lease that ended with the action "wake"); otherwise a wake under way runs to its end.
    /// `pointsBack` (a hand-back: the host is up) tells the neighbours that every address the proxy answered for
    /// is at the host's MAC again, as the end of a successful wake does.
    public mutating func removed(_ key: OwnerKey, endsWake: Bool, wake: Bool, pointsBack: Bool = false, now: Timestamp)
        -> [TakeoverAction]
    {
        guard var host = self.hosts[key] else { return [] }
        let answered = host.addresses.filter(host.isAnswering)
        var actions = self.release(&host, now: now)
        if endsWake, host.wake != nil {
            actions += self.finishWake(&host, awake: true, handingBack: answered, now: now)
        } else if pointsBack {
            // Beyond Apple, which says nothing when a host it answered for wakes by itself: the neighbours'
            // caches still hold the proxy's MAC for these addresses, and their traffic would go to the proxy
            // until the entries age out (minutes on some stacks), so the host, awake, would seem unreachable.
            actions += self.pointNeighboursBack(host, addresses: answered)
        }
        host.registered = false
        for address in host.addresses { host.states[address] = AddressProbe(phase: .stopped) }
        host.next = nil
        if wake, !endsWake {
            self.hosts[key] = host
            actions += self.startWake(key, trigger: .leaseExpired, now: now)
        } else if host.wake != nil, !endsWake {
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

    /// Ports beyond the registered services whose connection requests wake the host, subject to the wake policy
    /// as those are: the TCP ports of its UPnP description URLs (docs/ssdp.md).
    public mutating func setOtherWakePorts(_ ports: Set<WakePolicy.Port>, for key: OwnerKey) {
        guard var host = self.hosts[key], host.otherPorts != ports else { return }
        host.otherPorts = ports
        self.hosts[key] = host
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

}
