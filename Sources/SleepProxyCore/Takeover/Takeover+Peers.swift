import SleepProxyWire

/// Another sleep proxy on a served link, known from its `_sleep-proxy._udp` advertisement (the proxy multicasts
/// its own service, so the packet's source is its address) and, once asked, its MAC (docs/several-proxies.md).
public struct ProxyPeer: Hashable, Sendable, CustomStringConvertible {
    public var interface: String
    public var address: IPAddress
    /// The advertised instance label, `AA-BB-CC-DD.F name`.
    public var label: String
    /// AABBCC as clients rank it (docs/protocol.md §1.3): lower wins.
    public var metric: Int
    public var mac: MACAddress?
    /// Where it takes registrations (its SRV), once heard.
    public var port: UInt16?
    /// When it was last asked for its MAC.
    var askedAt: Timestamp?
    public var lastHeard: Timestamp

    public var description: String { "\(self.label) (\(self.address)\(self.mac.map { ", \($0)" } ?? ""))" }

    /// A proxy as remembered across a restart (its metric is read from its label).
    public init(
        interface: String, address: IPAddress, label: String, mac: MACAddress?, port: UInt16?, lastHeard: Timestamp
    ) {
        self.interface = interface
        self.address = address
        self.label = label
        self.metric = SleepProxyName.metric(ofLabel: Array(label.utf8))
        self.mac = mac
        self.port = port
        self.lastHeard = lastHeard
    }

    init(
        interface: String, address: IPAddress, label: String, metric: Int, mac: MACAddress?, port: UInt16?,
        lastHeard: Timestamp
    ) {
        self.init(interface: interface, address: address, label: label, mac: mac, port: port, lastHeard: lastHeard)
        self.metric = metric
    }
}

/// The numbers of living beside other proxies, each with its reason.
public enum PeerRules {
    /// Other proxies remembered per link, at most: a home has a few Apple TVs and HomePods; a flood of fake
    /// advertisements must not grow the table.
    public static let maximumPeers = 32
    /// A claim by an unknown MAC waits this long for the known proxies to say their MACs (one ARP request each)
    /// before it is judged a conflict that wakes the host: a proxy answers its ARP within milliseconds.
    public static let identifyDelay: Duration = .milliseconds(500)
    /// Claims waiting for that answer, at most; past it a claim is judged at once.
    public static let maximumPendingClaims = 64
    /// A proxy standing by for a host asks every this long whether the active proxy still answers for it.
    public static let standbyCheckInterval: Duration = .seconds(10)
    /// Unanswered checks in a row after which the standby takes the host over (about 30 s without the active
    /// proxy: its ARP answer comes within milliseconds when it is there).
    public static let standbyMissedChecks = 3
    /// How long a proxy that said goodbye is still known by its MAC. A restart or a package upgrade brings it back
    /// within seconds to a minute or two, claiming the hosts it held before it advertises itself again; taken for
    /// a stranger, its claim was a conflict and both proxies woke the host (docs/several-proxies.md). Ten minutes
    /// covers a slow box's upgrade.
    public static let departedPeerMemory: Duration = .seconds(600)
}

extension Takeover {
    struct PendingClaim: Sendable {
        var host: OwnerKey
        var address: IPAddress
        var mac: MACAddress
        var until: Timestamp
    }

    /// The proxy stands back for a host another proxy answers for, and watches that proxy.
    struct Standby: Hashable, Sendable {
        var active: MACAddress
        var misses = 0
    }

    /// The known proxies on an interface.
    public func peers(on interface: String) -> [ProxyPeer] {
        self.peers.values.filter { $0.interface == interface }.sorted { $0.address < $1.address }
    }

