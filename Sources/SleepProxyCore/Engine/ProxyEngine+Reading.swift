import SleepProxyWire

/// What the engine shows of itself: the I/O layer builds status, metrics, the admin answers and the files it
/// keeps from these, and never reads the machines inside.
extension ProxyEngine {
    /// Where a host stands (nil when the engine does not hold it).
    public func state(of key: OwnerKey) -> HostState? {
        guard self.registrar.store[key] != nil, let presence = self.presence[key] else { return nil }
        if self.takeover?.isWaking(key) == true { return .waking }
        return presence.state
    }

    /// A restart's hosts are still being spoken for again, a slice a tick (`resumeSpeaking`).
    public var isResuming: Bool { self.resuming != nil }

    /// The latest sign that the host was up, if any was seen in this registration.
    public func lastAwake(of key: OwnerKey) -> AwakeSignal? { self.presence[key]?.lastAwake }

    /// The engine's counts in one value, for the metrics and the admin side: the I/O layer copies this after each
    /// batch instead of reading the machines one by one. Cheap (no pass over the hosts); `hostsByState` is apart
    /// because it is one.
    public var counts: EngineCounts {
        EngineCounts(
            hosts: self.registrar.store.hostCount, records: self.registrar.store.recordCount,
            registrations: self.registrar.statistics, responder: self.responder?.statistics,
            instanceLabel: self.responder?.configuration.instanceLabel, takeover: self.takeover?.statistics,
            wakeDecisions: self.takeover?.gate.statistics, ssdp: self.ssdp?.statistics, handBacks: self.handBacks,
            repeatedQuestions: self.repeatedQuestions.coalesced, windows: self.windows.statistics)
    }

    /// How many hosts are in each state.
    ///
    /// One pass over the hosts' presence, with no lookup per host, then the few waking ones moved: the daemon
    /// publishes this every second, and with four keyed lookups a host it held the engine thread about 4 ms at
    /// 10,000 hosts, long enough to delay the queries that arrived meanwhile (docs/scale.md).
    public var hostsByState: [HostState: Int] {
        var counts = [Int](repeating: 0, count: HostState.allCases.count)
        func slot(_ state: HostState) -> Int { HostState.allCases.firstIndex(of: state)! }
        for presence in self.presence.values { counts[slot(presence.state)] += 1 }
        for key in self.takeover?.wakingHosts ?? [] {
            guard let presence = self.presence[key] else { continue }
            counts[slot(presence.state)] -= 1
            counts[slot(.waking)] += 1
        }
        var result: [HostState: Int] = [:]
        for (index, state) in HostState.allCases.enumerated() where counts[index] > 0 { result[state] = counts[index] }
        return result
    }

    /// The hosts in `state`, in one pass over the hosts' presence (a lookup per host cost 10 ms at 10,000 hosts
    /// for a filtered status page, sleepproxy-bench status).
    public func hosts(in state: HostState) -> Set<OwnerKey> {
        let waking = self.takeover?.wakingHosts ?? []
        // The table alone in the closure: capturing `self` copied the whole engine (a retain per stored table).
        let presence = self.presence
        if state == .waking { return waking.filter { presence[$0] != nil } }
        var keys = Set<OwnerKey>()
        for (key, host) in presence where host.state == state && !waking.contains(key) {
            keys.insert(key)
        }
        return keys
    }

    /// The hosts the proxy speaks for now (asleep or being woken), for the record a clean stop leaves behind. Not
    /// every host it ever spoke for: one that showed itself up on every address since is `awake`, and speaking for
    /// it again after a restart would fight it (docs/coexistence.md).
    /// With the hosts a restart has not yet come to (`resumeSpeaking` speaks for them a slice at a time): a stop or
    /// a crash in those first moments must leave them to the next start as it found them, not probed.
    public var spokenForOrResuming: [OwnerKey] {
        guard let job = self.resuming, job.next < job.keys.count else { return self.spokenFor }
        return Array(Set(self.spokenFor).union(job.keys[job.next...])).sorted()
    }

