import SleepProxyWire

/// Requests for an address the proxy does not answer because the host's own NIC does while the host sleeps (ARP
/// and neighbour solicitation offload: docs/adoption.md §4). A connection to such a host goes to its MAC, which
/// the proxy never sees; what it sees is the client's broadcast request for the address just before. A request
/// from a machine that resolved the host lately, and that is not sweeping the link, is therefore the sign that a
/// person's app wants the host, and the engine wakes it (`TakeoverAction.addressRequested`). Beyond Apple, whose
/// proxy only ever wakes on traffic it captured itself.
extension Takeover {
    /// A request held for `WakeRules.holdDelay`: a sweep (nmap's ARP ping, a router's scan of the subnet) asks
    /// for many addresses within that time, a connecting app for one.
    struct HeldRequest: Hashable, Sendable {
        var key: OwnerKey
        var address: IPAddress
        var client: IPAddress
        var clientMAC: MACAddress
        var due: Timestamp
    }

    /// One request for an address on the link, by whom, for the sweep check.
    struct RecentRequest: Hashable, Sendable {
        var client: IPAddress
        var target: IPAddress
        var at: Timestamp
    }

    /// Requests remembered for the sweep check: a sweep of a /24 within the hold is hundreds of them, and the few
    /// of a sweep's that are needed to tell it are among the last 64.
    static let recentRequestsKept = 64
    /// Held requests at most: a flood of them from forged clients costs no more than this.
    static let maximumHeldRequests = 16

    /// Every request for an address that someone (not the proxy) sent on the link.
    mutating func noteRequest(from client: IPAddress, for target: IPAddress, now: Timestamp) {
        if self.recentRequests.count >= Self.recentRequestsKept { self.recentRequests.removeFirst() }
        self.recentRequests.append(RecentRequest(client: client, target: target, at: now))
    }

    /// A request for `address`, which the proxy does not answer for `key`, from `client`: held, then judged.
    mutating func addressRequested(
        _ key: OwnerKey, address: IPAddress, client: IPAddress, clientMAC: MACAddress, now: Timestamp
    ) {
        // Only an address the host's NIC answered in this sleep: one still being probed is simply not claimed yet.
        guard let host = self.hosts[key], host.registered, host.wake == nil, let state = host.states[address],
            state.restarts > 0 || state.phase == .stopped,
            !self.heldRequests.contains(where: { $0.key == key && $0.client == client }),
            self.heldRequests.count < Self.maximumHeldRequests,
            self.gate.resolvedRecently(by: client, mac: clientMAC, host: key, now: now)
        else { return }
        self.heldRequests.append(
            HeldRequest(
                key: key, address: address, client: client, clientMAC: clientMAC, due: now + WakeRules.holdDelay))
    }

    /// Held requests whose hold is over: a client that asked for as many addresses as a scanner does within the
    /// scan window is sweeping and wakes nothing; the others are handed to the engine.
    mutating func settleHeldRequests(now: Timestamp) -> [TakeoverAction] {
        guard !self.heldRequests.isEmpty else { return [] }
        var actions: [TakeoverAction] = []
        var kept: [HeldRequest] = []
        for request in self.heldRequests {
            guard request.due <= now else {
                kept.append(request)
                continue
            }
            let asked = Set(
                self.recentRequests.filter { $0.client == request.client && now - $0.at < WakeRules.scanWindow }.map(
                    \.target))
            if asked.count >= WakeRules.scanHosts {
                self.statistics.wakesSuppressed += 1
                continue
            }
            actions.append(.addressRequested(request.key, address: request.address, client: request.client))
        }
        self.heldRequests = kept
        return actions
    }
}
