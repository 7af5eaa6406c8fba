import SleepProxyWire

/// The whole proxy as one pure state machine: the registrar, the responder and the takeover, and the rules that
/// tie them together. Packets, admin requests and time come in; journal entries, packets to send, wake events
/// and log lines go out as `EngineAction`s. The I/O layer owns no rule: it carries out actions.
///
/// The rules that span the three machines live here, each once:
/// - a host is spoken for (answered, announced, defended) only while it is shown to be asleep, and never while it
///   is awake (docs/coexistence.md);
/// - every way a registration ends goes through `removeHost(_:_:now:)`;
/// - a wake, an expiry and a hand-back tell the truth about what the host did.
public struct ProxyEngine: Sendable {
    public private(set) var registrar: Registrar
    /// Nil runs without the mDNS side (registration only).
    public private(set) var responder: Responder?
    /// Nil runs without the packet side (`--no-takeover`).
    public internal(set) var takeover: Takeover?
    /// Nil runs without SSDP (`--no-ssdp`).
    public private(set) var ssdp: SSDPProxy?
    public private(set) var interfaces: [Int: InterfaceContext] = [:]
    var presence: [OwnerKey: Presence] = [:]
    /// Hosts with an mDNS quiet check under way (no address to probe), due for their next question
    /// (`Presence.quietNext`): a heap, so a pass and `nextDeadline` cost the same with ten such hosts or ten
    /// thousand (the loop asks after every batch of packets).
    var quietChecks = TimerQueue<OwnerKey, Void>()
    /// What the proxy multicast lately, to know the loopback copies (`MulticastEchoes`).
    var echoes = MulticastEchoes()
    /// Hand-backs by what showed the host awake, every one of them (the responder alone saw only Owner options).
    public private(set) var handBacks: [HandBackSignal: Int] = [:]

    struct Presence: Sendable {
        var state: HostState = .starting
        /// The proxy spoke for the host at least once in this registration: mDNS from it now means it woke.
        var takenOver = false
        /// The latest sign that the host is up.
        var lastAwake: AwakeSignal?
        /// mDNS questions for the host's own name, for hosts with no address to probe (`EngineRules`).
        var quietProbes = 0
        var quietNext: Timestamp?
    }

    public init(registrar: Registrar, responder: Responder? = nil, takeover: Takeover? = nil, ssdp: SSDPProxy? = nil) {
        self.registrar = registrar
        self.responder = responder
        self.takeover = takeover
        self.ssdp = ssdp
        // The tables that grow with the hosts are sized for as many as the proxy may hold, so that a storm never
        // stops to rehash them all together (docs/scale.md).
        let hosts = min(registrar.configuration.maximumHosts, EngineRules.reservedHostsLimit)
        self.registrar.reserveCapacity(hosts: hosts, namesPerHost: EngineRules.reservedNamesPerHost)
        self.takeover?.reserveCapacity(hosts: hosts)
        self.ssdp?.reserveCapacity(hosts: hosts)
        self.presence.reserveCapacity(hosts)
        if let label = responder?.configuration.instanceLabel {
            self.takeover?.ownMetric = SleepProxyName.metric(ofLabel: Array(label.utf8))
        }
    }

    // MARK: - Reading

    /// Where a host stands (nil when the engine does not hold it).
    public func state(of key: OwnerKey) -> HostState? {
        guard self.registrar.store[key] != nil, let presence = self.presence[key] else { return nil }
        if self.takeover?.isWaking(key) == true { return .waking }
        return presence.state
    }