    /// A `_sleep-proxy._udp` PTR heard from `address` (TTL 0: its goodbye). A goodbye from the proxy a host is
    /// stood by for hands the host to us at once, without a wake.
    public mutating func peerAdvertised(
        label: String, port: UInt16? = nil, ttl: UInt32, from address: IPAddress, interfaceIndex: Int, now: Timestamp
    ) -> [TakeoverAction] {
        guard let context = self.interfaces[interfaceIndex], !context.isOwnAddress(address) else { return [] }
        let key = InterfaceAddressKey(interface: context.name, address: address)
        if ttl == 0 {
            guard let peer = self.peers.removeValue(forKey: key), let mac = peer.mac else { return [] }
            self.rememberDeparted(peer, key: key, now: now)
            var actions: [TakeoverAction] = []
            for hostKey in self.hosts.keys {
                guard var host = self.hosts[hostKey], host.standby?.active == mac else { continue }
                actions += self.takeOverFromStandby(&host, why: "\(peer) withdrew its advertisement", now: now)
                self.hosts[hostKey] = host
            }
            return actions
        }
        if self.peers[key] == nil,
            self.peers.values.filter({ $0.interface == context.name }).count >= PeerRules.maximumPeers
        {
            return []
        }
        var peer =
            self.peers[key] ?? self.departedPeers.removeValue(forKey: key)?.peer
            ?? ProxyPeer(
                interface: context.name, address: address, label: label,
                metric: SleepProxyName.metric(ofLabel: Array(label.utf8)), mac: nil, port: port, lastHeard: now)
        peer.label = label
        if let port { peer.port = port }
        peer.metric = SleepProxyName.metric(ofLabel: Array(label.utf8))
        peer.lastHeard = now
        self.peers[key] = peer
        return []
    }

    /// A frame from `mac` gave `address` as its sender: if that is a known proxy's address, we know its MAC now.
    mutating func learnPeer(address: IPAddress, mac: MACAddress, on interface: String) {
        let key = InterfaceAddressKey(interface: interface, address: address)
        guard self.peers[key] != nil, self.peers[key]?.mac != mac else { return }
        self.peers[key]?.mac = mac
    }

    /// A known proxy sent us this host's registration: it is handing the host over as it leaves. Beyond Apple,
    /// whose receiving proxy waits and probes as for a host going to sleep: the host sleeps already (or, awake,
    /// answers the first probe), and the leaving proxy lets it go as soon as we accept, so its addresses are
    /// probed at once and quickly (`TakeoverRules.handoverProbeInterval`). Probed as for a new registration, it went
    /// unanswered for 5 s between the two proxies (docs/several-proxies.md).
    public mutating func handedOver(_ key: OwnerKey, by address: IPAddress, now: Timestamp) {
        guard var host = self.hosts[key] else { return }
        host.handedOverBy = address
        host.probesQuickly = true
        self.hosts[key] = host
        self.probeAtOnce(key, now: now)
    }

    /// An adopted host fell quiet (docs/adoption.md): its name went unanswered, so it sleeps already, and its
    /// addresses are probed from now instead of a second from now; a second apart and with the check for another
    /// proxy as for any host, since a second box of ours may have adopted it too.
    public mutating func probeAtOnce(_ key: OwnerKey, now: Timestamp) {
        guard var host = self.hosts[key] else { return }
        for address in host.addresses {
            guard var state = host.states[address], state.phase == .waiting else { continue }
            state.next = min(state.next ?? now, now)
            host.states[address] = state
        }
        host.refreshNext()
        self.hosts[key] = host
    }

    /// Whether `address` is a known proxy's on the interface: it may hand a host over (`Registrar.handle`).
    public func isPeer(_ address: IPAddress, on interface: String) -> Bool {
        self.peers[InterfaceAddressKey(interface: interface, address: address)] != nil
    }

    /// The proxy a host on `interface` is best handed to: the best advertised metric among those whose
    /// registration port is known, over IPv4 (ties: the lower address).
    public func bestPeer(on interface: String) -> ProxyPeer? {
        self.peers(on: interface).filter { peer in
            guard case .v4 = peer.address, peer.port != nil else { return false }
            return peer.metric < SleepProxyName.unrankable
        }.min { ($0.metric, $0.address) < ($1.metric, $1.address) }
    }

    /// The known proxy with `mac`, or one that said goodbye less than `PeerRules.departedPeerMemory` ago.
    func peer(mac: MACAddress, on interface: String, now: Timestamp) -> ProxyPeer? {
        if let known = self.peers.values.first(where: { $0.interface == interface && $0.mac == mac }) { return known }
        return self.departedPeers.values.first {
            $0.peer.interface == interface && $0.peer.mac == mac && now - $0.at < PeerRules.departedPeerMemory
        }?.peer
    }

