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
    public internal(set) var registrar: Registrar
    /// Nil runs without the mDNS side (registration only).
    public internal(set) var responder: Responder?
    /// Nil runs without the packet side (`--no-takeover`).
    public internal(set) var takeover: Takeover?
    /// Nil runs without SSDP (`--no-ssdp`).
    public internal(set) var ssdp: SSDPProxy?
    public private(set) var interfaces: [Int: InterfaceContext] = [:]
    /// The served interfaces in the kernel's order, as `interfacesListed` chose them.
    public private(set) var servedInterfaces: [InterfaceContext] = []
    /// Each held host's lifecycle (docs/host-lifecycle.md): changed only through its transitions, whose orders
    /// `carryOut` executes.
    var presence: [OwnerKey: HostPresence] = [:]
    /// Hosts with an mDNS quiet check under way (no address to probe), due for their next question
    /// (`HostPresence.NameProbes`): a heap, so a pass and `nextDeadline` cost the same with ten such hosts or ten
    /// thousand (the loop asks after every batch of packets).
    var quietChecks = TimerQueue<OwnerKey, Void>()
    /// What the proxy multicast lately, to know the loopback copies (`MulticastEchoes`).
    var echoes = MulticastEchoes()
    /// A storming device's repeated questions, dropped before they are decoded (docs/busy-lan.md).
    var repeatedQuestions = RepeatedQuestions()
    /// Lines the network can cause, bounded (`LineBudget`; `outcomeLines`).
    var lineBudget = LineBudget()
    /// Whether each accepted registration gets a log line (the daemon's log level shows notices); deriving it
    /// costs as much as the registration.
    public var logsRegistrations = true
    /// Hand-backs by what showed the host awake, every one of them (the responder alone saw only Owner options).
    public internal(set) var handBacks: [HandBackSignal: Int] = [:]
    /// A restart's hosts still to speak for again, a slice a tick (`resumeSpeaking`).
    var resuming: Resuming?
    /// The hosts a person adopted by MAC (docs/adoption.md) and what their frames taught.
    public internal(set) var adoption = Adoption()
    /// Sleeping Windows PCs' names, answered over NetBIOS and LLMNR (docs/windows.md).
    public internal(set) var windows = WindowsNames()
    /// The Owner sequence of the next adopted host held: each hold is a new sleep for the takeover.
    var adoptionSequence: UInt8 = 0

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

    /// Asked twice for every batch, so without an array of the candidates: on a busy LAN the allocation of one
    /// was a visible part of an ordinary frame's cost (docs/busy-lan.md).
    public mutating func nextDeadline() -> Timestamp? {
        var deadline = self.registrar.nextDeadline()
        Timestamp.keepEarlier(self.responder?.nextDeadline(), in: &deadline)
        Timestamp.keepEarlier(self.takeover?.nextDeadline(), in: &deadline)
        Timestamp.keepEarlier(self.ssdp?.nextDeadline(), in: &deadline)
        Timestamp.keepEarlier(self.quietChecks.nextDeadline(), in: &deadline)
        Timestamp.keepEarlier(self.resuming?.due, in: &deadline)
        Timestamp.keepEarlier(self.adoption.nextDeadline(), in: &deadline)
        Timestamp.keepEarlier(self.windows.nextDeadline(), in: &deadline)
        return deadline
    }

    // MARK: - Start, interfaces, settings

    /// Registrations restored from the journal at start. Nobody knows what the hosts did while the proxy was
    /// stopped, so each starts over as for a new registration: probed, and spoken for once it is quiet.
    public mutating func restore(_ registrations: [OwnerRegistration], now: Timestamp) -> [EngineAction] {
        var actions: [EngineAction] = []
        for registration in registrations {
            // Its names are shared already: the journal's replay shares every name spelled alike across hosts
            // (`NameInterner`), which is all the store's own sharing would find.
            self.registrar.restore(registration, namesShared: true)
            if registration.isAdopted { self.adoption.restoreHeld(registration) }
            actions += self.enter(registration, .restored, now: now)
            actions += self.ssdpRegistered(registration, search: false, now: now)
        }
        return actions
    }

    /// The kernel's interfaces, read afresh (at start, on netlink news, every 30 s): the proxy serves those the
    /// rule picks (`NetworkInterface.served`); when they changed, the I/O layer is told to serve them (`.serve`)
    /// and the machines learn them.
    public mutating func interfacesListed(_ listed: [NetworkInterface], named names: [String], now: Timestamp)
        -> [EngineAction]
    {
        let served = NetworkInterface.served(from: listed, named: names)
        guard served != self.servedInterfaces else { return [] }
        return [.serve(served)] + self.setInterfaces(served, now: now)
    }

    /// The served interfaces, already chosen (tests and benchmarks set them directly).
    public mutating func setInterfaces(_ contexts: [InterfaceContext], now: Timestamp) -> [EngineAction] {
        let before = self.interfaces
        self.servedInterfaces = contexts
        self.interfaces = Dictionary(contexts.map { ($0.index, $0) }, uniquingKeysWith: { first, _ in first })
        var actions: [EngineAction] = []
        actions += self.withTakeover(now: now) { $0.setInterfaces(contexts) }
        actions += self.withResponder(now: now) { $0.setInterfaces(contexts, now: now) }
        self.ssdp?.setInterfaces(contexts)
        // Adopted hosts are asked what they publish on a link served anew (docs/adoption.md).
        for context in contexts where before[context.index] == nil {
            actions += self.askAdoptedServices(on: context, now: now)
        }
        return actions
    }

    /// Settings a reload may change while hosts are held. Nothing goes on the wire: hosts already held keep
    /// their state, and the new settings apply to what happens next (the next wake decision, lease end or
    /// refusal). The log line names what changed, so that an operator who edited the file can see it took.
    public mutating func reconfigure(
        takeover: TakeoverConfiguration?, expiryAction: RegistrationConfiguration.ExpiryAction,
        refusalReply: RegistrationConfiguration.RefusalReply
    ) -> [EngineAction] {
        var changed: [String] = []
        if let takeover, let current = self.takeover?.configuration, current != takeover {
            self.takeover?.configuration = takeover
            changed.append("the takeover and wake settings changed")
        }
        if self.registrar.configuration.expiryAction != expiryAction {
            changed.append("lease expiry now \(expiryAction.rawValue)")
        }
        if self.registrar.configuration.refusalReply != refusalReply {
            changed.append("refusals now \(refusalReply.rawValue)")
        }
        self.registrar.reconfigure(expiryAction: expiryAction, refusalReply: refusalReply)
        let summary = changed.isEmpty ? "nothing the engine uses changed" : changed.joined(separator: ", ")
        return [.log(.info, "reload: \(summary)")]
    }

    // MARK: - Registrations

    /// One datagram on the registration port, from `source`:`port` on a served interface. The actions carry the
    /// reply (`.reply`, only to an address a reply can go to) and the outcome's log line; the caller sends the
    /// reply only once the journal entries of the same batch are durable.
    public mutating func receiveRegistration(
        _ bytes: [UInt8], from source: IPAddress, port: UInt16 = 0, on interface: InterfaceContext, now: Timestamp
    ) -> [EngineAction] {
        let outcome = self.registrar.handle(
            datagram: bytes, from: source, on: interface,
            fromPeer: self.takeover?.isPeer(source, on: interface.name) ?? false, now: now)
        var actions = self.accepted(outcome, from: source, now: now)
        actions += self.outcomeLines(outcome, from: source, port: port, interface: interface.name, now: now)
        if let reply = outcome.reply {
            if interface.acceptsReply(to: source, port: port) {
                actions.append(.reply(RegistrationReply(bytes: reply, destination: source, port: port)))
            } else {
                actions.append(
                    .log(.debug, "registration: no reply to \(source) port \(port), an address no reply can go to"))
            }
        }
        return actions
    }

    /// What an accepted registration changes: the journal, the host's presence, the machines.
    private mutating func accepted(_ outcome: RegistrationOutcome, from source: IPAddress, now: Timestamp)
        -> [EngineAction]
    {
        guard case .accepted(let acceptance) = outcome else { return [] }
        // Another proxy handing a host over sends from its own address, with the host's Owner option.
        let fromPeer = self.takeover?.isPeer(source, on: acceptance.registration.key.interface) ?? false
        let registration = acceptance.registration
        var actions: [EngineAction] = [.journal(.put(registration))]
        // A new registration (not a retransmission, not a further part of the same one) was sent by a host that
        // is therefore awake this moment: Apple's clients register right before sleeping, avahi-based ones often
        // seconds before (docs/coexistence.md). The proxy stays silent until the host is shown to be quiet.
        // An adopted host's stand-in carries no message ID of the host's: the host's own registration replacing it
        // is new whatever its ID (found by `scripts/fuzz engine`: one with ID 0 was taken for a retransmission, and
        // the proxy went on speaking for a host that had just shown it was awake).
        let isNew =
            acceptance.previous == nil || acceptance.startedNewEpoch
            || acceptance.previous!.lastMessageID != registration.lastMessageID
            || acceptance.previous!.isAdopted != registration.isAdopted
        if isNew {
            actions += self.enter(
                registration, fromPeer ? .handedOver : .registered, previous: acceptance.previous, now: now)
        } else {
            self.responder?.registered(registration, previous: acceptance.previous, now: now)
            actions += self.withTakeover(now: now) { $0.registered(registration, now: now) }
        }
        if fromPeer { self.takeover?.handedOver(registration.key, by: source, now: now) }
        // A new registration comes from a host that is awake: ask it what it advertises over SSDP.
        actions += self.ssdpRegistered(registration, search: isNew, now: now)
        return actions
    }

    /// A host enters, or starts over, `starting`: silent, its addresses probed (or its name asked for) from a
    /// second on.
    mutating func enter(
        _ registration: OwnerRegistration, _ entry: HostPresence.Entry, previous: OwnerRegistration? = nil,
        now: Timestamp
    ) -> [EngineAction] {
        // An adopted host is asked for its name even with addresses: its NIC may answer them while it sleeps.
        let probesAddresses = self.takeover != nil && !registration.addresses.isEmpty && !registration.isAdopted
        let (presence, transition) = HostPresence.enter(
            entry, previous: self.presence[registration.key], probesAddresses: probesAddresses,
            adopted: registration.isAdopted, now: now)
        self.presence[registration.key] = presence
        var actions = self.carryOut(transition, for: registration, now: now)
        self.responder?.registered(registration, previous: previous, now: now)
        let restart = entry == .restored || previous != nil
        actions += self.withTakeover(now: now) { $0.registered(registration, restart: restart, now: now) }
        return actions
    }

    // MARK: - Frames

    /// One frame captured on a served interface (`outgoing`: sent by the proxy machine itself).
    public mutating func receiveFrame(_ bytes: [UInt8], interfaceIndex: Int, outgoing: Bool, now: Timestamp)
        -> [EngineAction]
    {
        var actions: [EngineAction] = []
        // A Windows client asking for a sleeping PC's name (docs/windows.md §3): answered here, not a wake candidate.
        if !outgoing, !self.windows.isEmpty, let context = self.interfaces[interfaceIndex] {
            if WindowsFrames.isNameService(bytes) { return self.windowsFrame(bytes, context: context, now: now) }
            if WindowsFrames.isMetadataConnection(bytes), let refused = self.refuseMetadata(bytes, context: context) {
                return refused
            }
        }
        // An adopted host's own frames (its MAC the Ethernet source) teach what it publishes (docs/adoption.md).
        if !outgoing, self.adoption.isFromAdopted(bytes), let context = self.interfaces[interfaceIndex] {
            actions += self.adoptionFrame(bytes, context: context, now: now)
        }
        return actions
            + self.withTakeover(now: now) {
                $0.receive(frame: bytes, interfaceIndex: interfaceIndex, outgoing: outgoing, now: now)
            }
    }

    // MARK: - Helpers

    /// Runs one transition of a held host's presence and carries it out (docs/host-lifecycle.md); nothing for a
    /// host the engine does not hold. `logs`: whether its event gets a log line (a restart with thousands of hosts
    /// counts them in one line instead).
    mutating func transition(
        _ registration: OwnerRegistration, logs: Bool = true, now: Timestamp,
        _ body: (inout HostPresence) -> HostPresence.Transition
    ) -> [EngineAction] {
        guard self.presence[registration.key] != nil else { return [] }
        let transition = body(&self.presence[registration.key]!)
        return self.carryOut(transition, for: registration, logs: logs, now: now)
    }

    /// What a transition ordered, done on the machines it concerns, and its event told: the one place where the
    /// responder, SSDP and the takeover are told to speak for a host, to stop, or to let it go, and where a
    /// host's history and log lines are made.
    mutating func carryOut(
        _ transition: HostPresence.Transition, for registration: OwnerRegistration, logs: Bool = true,
        now: Timestamp
    ) -> [EngineAction] {
        let key = registration.key
        var actions: [EngineAction] = []
        if logs, let note = transition.note { actions.append(Self.line(for: note, registration)) }
        if let event = transition.event {
            if logs, let line = Self.line(for: event, from: transition.from, registration) { actions.append(line) }
            actions.append(
                .presence(
                    PresenceChange(
                        host: key, hostName: registration.hostName?.description, state: event.state,
                        reason: event.reason)))
        }
        for order in transition.orders {
            switch order {
            case .speak:
                self.responder?.speak(for: registration, now: now)
                self.ssdp?.speak(for: key, now: now)
                self.windows.speak(for: registration)
            case .silence:
                self.responder?.silence(key)
                self.ssdp?.silence(key)
                self.windows.silence(key)
            case .askName:
                let probe = self.quietProbe(registration)
                for case .transmit(let transmission) in probe { self.echoes.remember(transmission.bytes, now: now) }
                actions += probe
            case .checkAt(let time?): self.quietChecks.schedule((), for: key, at: time)
            case .checkAt(nil): self.quietChecks.remove(key)
            case .handBack(let signal, let what):
                actions += self.removeHost(key, .handBack(why: what, signal: signal), now: now)
            case .end(let ending):
                if ending.journal { actions.insert(.journal(.remove(key)), at: 0) }
                self.windows.silence(key)
                // A host the proxy did not speak for is silenced in the responder, which then sends no goodbyes.
                self.responder?.removed(registration, farewell: ending.farewell, now: now)
                actions += (self.ssdp?.removed(key, byebye: ending.farewell) ?? []).map(EngineAction.ssdp)
                actions += self.withTakeover(now: now) {
                    $0.removed(
                        key, endsWake: ending.endsWake, wake: ending.wake, pointsBack: ending.pointsBack, now: now)
                }
            }
        }
        return actions
    }

    static func name(_ registration: OwnerRegistration) -> String {
        "\(registration.hostName?.description ?? "?") (\(registration.key))"
    }

    static func seconds(_ duration: Duration) -> Int64 { duration.components.seconds }

    /// A stand-in carrying only the key, for telling the responder to forget a host it may still have queued.
    static func placeholder(_ key: OwnerKey) -> OwnerRegistration {
        OwnerRegistration(
            key: key, owner: OwnerOption(sequence: 0, primaryMAC: key.primaryMAC), records: [],
            registeredAt: Timestamp(nanoseconds: 0),
            updatedAt: Timestamp(nanoseconds: 0), leaseExpiry: Timestamp(nanoseconds: 0), grantedLease: 0,
            lastMessageID: 0)
    }
}
