import SleepProxyWire

/// Time, quiet checks, admin commands and the one way a registration ends (docs/architecture.md).
extension ProxyEngine {
    // MARK: - Time

    /// Everything due at `now`: lease expiry, takeover steps, quiet checks, mDNS timers. Of the takeover's hosts
    /// and of the responder's announcements and goodbyes, `slice` each at most: the rest stay due (`nextDeadline`
    /// says so), so that a caller can answer the queries that came meanwhile before it asks for the next slice.
    /// The I/O layer handed the mDNS it was given to the sockets at `time`: the one-second limit of RFC 6762 §6.2
    /// counts from then, not from the pass's time (`Responder.multicastSent(at:)`).
    public mutating func multicastSent(at time: Timestamp) {
        self.responder?.multicastSent(at: time)
    }

    public mutating func tick(now: Timestamp, slice: Int? = nil) -> [EngineAction] {
        var actions = self.resumeSlice(now: now)
        for expiry in self.registrar.expire(now: now) {
            actions += self.removeHost(
                expiry.registration.key, .expired(expiry.action), removed: expiry.registration, now: now)
        }
        actions += self.withTakeover(now: now) { $0.tick(now: now, limit: slice ?? TakeoverRules.maximumHostsPerTick) }
        actions += self.runQuietChecks(now: now)
        actions += self.runAdoption(now: now)
        let store = self.registrar.store
        actions += self.withResponder(now: now) {
            $0.tick(store: store, now: now, limit: slice ?? MDNSRules.maximumAnnouncementsPerTick)
        }
        actions += (self.ssdp?.tick(now: now) ?? []).map(EngineAction.ssdp)
        actions += self.windows.takeDue(now: now).map {
            .packet(.sendFrame($0.frame, interfaceIndex: $0.interfaceIndex))
        }
        return actions
    }

