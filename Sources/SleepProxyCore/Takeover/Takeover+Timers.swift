import NIOCore
import SleepProxyWire

/// The takeover's timers: probes, announcements, wake bursts and re-probes, each due at its own time.
extension Takeover {
    // MARK: - Timers

    public mutating func nextDeadline() -> Timestamp? {
        var deadline = self.hosts.nextDeadline()
        Timestamp.keepEarlier(self.gate.nextDeadline(), in: &deadline)
        for claim in self.pendingClaims { Timestamp.keepEarlier(claim.until, in: &deadline) }
        for request in self.heldRequests { Timestamp.keepEarlier(request.due, in: &deadline) }
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
        actions += self.settleHeldRequests(now: now)
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

    /// Between two probes of a host's address: Apple's second, or less for a host handed over by the proxy that
    /// held it (`handedOver`).
    static func probeInterval(_ host: Host) -> Duration {
        host.probesQuickly ? TakeoverRules.handoverProbeInterval : TakeoverRules.probeInterval
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
                state.next = now + Self.probeInterval(host)
                // Where other proxies are known, the address is asked for by broadcast with the last probe, so
                // that one already answering for the host says so before this proxy would claim; asked a probe
                // later, the IPv4 address was claimed a second after the IPv6 one, and ARP went unanswered for a
                // second while mDNS already spoke for the host.
                if sent + 1 == TakeoverRules.probeCount, !host.probesQuickly, case .v4(let v4) = address,
                    !self.peers(on: context.name).isEmpty, let check = self.whoHas(v4, on: context)
                {
                    state.peerChecked = true
                    actions.append(check)
                }
                return actions
            }
            // Before claiming, where other proxies are known (and were not asked with the last probe, because they
            // became known since): ask for the address by broadcast once, so that one already answering for the
            // host says so and this proxy stands by instead of claiming second. Not for a host handed over: the
            // proxy answering for it is the one that handed it over, and lets it go.
            if !state.peerChecked, !host.probesQuickly, case .v4(let v4) = address,
                !self.peers(on: context.name).isEmpty,
                let check = self.whoHas(v4, on: context)
            {
                state.peerChecked = true
                state.next = now + Self.probeInterval(host)
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