    /// The latest sign that the host was up, if any was seen in this registration.
    public func lastAwake(of key: OwnerKey) -> AwakeSignal? { self.presence[key]?.lastAwake }

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
        if state == .waking { return waking.filter { self.presence[$0] != nil } }
        var keys = Set<OwnerKey>()
        for (key, presence) in self.presence where presence.state == state && !waking.contains(key) {
            keys.insert(key)
        }
        return keys
    }

    public mutating func nextDeadline() -> Timestamp? {
        var deadline = self.registrar.nextDeadline()
        for candidate in [
            self.responder?.nextDeadline(), self.takeover?.nextDeadline(), self.ssdp?.nextDeadline(),
            self.quietChecks.nextDeadline(),
        ] {
            if let candidate, deadline == nil || candidate < deadline! { deadline = candidate }
        }
        return deadline
    }

    // MARK: - Start, interfaces, settings

    /// Registrations restored from the journal at start. Nobody knows what the hosts did while the proxy was
    /// stopped, so each starts over as for a new registration: probed, and spoken for once it is quiet.
    public mutating func restore(_ registrations: [OwnerRegistration], now: Timestamp) -> [EngineAction] {
        var actions: [EngineAction] = []
        for registration in registrations {
            self.registrar.restore(registration)
            actions += self.startOver(registration, restart: true, now: now)
            actions += self.ssdpRegistered(registration, search: false, now: now)
        }
        return actions
    }

    /// The hosts the proxy speaks for now (asleep or being woken), for the record a clean stop leaves behind. Not
    /// every host it ever spoke for: one that showed itself up on every address since is `awake`, and speaking for
    /// it again after a restart would fight it (docs/coexistence.md).
    public var spokenFor: [OwnerKey] {
        self.registrar.store.owners.keys.filter { key in
            let state = self.state(of: key)
            return state == .asleep || state == .waking
        }.sorted()
    }

    /// After a clean stop a moment ago (an upgrade, `systemctl restart`): the hosts the proxy was speaking for
    /// then are spoken for again at once, instead of vanishing from browsers for the seconds that probing them
    /// again takes. Beyond Apple, whose proxy forgets everything when it stops (docs/coexistence.md). Their
    /// addresses are answered for at once too (`Takeover.resume`), and any sign of life from one hands it back
    /// silently, as for a host that wakes. Call once the interfaces are set.
    public mutating func resumeSpeaking(for keys: [OwnerKey], stoppedFor: Duration, now: Timestamp) -> [EngineAction] {
        var actions: [EngineAction] = []
        var resumed = 0
        for key in keys {
            guard var presence = self.presence[key], presence.state == .starting,
                let registration = self.registrar.store[key]
            else { continue }
            resumed += 1
            presence.state = .asleep
            presence.takenOver = true
            presence.quietNext = nil
            presence.quietProbes = 0
            self.presence[key] = presence
            self.quietChecks.remove(key)
            self.responder?.speak(for: registration, now: now)
            self.ssdp?.speak(for: key, now: now)
            if self.takeover != nil { actions += self.run(self.takeover!.resume(key, now: now), now: now) }
            actions.append(Self.presence(registration, .asleep, "after a restart"))
            guard keys.count <= EngineRules.resumeLinesLimit else { continue }
            actions.append(
                .log(
                    .info,
                    "\(Self.name(registration)) was asleep when the proxy stopped \(Self.seconds(stoppedFor)) s ago: the proxy answers for it again at once and probes its addresses"
                ))
        }
        if keys.count > EngineRules.resumeLinesLimit {
            actions.append(
                .log(
                    .info,
                    "\(resumed) hosts were asleep when the proxy stopped \(Self.seconds(stoppedFor)) s ago: the proxy answers for them again at once and probes their addresses"
                ))
        }
        return actions
    }

    public mutating func setInterfaces(_ contexts: [InterfaceContext], now: Timestamp) -> [EngineAction] {
        self.interfaces = Dictionary(contexts.map { ($0.index, $0) }, uniquingKeysWith: { first, _ in first })
        var actions: [EngineAction] = []
        if self.takeover != nil { actions += self.run(self.takeover!.setInterfaces(contexts), now: now) }
        if self.responder != nil { actions += self.run(self.responder!.setInterfaces(contexts, now: now), now: now) }
        self.ssdp?.setInterfaces(contexts)
        return actions
    }

    public mutating func reconfigure(
        takeover: TakeoverConfiguration?, expiryAction: RegistrationConfiguration.ExpiryAction,
        refusalReply: RegistrationConfiguration.RefusalReply
    ) {
        if let takeover, self.takeover != nil { self.takeover!.configuration = takeover }
        self.registrar.reconfigure(expiryAction: expiryAction, refusalReply: refusalReply)
    }

    // MARK: - Registrations

    /// One datagram on the registration port, from `source` on a served interface. The outcome carries the reply;
    /// the caller sends it only once the journal entries of the same batch are durable.
    public mutating func receiveRegistration(
        _ bytes: [UInt8], from source: IPAddress, on interface: InterfaceContext, now: Timestamp
    ) -> (outcome: RegistrationOutcome, actions: [EngineAction]) {
        // Another proxy handing a host over sends from its own address, with the host's Owner option.
        let fromPeer = self.takeover?.isPeer(source, on: interface.name) ?? false
        let outcome = self.registrar.handle(datagram: bytes, from: source, on: interface, fromPeer: fromPeer, now: now)
        guard case .accepted(let acceptance) = outcome else { return (outcome, []) }
        let registration = acceptance.registration
        var actions: [EngineAction] = [.journal(.put(registration))]
        // A new registration (not a retransmission, not a further part of the same one) was sent by a host that
        // is therefore awake this moment: Apple's clients register right before sleeping, avahi-based ones often
        // seconds before (docs/coexistence.md). The proxy stays silent until the host is shown to be quiet.
        let isNew =
            acceptance.previous == nil || acceptance.startedNewEpoch
            || acceptance.previous!.lastMessageID != registration.lastMessageID
        if isNew {
            if self.presence[registration.key]?.state == .asleep {
                actions.append(
                    .log(
                        .info,
                        "\(Self.name(registration)) sent a new registration, so it is awake: the proxy stops speaking for it until it is quiet again"
                    ))
            }
            actions += self.startOver(
                registration, restart: acceptance.previous != nil, previous: acceptance.previous, now: now)
            actions.append(Self.presence(registration, .starting, fromPeer ? "handed over" : "registered"))
        } else {
            self.responder?.registered(registration, previous: acceptance.previous, now: now)
            if self.takeover != nil { actions += self.run(self.takeover!.registered(registration, now: now), now: now) }
        }
        if fromPeer { self.takeover?.handedOver(registration.key, by: source) }
        // A new registration comes from a host that is awake: ask it what it advertises over SSDP.
        actions += self.ssdpRegistered(registration, search: isNew, now: now)
        return (outcome, actions)
    }

    /// A host starts from `starting`: silent, its addresses probed (or its name asked for) from a second on.
    private mutating func startOver(
        _ registration: OwnerRegistration, restart: Bool, previous: OwnerRegistration? = nil, now: Timestamp
    ) -> [EngineAction] {
        let key = registration.key
        var presence = Presence()
        let probesAddresses = self.takeover != nil && !registration.addresses.isEmpty
        if !probesAddresses { presence.quietNext = now + EngineRules.quietStartDelay }
        self.presence[key] = presence
        if let next = presence.quietNext {
            self.quietChecks.schedule((), for: key, at: next)
        } else {
            self.quietChecks.remove(key)
        }
        self.responder?.silence(key)
        self.ssdp?.silence(key)
        self.responder?.registered(registration, previous: previous, now: now)
        var actions: [EngineAction] = []
        if self.takeover != nil {
            actions += self.run(self.takeover!.registered(registration, restart: restart, now: now), now: now)
        }
        return actions
    }

    // MARK: - mDNS

    /// One mDNS packet received on a served interface.
    public mutating func receiveMDNS(
        _ bytes: [UInt8], from source: IPAddress, port: UInt16, destination: IPAddress?, interfaceIndex: Int,
        now: Timestamp
    ) -> [EngineAction] {
        var actions: [EngineAction] = []
        if let context = self.interfaces[interfaceIndex] {
            // Our own multicast, looped back: nothing in it can be news (`MulticastEchoes`).
            if port == MDNSRules.port, context.isOwnAddress(source), self.echoes.isEcho(bytes, now: now) {
                return []
            }
            // The host's own responder speaking, from one of its addresses: it is up (docs/coexistence.md). Before
            // the responder sees the packet, so that a host handed back here is not answered or defended by it.
            if let key = self.registrar.store.owner(claiming: source, on: context.name) {
                actions += self.ownerSpoke(key, AwakeSignal(what: "mDNS from \(source)", at: now), .mdns, now: now)
            } else if let key = self.takeover?.host(owning: source, interface: context.name) {
                // Only a wake sequence is left of it (its lease ended): the wake ends as a success.
                actions += self.run(self.takeover!.ownerActive(key, now: now), now: now)
            }
        }
        guard self.responder != nil else { return actions }
        let store = self.registrar.store
        let responderActions = self.responder!.receive(
            bytes, from: source, port: port, destination: destination, interfaceIndex: interfaceIndex, store: store,
            now: now)
        return actions + self.run(responderActions, now: now)
    }

    /// A sign that the host is up. Before the proxy ever spoke for it, the takeover waits (the host is still
    /// going to sleep); once the proxy spoke for it, the host woke: it gets everything back silently, as for an
    /// Owner option with a new sequence. Beyond Apple, which ignores same-sequence traffic for 60 s and knows no
    /// other sign (docs/protocol.md §5.1): a host that never sends an Owner option would otherwise be renamed by
    /// the proxy's defence of its own names.
    mutating func ownerSpoke(_ key: OwnerKey, _ signal: AwakeSignal, _ kind: HandBackSignal, now: Timestamp)
        -> [EngineAction]
    {
        guard var presence = self.presence[key], let registration = self.registrar.store[key] else { return [] }
        let first = presence.lastAwake == nil
        presence.lastAwake = signal
        if presence.takenOver {
            self.presence[key] = presence
            return self.removeHost(key, .handBack(why: signal.what, signal: kind), now: now)
        }
        if presence.quietNext != nil {
            presence.quietProbes = 0
            presence.quietNext = max(presence.quietNext!, now + EngineRules.quietProbeInterval)
            self.quietChecks.schedule((), for: key, at: presence.quietNext!)
        }
        self.presence[key] = presence
        var actions: [EngineAction] = []
        if first {
            actions.append(
                .log(
                    .info,
                    "\(Self.name(registration)) is still awake (\(signal.what)); the proxy waits for it to go quiet"))
        }
        if self.takeover != nil { actions += self.run(self.takeover!.ownerActive(key, now: now), now: now) }
        return actions
    }

    // MARK: - SSDP

    /// One SSDP datagram received on a served interface (docs/ssdp.md).
    public mutating func receiveSSDP(
        _ bytes: [UInt8], from source: IPAddress, port: UInt16, destination: IPAddress?, interfaceIndex: Int,
        now: Timestamp
    ) -> [EngineAction] {
        guard self.ssdp != nil, let context = self.interfaces[interfaceIndex] else { return [] }
        var actions: [EngineAction] = []
        // Beyond Apple: a host's own SSDP (an announcement when its media server starts on resume, a search by its
        // control point) is a sign that it is up, as its mDNS is (docs/coexistence.md).
        if let key = self.registrar.store.owner(claiming: source, on: context.name) {
            actions += self.ownerSpoke(key, AwakeSignal(what: "SSDP from \(source)", at: now), .ssdp, now: now)
        } else if let key = self.takeover?.host(owning: source, interface: context.name) {
            actions += self.run(self.takeover!.ownerActive(key, now: now), now: now)
        }
        // After a hand-back the host is no longer held: what it says is kept for its next registration.
        let owner = self.registrar.store.owner(claiming: source, on: context.name)
        actions += self.ssdp!.receive(
            bytes, from: source, port: port, destination: destination, interfaceIndex: interfaceIndex, owner: owner,
            now: now
        ).map(EngineAction.ssdp)
        if let owner { self.syncWakePorts(owner) }
        return actions
    }

    /// What SSDP knew of restored hosts before a restart (`SSDPProxy.learnedByHost`); hosts not held are skipped.
    public mutating func restoreSSDP(_ learned: [OwnerKey: [SSDPEntry]]) {
        guard self.ssdp != nil else { return }
        for (key, entries) in learned where self.registrar.store[key] != nil {
            self.ssdp!.restore(entries, for: key)
            self.syncWakePorts(key)
        }
    }

    /// SSDP learns the host's addresses (and what was heard from them before), and with `search` asks it.
    private mutating func ssdpRegistered(_ registration: OwnerRegistration, search: Bool, now: Timestamp)
        -> [EngineAction]
    {
        guard self.ssdp != nil else { return [] }
        let searches = self.ssdp!.registered(
            registration.key, addresses: registration.addresses, search: search, now: now)
        self.syncWakePorts(registration.key)
        return searches.map(EngineAction.ssdp)
    }

    /// The TCP ports of a host's UPnP description URLs wake it, as its registered services do (docs/ssdp.md).
    private mutating func syncWakePorts(_ key: OwnerKey) {
        guard let ssdp = self.ssdp, self.takeover != nil else { return }
        self.takeover!.setOtherWakePorts(Set(ssdp.wakePorts(of: key).map { WakePolicy.Port(.tcp, $0) }), for: key)
    }

    // MARK: - Frames

    /// One frame captured on a served interface (`outgoing`: sent by the proxy machine itself).
    public mutating func receiveFrame(_ bytes: [UInt8], interfaceIndex: Int, outgoing: Bool, now: Timestamp)
        -> [EngineAction]
    {
        guard self.takeover != nil else { return [] }
        return self.run(
            self.takeover!.receive(frame: bytes, interfaceIndex: interfaceIndex, outgoing: outgoing, now: now), now: now
        )
    }

    // MARK: - Time

    /// Everything due at `now`: lease expiry, takeover steps, quiet checks, mDNS timers. Of the takeover's hosts
    /// and of the responder's announcements and goodbyes, `slice` each at most: the rest stay due (`nextDeadline`
    /// says so), so that a caller can answer the queries that came meanwhile before it asks for the next slice.
    public mutating func tick(now: Timestamp, slice: Int? = nil) -> [EngineAction] {
        var actions: [EngineAction] = []
        for expiry in self.registrar.expire(now: now) {
            actions += self.removeHost(
                expiry.registration.key, .expired(expiry.action), removed: expiry.registration, now: now)
        }
        if self.takeover != nil {
            actions += self.run(
                self.takeover!.tick(now: now, limit: slice ?? TakeoverRules.maximumHostsPerTick), now: now)
        }
        actions += self.runQuietChecks(now: now)
        if self.responder != nil {
            let store = self.registrar.store
            actions += self.run(
                self.responder!.tick(store: store, now: now, limit: slice ?? MDNSRules.maximumAnnouncementsPerTick),
                now: now)
        }
        if self.ssdp != nil { actions += self.ssdp!.tick(now: now).map(EngineAction.ssdp) }
        return actions
    }

    /// Hosts without an address to probe: ask for their host name; silence means asleep.
    private mutating func runQuietChecks(now: Timestamp) -> [EngineAction] {
        var actions: [EngineAction] = []
        for (key, _) in self.quietChecks.takeDue(now: now) {
            guard let presence = self.presence[key], let next = presence.quietNext else { continue }
            guard next <= now else {
                self.quietChecks.schedule((), for: key, at: next)
                continue
            }
            guard let registration = self.registrar.store[key] else {
                self.presence[key] = nil
                continue
            }
            var updated = presence
            if updated.quietProbes < EngineRules.quietProbeCount {
                updated.quietProbes += 1
                updated.quietNext = now + EngineRules.quietProbeInterval
                self.quietChecks.schedule((), for: key, at: now + EngineRules.quietProbeInterval)
                let probe = self.quietProbe(registration)
                for case .transmit(let transmission) in probe { self.echoes.remember(transmission.bytes, now: now) }
                actions += probe
                self.presence[key] = updated
            } else {
                updated.quietNext = nil
                self.presence[key] = updated
                actions += self.fellQuiet(
                    key, why: "it answered none of \(EngineRules.quietProbeCount) questions for its name",
                    note: "no name answer", now: now)
            }
        }
        return actions
    }

    /// A question for the host's name (A and AAAA, multicast): an awake host's responder answers it from one of
    /// its addresses, which `receiveMDNS` notices.
    private func quietProbe(_ registration: OwnerRegistration) -> [EngineAction] {
        guard let name = registration.hostName,
            let context = self.interfaces.values.first(where: { $0.name == registration.key.interface })
        else { return [] }
        let query = DNSMessage(questions: [DNSQuestion(name: name, type: .a), DNSQuestion(name: name, type: .aaaa)])
        let bytes = query.encoded(options: .mdns)
        return Responder.families(of: context).map { family in
            .transmit(
                MDNSTransmission(
                    destination: .multicast(interfaceIndex: context.index, family: family), message: query, bytes: bytes
                ))
        }
    }

    /// The host was shown to be asleep: the proxy speaks for it from now on.
    private mutating func fellQuiet(_ key: OwnerKey, why: String, note: String, now: Timestamp) -> [EngineAction] {
        guard var presence = self.presence[key], let registration = self.registrar.store[key], presence.state != .asleep
        else { return [] }
        presence.state = .asleep
        presence.takenOver = true
        presence.quietNext = nil
        self.presence[key] = presence
        self.quietChecks.remove(key)
        self.responder?.speak(for: registration, now: now)
        self.ssdp?.speak(for: key, now: now)
        return [
            .log(.info, "\(Self.name(registration)) is asleep (\(why)); the proxy answers for it now"),
            Self.presence(registration, .asleep, note),
        ]
    }

    // MARK: - Admin

    /// `sleepproxyctl wake`: false when a recent unanswered wake holds new ones back.
    public mutating func wake(_ key: OwnerKey, trigger: WakeTrigger, now: Timestamp) -> (
        started: Bool, actions: [EngineAction]
    ) {
        guard self.takeover != nil else { return (false, []) }
        let actions = self.run(self.takeover!.wake(key, trigger: trigger, now: now), now: now)
        return (self.takeover!.state(of: key)?.waking ?? false, actions)
    }

    /// `sleepproxyctl forget`.
    public mutating func forget(_ key: OwnerKey, goodbyes: Bool, now: Timestamp) -> [EngineAction] {
        self.removeHost(key, .forgotten(goodbyes: goodbyes), now: now)
    }

    /// After a failed journal append: the state goes back to what the journal holds. Hosts the batch took away
    /// in memory (a hand-back, a forget) are held again, packet side included; hosts that stayed keep their state.
    public mutating func reload(_ registrations: [OwnerRegistration], now: Timestamp) -> [EngineAction] {
        var registrar = Registrar(configuration: self.registrar.configuration)
        for registration in registrations { registrar.restore(registration) }
        registrar.adoptStatistics(from: self.registrar)
        self.registrar = registrar
        var actions: [EngineAction] = []
        for registration in registrations {
            if self.presence[registration.key] == nil {
                actions += self.startOver(registration, restart: false, now: now)
                actions += self.ssdpRegistered(registration, search: false, now: now)
            } else if self.takeover != nil {
                actions += self.run(self.takeover!.registered(registration, now: now), now: now)
            }
        }
        for key in self.presence.keys where self.registrar.store[key] == nil {
            self.presence[key] = nil
            actions.append(
                .presence(
                    PresenceChange(host: key, hostName: nil, phase: .gone, why: "reloaded")))
            self.quietChecks.remove(key)
            self.responder?.removed(Self.placeholder(key), reason: .handBack, now: now)
            _ = self.ssdp?.removed(key, byebye: false)
            if self.takeover != nil {
                actions += self.run(self.takeover!.removed(key, reason: .handBack, wake: false, now: now), now: now)
            }
        }
        return actions
    }

    /// The daemon stops: the proxy's own records say goodbye (RFC 6762 §10.1); the sleeping hosts' stay for the
    /// next start, and their neighbour entries go.
    public mutating func shutdown() -> [EngineAction] {
        var actions: [EngineAction] = []
        if self.responder != nil { actions += self.run(self.responder!.shutdown(), now: Timestamp(nanoseconds: 0)) }
        if self.takeover != nil { actions += self.run(self.takeover!.shutdown(), now: Timestamp(nanoseconds: 0)) }
        return actions
    }

    // MARK: - The one way out

    /// Ends a host's registration: the store, the journal, the responder (goodbyes only for records the proxy
    /// was speaking for, and not for a hand-back) and the packet side (a wake only for a host that sleeps).
    /// `removed` is the registration when the registrar already let it go (expiry).
    @discardableResult
    mutating func removeHost(_ key: OwnerKey, _ removal: HostRemoval, removed: OwnerRegistration? = nil, now: Timestamp)
        -> [EngineAction]
    {
        guard let registration = removed ?? self.registrar.remove(key) else { return [] }
        let presence = self.presence.removeValue(forKey: key) ?? Presence()
        self.quietChecks.remove(key)
        let waking = self.takeover?.isWaking(key) ?? false
        let asleep = presence.state == .asleep || waking
        var actions: [EngineAction] = [.journal(.remove(key))]
        let name = Self.name(registration)
        let reason: RemovalReason
        var wake = false
        switch removal {
        case .handBack(let why, let signal):
            reason = .handBack
            self.handBacks[signal, default: 0] += 1
            actions.append(Self.presence(registration, .handedBack, signal.rawValue))
            actions.append(
                .log(
                    .notice,
                    "hand-back: \(name) is awake (\(why)); its records were dropped silently and its addresses released"
                ))
        case .expired(let action):
            reason = .expired
            actions.append(Self.presence(registration, .gone, "lease ended"))
            if asleep {
                wake = action == .wake
                actions.append(
                    .log(.notice, "lease ended for \(name); records dropped with goodbyes; action: \(action.rawValue)"))
            } else {
                // Beyond Apple (docs/protocol.md §5.4 wakes every host whose lease ends): a host known to be awake
                // needs no magic packet, and goodbyes would flush the records it answers for itself.
                let seen =
                    presence.lastAwake.map { "last seen awake: \($0.what), \(Self.seconds(now - $0.at)) s ago" }
                    ?? "it never went quiet"
                actions.append(
                    .log(
                        .notice,
                        "lease ended for \(name) while it was awake (\(seen)); its records were dropped without goodbyes or magic packets"
                    ))
            }
        case .forgotten(let goodbyes):
            reason = goodbyes ? .administrative : .administrativeSilent
            let said =
                goodbyes
                ? (asleep ? " with goodbyes" : " (no goodbyes: it is awake and answers for itself)") : ", silently"
            actions.append(.log(.notice, "admin: forgot \(name)\(said)"))
            actions.append(Self.presence(registration, .gone, "forgotten"))
        case .released:
            reason = .administrativeSilent
            actions.append(Self.presence(registration, .gone, "released"))
        case .transferred(let peer):
            reason = .administrativeSilent
            actions.append(Self.presence(registration, .gone, "transferred"))
            actions.append(.log(.notice, "admin: transferred \(name) to \(peer); dropped silently, no wake"))
        }
        // A host the proxy did not speak for is silenced in the responder, which then sends no goodbyes.
        self.responder?.removed(registration, reason: reason, now: now)
        // SSDP byebyes go with the mDNS goodbyes, never with a hand-back (docs/ssdp.md).
        if self.ssdp != nil {
            let byebye = reason == .expired || reason == .administrative
            actions += self.ssdp!.removed(key, byebye: byebye).map(EngineAction.ssdp)
        }
        if self.takeover != nil {
            let takeoverReason: RemovalReason
            switch removal {
            case .released, .forgotten, .transferred: takeoverReason = .administrative
            case .handBack, .expired: takeoverReason = reason
            }
            actions += self.run(self.takeover!.removed(key, reason: takeoverReason, wake: wake, now: now), now: now)
        }
        return actions
    }

    // MARK: - Carrying out the machines' decisions

    mutating func run(_ actions: [ResponderAction], now: Timestamp) -> [EngineAction] {
        var result: [EngineAction] = []
        for action in actions {
            switch action {
            case .transmit(let transmission):
                if case .multicast = transmission.destination { self.echoes.remember(transmission.bytes, now: now) }
                result.append(.transmit(transmission))
            case .handBack(let key, let sequence):
                result += self.removeHost(
                    key, .handBack(why: "Owner option with sequence \(sequence)", signal: .ownerOption), now: now)
            case .ownerProbing(let key):
                result += self.ownerSpoke(
                    key, AwakeSignal(what: "it probed its own names over mDNS", at: now), .ownNameProbe, now: now)
            case .conflict(let key, let record, let source):
                guard let registration = self.registrar.store[key] else { continue }
                result.append(
                    .log(
                        .warning,
                        "conflict: \(source) answers \(record.name) \(record.type) differently from sleeping host \(Self.name(registration)); waking the owner to defend it"
                    ))
                if self.takeover != nil {
                    result += self.run(
                        self.takeover!.wake(key, trigger: .mdnsConflict(name: record.name, from: source), now: now),
                        now: now)
                }
            case .resolved(let key, let source):
                self.takeover?.noteResolve(by: source, of: key, now: now)
            case .proxyAdvertised(let label, let port, let ttl, let source, let interfaceIndex):
                if self.takeover != nil {
                    result += self.run(
                        self.takeover!.peerAdvertised(
                            label: label, port: port, ttl: ttl, from: source, interfaceIndex: interfaceIndex, now: now),
                        now: now)
                }
            case .renamed(let instance, let host):
                result.append(
                    .log(.notice, "mdns: name conflict; now advertising \"\(instance)\" on host name \(host).local"))
            }
        }
        return result
    }

    mutating func run(_ actions: [TakeoverAction], now: Timestamp) -> [EngineAction] {
        var result: [EngineAction] = []
        for action in actions {
            switch action {
            case .sendFrame, .sendWakeDatagram, .setNeighbour, .removeNeighbour, .watchChanged:
                result.append(.packet(action))
            case .unicastQuery(let query):
                result += self.answer(query, now: now)
            case .peerClaim(let key, let peer, let kept):
                guard let registration = self.registrar.store[key], var presence = self.presence[key] else { continue }
                if kept {
                    result.append(
                        .log(
                            .info,
                            "peers: \(peer) also answers for \(Self.name(registration)); this proxy keeps it (it answered first or advertises the better metric), the other stands by; no wake"
                        ))
                    continue
                }
                presence.state = .standby
                self.presence[key] = presence
                self.responder?.silence(key)
                self.ssdp?.silence(key)
                result.append(Self.presence(registration, .standby, "other proxy"))
                result.append(
                    .log(
                        .notice,
                        "peers: \(peer) answers for \(Self.name(registration)); this proxy stands by for it (no wake) and takes over if that proxy leaves"
                    ))
            case .tookOver(let key, let why):
                guard let registration = self.registrar.store[key] else { continue }
                result.append(
                    .log(.notice, "peers: taking \(Self.name(registration)) over from standby (\(why)); no wake"))
            case .event(let event):
                result.append(.wakeEvent(event))
                // Declines are information (collapsed by the gate: one line per scanner and per declined source);
                // wakes and their outcomes are what a user looks for.
                let quiet = event.kind == .ignored || event.kind == .declined
                result.append(.log(quiet ? .info : .notice, "wake: \(event.summary)"))
            case .claimed(let key, let address):
                guard let registration = self.registrar.store[key] else { continue }
                result.append(
                    .log(
                        .info,
                        "takeover: claimed \(address) for \(Self.name(registration)) (its probes went unanswered)"))
                result += self.fellQuiet(
                    key, why: "\(address) did not answer its probes", note: "no probe answer", now: now)
            case .ownerSeen(let key, let address, let signal, let wasAnswering):
                guard let registration = self.registrar.store[key], var presence = self.presence[key] else { continue }
                let first = presence.lastAwake == nil
                presence.lastAwake = AwakeSignal(what: "\(signal) for \(address)", at: now)
                self.presence[key] = presence
                if wasAnswering {
                    result.append(
                        .log(
                            .info,
                            "takeover: \(Self.name(registration)) answers for \(address) itself (\(signal)); that address is left to it and probed again later"
                        ))
                } else if first {
                    result.append(
                        .log(
                            .info,
                            "takeover: \(Self.name(registration)) is still awake on \(address) (\(signal)); probing again later"
                        ))
                }
                // Answering on another address keeps the host asleep (per-address takeover, docs/protocol.md §5.2);
                // answering on none means the host is up everywhere: silent until it is quiet again.
                if presence.state == .asleep, self.takeover?.isAnsweringAny(key) == false {
                    presence.state = .awake
                    self.presence[key] = presence
                    self.responder?.silence(key)
                    self.ssdp?.silence(key)
                    result.append(Self.presence(registration, .awake, "answers itself"))
                    result.append(
                        .log(
                            .info,
                            "\(Self.name(registration)) is awake on every address; the proxy stopped speaking for it and keeps its records"
                        ))
                }
            }
        }
        return result
    }

    /// An mDNS question sent to a sleeping host's own address: the responder answers it as one sent to the
    /// proxy's (RFC 6762 §5.5 and §6.7: by unicast), and the answer leaves as a frame from the host's address
    /// and port 5353, which is where the querier expects it (dig and pyatv drop answers from other addresses).
    private mutating func answer(_ query: UnicastQuery, now: Timestamp) -> [EngineAction] {
        guard self.responder != nil, let context = self.interfaces[query.interfaceIndex] else { return [] }
        let store = self.registrar.store
        var others: [ResponderAction] = []
        var result: [EngineAction] = []
        for action in self.responder!.receive(
            query.payload, from: query.source, port: query.sourcePort, destination: query.destination,
            interfaceIndex: query.interfaceIndex, store: store, now: now)
        {
            guard case .transmit(let transmission) = action,
                case .unicast(let address, let port, _) = transmission.destination, address == query.source,
                port == query.sourcePort,
                let frame = Takeover.datagramFrame(
                    from: query.destination, port: MDNSRules.port, to: query.source, port: query.sourcePort,
                    mac: query.sourceMAC, payload: transmission.bytes, context: context)
            else {
                others.append(action)
                continue
            }
            result.append(.packet(.sendFrame(frame, interfaceIndex: context.index)))
        }
        return result + self.run(others, now: now)
    }

    // MARK: - Helpers

    static func name(_ registration: OwnerRegistration) -> String {
        "\(registration.hostName?.description ?? "?") (\(registration.key))"
    }

    static func seconds(_ duration: Duration) -> Int64 { duration.components.seconds }

    /// A host entered `phase`: for its history (docs/status-page.md).
    static func presence(_ registration: OwnerRegistration, _ phase: PresenceChange.Phase, _ why: String)
        -> EngineAction
    {
        .presence(
            PresenceChange(
                host: registration.key, hostName: registration.hostName?.description, phase: phase, why: why))
    }

    /// A stand-in carrying only the key, for telling the responder to forget a host it may still have queued.
    static func placeholder(_ key: OwnerKey) -> OwnerRegistration {
        OwnerRegistration(
            key: key, owner: OwnerOption(sequence: 0, primaryMAC: key.primaryMAC), records: [],
            registeredAt: Timestamp(nanoseconds: 0),
            updatedAt: Timestamp(nanoseconds: 0), leaseExpiry: Timestamp(nanoseconds: 0), grantedLease: 0,
            lastMessageID: 0)
    }
}