    /// Keeps a proxy that said goodbye (with its MAC) for `PeerRules.departedPeerMemory`, within the same bound
    /// as the known ones.
    private mutating func rememberDeparted(_ peer: ProxyPeer, key: InterfaceAddressKey, now: Timestamp) {
        guard peer.mac != nil else { return }
        self.departedPeers = self.departedPeers.filter { now - $0.value.at < PeerRules.departedPeerMemory }
        if self.departedPeers.values.filter({ $0.peer.interface == peer.interface }).count >= PeerRules.maximumPeers,
            let oldest = self.departedPeers.filter({ $0.value.peer.interface == peer.interface })
                .min(by: { $0.value.at < $1.value.at })?.key
        {
            self.departedPeers[oldest] = nil
        }
        self.departedPeers[key] = (peer, now)
    }

    /// The proxies known by their MACs, to be remembered across a restart (`restorePeers`).
    public var identifiedPeers: [ProxyPeer] {
        self.peers.values.filter { $0.mac != nil }.sorted { ($0.interface, $0.address) < ($1.interface, $1.address) }
    }

    /// Proxies known before a restart a moment ago. The restarted proxy speaks again at once for the hosts it held
    /// (`resume`), before any other proxy advertises itself again: knowing them by their MACs, it takes the one
    /// that took its hosts over meanwhile for a proxy, not for a conflict that wakes the host.
    public mutating func restorePeers(_ restored: [ProxyPeer], now: Timestamp) {
        for var peer in restored where peer.mac != nil {
            let key = InterfaceAddressKey(interface: peer.interface, address: peer.address)
            guard self.peers[key] == nil,
                self.peers.values.filter({ $0.interface == peer.interface }).count < PeerRules.maximumPeers
            else { continue }
            peer.askedAt = nil
            peer.lastHeard = now
            self.peers[key] = peer
        }
    }

    /// An ARP request for `address` from the proxy's own IPv4 address, broadcast: a known proxy answers with its
    /// MAC, and whoever answers for a host's address (a proxy standing in for it) says so.
    func whoHas(_ address: IPv4Address, on context: InterfaceContext) -> TakeoverAction? {
        guard
            let own = context.prefixes.lazy.compactMap({ prefix -> IPv4Address? in
                if case .v4(let v4) = prefix.address { return v4 } else { return nil }
            }).first
        else { return nil }
        let request = ARPPacket(
            operation: .request, senderMAC: context.macAddress, senderIP: own, targetMAC: .zero, targetIP: address)
        return .sendFrame(
            request.frame(destination: .broadcast, source: context.macAddress).bytes, interfaceIndex: context.index)
    }

    /// Someone other than the owner claimed one of a host's addresses. Apple's proxy wakes the host for any such
    /// claim, which makes two proxies that hold one host wake it every time (docs/several-proxies.md). Ours first
    /// asks whether the claimant is a known proxy; only a claim by anyone else is a conflict that wakes the owner.
    mutating func foreignClaim(
        _ key: OwnerKey, address: IPAddress, mac: MACAddress, context: InterfaceContext, now: Timestamp
    ) -> [TakeoverAction] {
        if let peer = self.peer(mac: mac, on: context.name, now: now) {
            return self.peerClaim(key, address: address, peer: peer, now: now)
        }
        let unresolved = self.peers(on: context.name).filter { $0.mac == nil }
        if !unresolved.isEmpty, self.pendingClaims.count < PeerRules.maximumPendingClaims {
            self.pendingClaims.append(
                PendingClaim(host: key, address: address, mac: mac, until: now + PeerRules.identifyDelay))
            // Each proxy is asked once per wait, however many claims come in: a flood of claims must not become
            // a flood of requests.
            var requests: [TakeoverAction] = []
            for peer in unresolved {
                guard case .v4(let v4) = peer.address,
                    peer.askedAt.map({ now - $0 >= PeerRules.identifyDelay }) ?? true,
                    let request = self.whoHas(v4, on: context)
                else { continue }
                self.peers[InterfaceAddressKey(interface: context.name, address: peer.address)]?.askedAt = now
                requests.append(request)
            }
            return requests
        }
        return self.conflict(key, address: address, mac: mac, now: now)
    }

    mutating func conflict(_ key: OwnerKey, address: IPAddress, mac: MACAddress, now: Timestamp) -> [TakeoverAction] {
        self.statistics.conflicts += 1
        return self.startWake(key, trigger: .addressConflict(address: address, from: mac), now: now)
    }