    /// Hosts without an address to probe: ask for their host name; silence means asleep.
    private mutating func runQuietChecks(now: Timestamp) -> [EngineAction] {
        var actions: [EngineAction] = []
        for (key, _) in self.quietChecks.takeDue(now: now) {
            // A check outlives its host only if the host left by a way that forgot to cancel it: every end goes
            // through `removeHost`, whose ending cancels the check, so there is nothing to drop here.
            guard let registration = self.registrar.store[key] else { continue }
            actions += self.transition(registration, now: now) { $0.nameCheckDue(now: now) }
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
                actions += self.enter(registration, .reloaded, now: now)
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

    /// Ends a host's registration: the store, then its presence's last transition (`HostPresence.end`), whose
    /// ending says what the journal, the responder, SSDP and the takeover do. `removed` is the registration when
    /// the registrar already let it go (expiry).
    @discardableResult
    mutating func removeHost(_ key: OwnerKey, _ removal: HostRemoval, removed: OwnerRegistration? = nil, now: Timestamp)
        -> [EngineAction]
    {
        guard let registration = removed ?? self.registrar.remove(key) else { return [] }
        let presence = self.presence.removeValue(forKey: key)
        if case .handBack(_, let signal) = removal { self.handBacks[signal, default: 0] += 1 }
        let waking = self.takeover?.isWaking(key) ?? false
        let transition = HostPresence.end(presence, removal, waking: waking, now: now)
        // An adopted host is watched again: it sleeps next time it goes quiet.
        if registration.isAdopted { self.adoption.released(key.primaryMAC, now: now) }
        return self.carryOut(transition, for: registration, now: now)
    }

    // MARK: - Log lines

    /// The log lines said of a held host: these two functions write every one, from a note (`HostPresence.Note`)
    /// or from an event of its history, and nothing else in the engine does.
    static func line(for note: HostPresence.Note, _ registration: OwnerRegistration) -> EngineAction {
        let name = Self.name(registration)
        switch note {
        case .stillAwake(let what):
            return .log(.info, "\(name) is still awake (\(what)); the proxy waits for it to go quiet")
        case .answersItself(let what):
            return .log(
                .info,
                "takeover: \(name) answers itself (\(what)); that address is left to it and probed again later")
        case .claimed(let address):
            return .log(.info, "takeover: claimed \(address) for \(name) (its probes went unanswered)")
        case .keptFromPeer(let peer):
            return .log(
                .info,
                "peers: \(peer) also answers for \(name); this proxy keeps it (it answered first or advertises the better metric), the other stands by; no wake"
            )
        case .tookOverFromStandby(let why):
            return .log(.notice, "peers: taking \(name) over from standby (\(why)); no wake")
        case .mdnsConflict(let source, let record):
            return .log(
                .warning,
                "conflict: \(source) answers \(record) differently from sleeping host \(name); waking the owner to defend it"
            )
        case .netbiosConflict(let asker, let netbiosName):
            return .log(
                .warning,
                "conflict: \(asker) registers the NetBIOS name \(netbiosName) of sleeping host \(name); defended, and waking the owner to defend it"
            )
        case .adoptionRefused(let maximumHosts, let maximumRecords):
            return .log(
                .warning,
                "adopt: \(name) is quiet, but the proxy holds as many hosts or records as max-hosts (\(maximumHosts)) and max-records (\(maximumRecords)) allow; it is not answered for"
            )
        }
    }

    static func line(for event: HostPresence.Event, from: HostState?, _ registration: OwnerRegistration)
        -> EngineAction?
    {
        // Built only for the cases that say something: a registration storm enters thousands of hosts into
        // `starting`, which says nothing, and naming each of them was 2 % of the engine's time in it.
        var name: String { Self.name(registration) }
        var detail: String { event.detail ?? "?" }
        switch (event.state, event.reason) {
        case (.starting, _):
            guard from == .asleep else { return nil }  // the registration's own line says the rest
            return .log(
                .info,
                "\(name) sent a new registration, so it is awake: the proxy stops speaking for it until it is quiet again"
            )
        case (.asleep, .noProbeAnswer):
            return .log(.info, "\(name) is asleep (\(detail) did not answer its probes); the proxy answers for it now")
        case (.asleep, .noNameAnswer) where registration.isAdopted:
            return .log(
                .info,
                "\(name) is asleep (adopted: it answered none of \(AdoptionRules.checkQuestions) questions for its name); the proxy answers for it now"
            )
        case (.asleep, .noNameAnswer):
            return .log(
                .info,
                "\(name) is asleep (it answered none of \(EngineRules.quietProbeCount) questions for its name); the proxy answers for it now"
            )
        case (.asleep, .afterRestart):
            return .log(
                .info,
                "\(name) was asleep when the proxy stopped \(detail) s ago: the proxy answers for it again at once and probes its addresses"
            )
        case (.asleep, _):
            return .log(.info, "\(name) is asleep (\(event.reason.rawValue)); the proxy answers for it now")
        case (.awake, _):
            return .log(
                .info, "\(name) is awake on every address; the proxy stopped speaking for it and keeps its records")
        case (.standby, _):
            return .log(
                .notice,
                "peers: \(detail) answers for \(name); this proxy stands by for it (no wake) and takes over if that proxy leaves"
            )
        case (.handedBack, _):
            return .log(
                .notice,
                "hand-back: \(name) is awake (\(detail)); its records were dropped silently and its addresses released")
        case (.gone, .leaseEnded):
            return .log(.notice, "lease ended for \(name); records dropped with goodbyes; action: \(detail)")
        case (.gone, .awakeAtExpiry):
            return .log(
                .notice,
                "lease ended for \(name) while it was awake (\(detail)); its records were dropped without goodbyes or magic packets"
            )
        case (.gone, .forgotten):
            return .log(.notice, "admin: forgot \(name) (\(detail))")
        case (.gone, .transferred):
            return .log(.notice, "admin: transferred \(name) to \(detail); dropped silently, no wake")
        case (.gone, .offOrAway):
            return .log(
                .notice,
                "\(name) is off or away (\(detail)): the proxy stopped answering for it, with goodbyes, until it is seen again"
            )
        case (.gone, .reloaded):
            return .log(.notice, "state: \(name) is not in the journal after a reload; dropped silently")
        case (.gone, _), (.waking, _):
            // A release is counted in release-all's own line; `waking` is the takeover's, never an event.
            return nil
        }
    }
}