    public var spokenFor: [OwnerKey] {
        self.registrar.store.owners.keys.filter { key in
            let state = self.state(of: key)
            return state == .asleep || state == .waking
        }.sorted()
    }

    /// Whether the proxy speaks for the host now, by its lifecycle (`HostPresence.speaks`).
    public func isSpokenFor(_ key: OwnerKey) -> Bool { self.presence[key]?.speaks ?? false }

    /// Every held registration, by owner.
    public var registrations: [OwnerKey: OwnerRegistration] { self.registrar.store.owners }

    /// How many hosts are held (cheaper than `registrations.count`'s dictionary access, and the same).
    public var hostCount: Int { self.registrar.store.hostCount }

    /// A held registration.
    public func registration(_ key: OwnerKey) -> OwnerRegistration? { self.registrar.store[key] }

    /// Whether the proxy can wake a host (it runs with the packet side).
    public var canWake: Bool { self.takeover != nil }

    /// Each of the host's addresses with the proxy's state for it; nil without the packet side or for a host it
    /// does not hold.
    public func addressStates(of key: OwnerKey) -> [(IPAddress, AddressState)]? {
        self.takeover?.state(of: key)?.addresses
    }

    /// The other sleep proxies heard on the served interfaces; nil without the packet side.
    public var otherProxies: [ProxyPeer]? {
        guard let takeover = self.takeover else { return nil }
        return self.servedInterfaces.flatMap { takeover.peers(on: $0.name) }
    }

    /// The machines heard on the served links in the last day; nil without the packet side, which alone sees MACs.
    public func neighbours(now: Timestamp) -> [Neighbour]? { self.takeover?.neighbours.neighbours(now: now) }

    /// The other proxies known by their MACs, for the next start to remember (`restorePeers`).
    public var identifiedPeers: [ProxyPeer] { self.takeover?.identifiedPeers ?? [] }

    /// What the host told SSDP it offers; nil without SSDP.
    public func upnpEntries(of key: OwnerKey) -> [SSDPEntry]? { self.ssdp?.entries(of: key) }

    /// SSDP's tables in figures (a pass over the hosts: for status, not for every packet); nil without SSDP.
    public var upnpSummary: UPnPSummary? {
        guard let ssdp = self.ssdp else { return nil }
        return UPnPSummary(
            hosts: ssdp.learnedByHost.count, entries: ssdp.entryCount, unclaimedEntries: ssdp.unclaimedEntryCount,
            responses: ssdp.statistics.responsesSent, announcements: ssdp.statistics.notifiesSent)
    }

    /// What SSDP learned, to keep across a restart, with a number that changes whenever it does; nil without
    /// SSDP.
    public var upnpRevision: Int? { self.ssdp?.revision }
    public var upnpLearned: [OwnerKey: [SSDPEntry]] { self.ssdp?.learnedByHost ?? [:] }

    /// The adopted hosts' MACs, whose frames the capture filter passes whole (docs/adoption.md).
    public var adoptedMACs: [MACAddress] { self.adoption.macs.sorted { $0.rawValue < $1.rawValue } }

    /// The adopted hosts with what the proxy learned of each.
    public var adoptedHosts: [AdoptedHost] {
        self.adoption.hosts.values.sorted { $0.mac.rawValue < $1.mac.rawValue }
    }

    /// The addresses to capture for on an interface (`Takeover.watchList`); nil lists without the packet side.
    public func watchList(interfaceIndex: Int) -> (v4: [IPv4Address]?, v6: [IPv6Address]?)? {
        self.takeover?.watchList(interfaceIndex: interfaceIndex)
    }
}

/// SSDP's tables in figures (`ProxyEngine.upnpSummary`).
public struct UPnPSummary: Hashable, Sendable {
    public var hosts: Int
    public var entries: Int
    public var unclaimedEntries: Int
    public var responses: Int
    public var announcements: Int
}
