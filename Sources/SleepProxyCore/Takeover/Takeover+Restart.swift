import SleepProxyWire

/// A restart a moment after a clean stop (docs/coexistence.md): the hosts asleep then are answered for at once.
extension Takeover {
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
}
