import SleepProxyWire

/// What the takeover shows of its hosts: for the engine's decisions and its own view (`ProxyEngine+Reading`).
extension Takeover {
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
        var addresses: [(IPAddress, AddressState)] = []
        for address in host.addresses {
            let state = host.states[address] ?? AddressProbe()
            let phase: AddressState
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
        let order: [AddressState] = [.answering, .probing, .starting, .standby, .ownerSeen, .stopped]
        let phase = order.first { candidate in addresses.contains { $0.1 == candidate } } ?? .stopped
        return HostStatus(
            phase: phase, waking: host.wake != nil, wakeAttempts: host.wake?.attempts ?? 0,
            probeRestarts: host.states.values.map(\.restarts).max() ?? 0, addresses: addresses)
    }

    public struct HostStatus: Sendable {
        public var phase: AddressState
        public var waking: Bool
        public var wakeAttempts: Int
        public var probeRestarts: Int
        /// Each address with its own phase (docs/protocol.md §5.2: the state is per address).
        public var addresses: [(IPAddress, AddressState)]
    }
}

/// Where the proxy stands with one of a host's addresses (docs/protocol.md §5.2: the takeover is per address): the
/// one vocabulary for it, mirrored once by the admin side. The raw values are the words users see.
public enum AddressState: String, CaseIterable, Hashable, Sendable {
    /// Waiting for its first probe.
    case starting
    /// Probed: does the host answer for it?
    case probing
    /// The proxy answers ARP or neighbour discovery for it.
    case answering
    /// The host answered for it itself; probed again later.
    case ownerSeen = "owner-seen"
    /// Not watched any more (the registration ended).
    case stopped
    /// Another proxy answers for the host; this one watches it and takes over if it leaves.
    case standby
}