    /// Claims that waited for the proxies' MACs, judged now.
    mutating func settlePendingClaims(now: Timestamp) -> [TakeoverAction] {
        var actions: [TakeoverAction] = []
        let due = self.pendingClaims.filter { $0.until <= now }
        self.pendingClaims.removeAll { $0.until <= now }
        for claim in due {
            guard let host = self.hosts[claim.host], host.registered else { continue }
            if let peer = self.peer(mac: claim.mac, on: claim.host.interface, now: now) {
                actions += self.peerClaim(claim.host, address: claim.address, peer: peer, now: now)
            } else {
                actions += self.conflict(claim.host, address: claim.address, mac: claim.mac, now: now)
            }
        }
        return actions
    }

    /// Another proxy answers for a host we hold. Exactly one of us keeps it, by a rule both sides can see on the
    /// wire: a proxy that already answers keeps it against one that does not yet (Apple's proxy wakes the host
    /// on any later claim, so we never claim second), and between two that both answer the better advertised
    /// metric wins (ties: the lower MAC). The other stands by, silently, and takes over when the active one leaves.
    mutating func peerClaim(_ key: OwnerKey, address: IPAddress, peer: ProxyPeer, now: Timestamp) -> [TakeoverAction] {
        guard var host = self.hosts[key], let mac = peer.mac, let index = self.index(of: key.interface),
            let context = self.interfaces[index]
        else { return [] }
        if let by = host.handedOverBy,
            self.peers[InterfaceAddressKey(interface: key.interface, address: by)]?.mac == mac
        {
            return []
        }
        if var standby = host.standby {
            // The active proxy answered a check, or announced again: it is still there.
            standby.misses = 0
            standby.active = mac
            host.standby = standby
            self.hosts[key] = host
            return []
        }
        self.statistics.peerClaims += 1
        let weAnswer = host.isAnswering(address)
        // While we wake the host for someone, we keep it: its client's request is ours to deliver, and the wake
        // ends in a few seconds either way.
        let theyWin =
            host.wake == nil && !weAnswer || host.wake == nil && peer.metric < self.ownMetric
            || (host.wake == nil && peer.metric == self.ownMetric && mac.rawValue < context.macAddress.rawValue)
        guard theyWin else {
            // We keep it: the neighbours are pointed back at us.
            return self.announcementFrames(host, addresses: [address]) + [.peerClaim(key, peer: peer, kept: true)]
        }
        var actions = self.release(&host, now: now)
        host.standby = Standby(active: mac)
        for address in host.addresses {
            guard var state = host.states[address], state.phase != .stopped else { continue }
            state.phase = .waiting
            state.next = now + PeerRules.standbyCheckInterval
            host.states[address] = state
        }
        host.refreshNext()
        self.hosts[key] = host
        actions.append(.peerClaim(key, peer: peer, kept: false))
        return actions
    }

    /// One check of a host stood by for: the active proxy is asked (by an ARP request for the host's address); too
    /// many unanswered in a row and the host is ours, with no wake.
    mutating func standbyCheck(_ host: inout Host, now: Timestamp) -> [TakeoverAction] {
        guard var standby = host.standby, let index = self.index(of: host.key.interface),
            let context = self.interfaces[index]
        else { return [] }
        if standby.misses >= PeerRules.standbyMissedChecks {
            return self.takeOverFromStandby(
                &host, why: "the proxy it stood by for answered none of \(PeerRules.standbyMissedChecks) checks",
                now: now)
        }
        standby.misses += 1
        host.standby = standby
        for address in host.addresses {
            host.states[address]?.next = now + PeerRules.standbyCheckInterval
        }
        host.refreshNext()
        return host.v4.compactMap { self.whoHas($0, on: context) }
    }

    /// The host is ours again: its addresses are claimed at once (announced as after a claim), no wake.
    mutating func takeOverFromStandby(_ host: inout Host, why: String, now: Timestamp) -> [TakeoverAction] {
        guard host.standby != nil, let index = self.index(of: host.key.interface) else { return [] }
        host.standby = nil
        var actions: [TakeoverAction] = [.tookOver(host.key, why: why)]
        var first: IPAddress? = nil
        for address in host.addresses {
            guard var state = host.states[address], state.phase != .stopped else { continue }
            state.phase = .announcing(sent: 0, startedAt: now)
            state.next = now
            state.neighbourInstalled = true
            host.states[address] = state
            actions.append(.setNeighbour(interfaceIndex: index, address: address, mac: host.wakeMAC))
            if first == nil { first = address }
        }
        host.refreshNext()
        if let first { actions.append(.claimed(host.key, address: first)) }
        return actions
    }
}
