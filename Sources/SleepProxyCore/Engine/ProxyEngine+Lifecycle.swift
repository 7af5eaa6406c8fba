import SleepProxyWire

/// Time, quiet checks, admin commands and the one way a registration ends (docs/architecture.md).
extension ProxyEngine {
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
        actions += self.withTakeover(now: now) { $0.tick(now: now, limit: slice ?? TakeoverRules.maximumHostsPerTick) }
        actions += self.runQuietChecks(now: now)
        let store = self.registrar.store
        actions += self.withResponder(now: now) {
            $0.tick(store: store, now: now, limit: slice ?? MDNSRules.maximumAnnouncementsPerTick)
        }
        actions += (self.ssdp?.tick(now: now) ?? []).map(EngineAction.ssdp)
        return actions
    }

    /// Hosts without an address to probe: ask for their host name; silence means asleep.
    private mutating func runQuietChecks(now: Timestamp) -> [EngineAction] {
        var actions: [EngineAction] = []
        for (key, _) in self.quietChecks.takeDue(now: now) {
            guard self.presence[key] != nil else { continue }
            guard let registration = self.registrar.store[key] else {
                self.presence[key] = nil
                continue
            }
            let step = self.transition(registration, now: now) { $0.nameCheckDue(now: now) }
            actions += step
            if step.contains(where: { if case .presence = $0 { true } else { false } }) {
                actions.append(
                    .log(
                        .info,
                        "\(Self.name(registration)) is asleep (it answered none of \(EngineRules.quietProbeCount) questions for its name); the proxy answers for it now"
                    ))
            }
        }
        return actions
    }

    /// A question for the host's name (A and AAAA, multicast): an awake host's responder answers it from one of
    /// its addresses, which `receiveMDNS` notices.
    func quietProbe(_ registration: OwnerRegistration) -> [EngineAction] {
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
    mutating func fellQuiet(_ key: OwnerKey, why: String, note: String, now: Timestamp) -> [EngineAction] {
        guard let registration = self.registrar.store[key] else { return [] }
        let actions = self.transition(registration, now: now) { $0.fellQuiet(note: note) }
        guard !actions.isEmpty else { return [] }
        return [.log(.info, "\(Self.name(registration)) is asleep (\(why)); the proxy answers for it now")] + actions
    }

    // MARK: - Admin

    /// `sleepproxyctl wake`. Afterwards the host's state is `.waking`, unless a recent unanswered wake holds new
    /// ones back (`TakeoverRules.wakeHoldoff`) or the proxy runs without the packet side.
    public mutating func wake(_ key: OwnerKey, trigger: WakeTrigger, now: Timestamp) -> [EngineAction] {
        self.withTakeover(now: now) { $0.wake(key, trigger: trigger, now: now) }
    }

    /// `sleepproxyctl forget`.
    public mutating func forget(_ key: OwnerKey, goodbyes: Bool, now: Timestamp) -> [EngineAction] {
        self.removeHost(key, .forgotten(goodbyes: goodbyes), now: now)
    }

    /// After a failed journal append: the state goes back to what the journal holds. Hosts the batch took away
    /// in memory (a hand-back, a forget) are held again, packet side included; hosts that stayed keep their state.
    public mutating func reload(_ registrations: [OwnerRegistration], now: Timestamp) -> [EngineAction] {
        let before = self.registrar.store.owners
        var registrar = Registrar(configuration: self.registrar.configuration)
        for registration in registrations { registrar.restore(registration) }
        registrar.adoptStatistics(from: self.registrar)
        self.registrar = registrar
        var actions: [EngineAction] = []
        for registration in registrations {
            if self.presence[registration.key] == nil {
                actions += self.startOver(registration, restart: false, now: now)
                actions += self.ssdpRegistered(registration, search: false, now: now)
            } else {
                actions += self.withTakeover(now: now) { $0.registered(registration, now: now) }
            }
        }
        // Hosts the batch had taken away in memory are back above; those the journal does not hold leave by the
        // one way out, as every end of a host does.
        for key in Array(self.presence.keys) where self.registrar.store[key] == nil {
            actions += self.removeHost(key, .reloaded, removed: before[key] ?? Self.placeholder(key), now: now)
        }
        return actions
    }

    /// The daemon stops: the proxy's own records say goodbye (RFC 6762 §10.1); the sleeping hosts' stay for the
    /// next start, and their neighbour entries go.
    public mutating func shutdown() -> [EngineAction] {
        var actions: [EngineAction] = []
        actions += self.withResponder(now: Timestamp(nanoseconds: 0)) { $0.shutdown() }
        actions += self.withTakeover(now: Timestamp(nanoseconds: 0)) { $0.shutdown() }
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
        let presence = self.presence.removeValue(forKey: key)
        self.quietChecks.remove(key)
        let waking = self.takeover?.isWaking(key) ?? false
        let asleep = presence?.state == .asleep || waking
        var actions: [EngineAction] = removal == .reloaded ? [] : [.journal(.remove(key))]
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
            // The history tells the two apart: a person reading a host's day sees why no wake followed.
            actions.append(Self.presence(registration, .gone, asleep ? "lease ended" : "awake at expiry"))
            if asleep {
                wake = action == .wake
                actions.append(
                    .log(.notice, "lease ended for \(name); records dropped with goodbyes; action: \(action.rawValue)"))
            } else {
                // Beyond Apple (docs/protocol.md §5.4 wakes every host whose lease ends): a host known to be awake
                // needs no magic packet, and goodbyes would flush the records it answers for itself.
                let seen =
                    presence?.lastAwake.map { "last seen awake: \($0.what), \(Self.seconds(now - $0.at)) s ago" }
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
        case .reloaded:
            reason = .handBack
            actions.append(Self.presence(registration, .gone, "reloaded"))
            actions.append(.log(.notice, "state: \(name) is not in the journal after a reload; dropped silently"))
        }
        // A host the proxy did not speak for is silenced in the responder, which then sends no goodbyes.
        self.responder?.removed(registration, reason: reason, now: now)
        // SSDP byebyes go with the mDNS goodbyes, never with a hand-back (docs/ssdp.md).
        let byebye = reason == .expired || reason == .administrative
        actions += (self.ssdp?.removed(key, byebye: byebye) ?? []).map(EngineAction.ssdp)
        let takeoverReason: RemovalReason
        switch removal {
        case .released, .forgotten, .transferred: takeoverReason = .administrative
        case .handBack, .expired, .reloaded: takeoverReason = reason
        }
        actions += self.withTakeover(now: now) {
            $0.removed(key, reason: takeoverReason, wake: wake, now: now)
        }
        return actions
    }
}
