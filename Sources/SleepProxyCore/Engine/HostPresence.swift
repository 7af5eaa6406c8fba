import SleepProxyWire

/// One held host's lifecycle (docs/host-lifecycle.md): a value in one state at a time, and transitions for every
/// edge of its life, its entry and its end included. Each transition returns one `Transition` (where it was,
/// where it is, the orders it gives, and what a person sees of it); the engine carries the orders out on the
/// responder, SSDP and the takeover, so that what the proxy does for a host follows from this one value. No
/// clock and no I/O: time comes in as `now`.
public struct HostPresence: Hashable, Sendable {
    /// How a host comes to be held. Each way starts it `starting`, silent, and only a new registration is news
    /// for its history (a restored or reloaded host's history already says where it stood).
    public enum Entry: Hashable, Sendable {
        /// It sent a new registration (not a retransmission): it is awake this moment.
        case registered
        /// Another proxy handed it over with its Owner option (docs/several-proxies.md).
        case handedOver
        /// Read back from the journal at start.
        case restored
        /// Held again after a failed journal append was undone (`ProxyEngine.reload`).
        case reloaded
    }

    /// Questions for the host's own name (docs/coexistence.md; `EngineRules.quietProbeCount`), for hosts with no
    /// address to probe: `sent` so far, the next at `next`.
    public struct NameProbes: Hashable, Sendable {
        public var sent: Int
        public var next: Timestamp
    }

    /// What a host's end asks of the machines, decided once here and handed to each of them.
    public struct Ending: Hashable, Sendable {
        /// mDNS goodbyes and SSDP byebyes for what the proxy was speaking for: at a lease's end and at a forget
        /// that asks for them, never on a hand-back (the host announces the same records itself, and a goodbye
        /// would flush them from every cache) and never for a host that answers for itself.
        public var farewell: Bool
        /// Magic packets now: a lease that ends on a sleeping host with `expiry-action = wake` (docs/protocol.md
        /// §5.4).
        public var wake: Bool
        /// A wake under way ends here as a success (the host is up, or the journal never held it); otherwise it
        /// runs to its end, since an administrator's forget does not cancel a wake.
        public var endsWake: Bool
        /// A `remove` entry for the journal (not after a reload: the journal already says so).
        public var journal: Bool
        /// The host is up and speaks for itself: the neighbours are told that the addresses the proxy answered
        /// for are at the host's MAC again, whether a wake of ours or the host itself (a lid opened) ended the
        /// sleep (docs/waking.md §6).
        public var pointsBack: Bool
    }

    /// What a transition asks of the composed machines.
    public enum Order: Hashable, Sendable {
        /// The responder and SSDP answer and announce for the host.
        case speak
        /// The responder and SSDP stop speaking for it (no goodbyes: its records are still good).
        case silence
        /// Ask for the host's name now (a name probe).
        case askName
        /// Wake the quiet check at this time; `nil`: no check is due.
        case checkAt(Timestamp?)
        /// The host woke: its registration ends by a hand-back, with what showed it.
        case handBack(HandBackSignal, what: String)
        /// The host's registration ends: the responder, SSDP and the takeover let it go as `Ending` says.
        case end(Ending)
    }

    /// What a person sees of a transition: the state the host entered, the reason the history keeps, and for the
    /// log what showed it (an address, a signal, a peer).
    public struct Event: Hashable, Sendable {
        public var state: HostState
        public var reason: HostStateReason
        public var detail: String?

        public init(_ state: HostState, _ reason: HostStateReason, detail: String? = nil) {
            self.state = state
            self.reason = reason
            self.detail = detail
        }
    }

    /// What the log says of a held host that no history entry keeps: a transition's side remark, or something the
    /// takeover, the responder or adoption noticed about the host. Written out by `ProxyEngine.line(_:_:)` alone.
    public enum Note: Hashable, Sendable {
        /// Its first sign of life in this registration, before the proxy ever spoke for it: still going to sleep.
        case stillAwake(String)
        /// It answered for an address the proxy was answering for: that address is left to it.
        case answersItself(String)
        /// The takeover claimed one of its addresses (the host's probes went unanswered).
        case claimed(IPAddress)
        /// Another proxy answers for it too; this one keeps it (it answered first, or advertises the better metric).
        case keptFromPeer(String)
        /// The proxy it stood by for left: this one takes it over, without a wake.
        case tookOverFromStandby(String)
        /// Another machine answers one of its mDNS records differently: the host is woken to defend it.
        case mdnsConflict(source: IPAddress, record: String)
        /// Another machine registers one of its unique NetBIOS names: defended, and the host woken too.
        case netbiosConflict(asker: IPAddress, name: String)
        /// Adopted and quiet, but the store is full: not answered for.
        case adoptionRefused(maximumHosts: Int, maximumRecords: Int)
    }

    /// One transition's result, in the shape of swift-nio-ssh's state machine results: one value the caller
    /// acts on, never a list it has to read for whether anything happened.
    public struct Transition: Hashable, Sendable {
        /// Where the host was; nil for a host that was not held.
        public var from: HostState?
        /// Where it is now: `handedBack` or `gone` for a host whose registration ended.
        public var to: HostState
        public var orders: [Order]
        /// Nil when nothing a person sees changed.
        public var event: Event?
        /// What the log says of it beyond its event (nothing the history keeps): nil for most.
        public var note: Note? = nil

        /// Nothing happened: the host stays where it was and nothing is ordered.
        static func none(_ state: HostState) -> Transition {
            Transition(from: state, to: state, orders: [], event: nil)
        }
    }

    /// Where the held host stands; its type cannot say `waking` (the takeover's: `ProxyEngine.state(of:)`),
    /// `handed-back` or `gone` (those end the presence).
    public private(set) var phase: Phase
    /// The phase in the engine's one vocabulary.
    public var state: HostState { self.phase.state }
    /// Only while `starting`, for a host probed by name instead of by address.
    public private(set) var nameProbes: NameProbes?
    /// The proxy spoke for the host at least once in this registration: a sign of life now means it woke.
    public private(set) var spokeFor = false
    /// The latest sign that the host was up, in this registration.
    public private(set) var lastAwake: AwakeSignal?
    /// Held by adoption (docs/adoption.md): its NIC may answer ARP and neighbour solicitations while it sleeps, so
    /// only what a NIC cannot send (its mDNS, its SSDP, any other IP) shows it awake, and any such sign lets it go.
    public private(set) var adopted = false

    /// Whether the proxy speaks for the host (answers, announces and defends it): only while it is asleep. The
    /// responder's and SSDP's own marks follow from the orders and must always agree with this.
    public var speaks: Bool { self.state == .asleep }

    private init(phase: Phase) { self.phase = phase }

    // MARK: - Entering

    /// A host enters (or, registering anew, starts over from `previous`): it is awake now, so it starts silent,
    /// probed by address or, with none to probe, by name from `EngineRules.quietStartDelay` on.
    public static func enter(
        _ entry: Entry, previous: HostPresence? = nil, probesAddresses: Bool, adopted: Bool = false, now: Timestamp
    ) -> (HostPresence, Transition) {
        var presence = HostPresence(phase: .starting)
        presence.adopted = adopted
        var check: Timestamp? = nil
        if !probesAddresses {
            check = now + EngineRules.quietStartDelay
            presence.nameProbes = NameProbes(sent: 0, next: check!)
        }
        let event: Event?
        switch entry {
        case .registered: event = Event(.starting, .registered)
        case .handedOver: event = Event(.starting, .handedOver)
        case .restored, .reloaded: event = nil
        }
        let transition = Transition(
            from: previous?.state, to: .starting, orders: [.silence, .checkAt(check)], event: event)
        return (presence, transition)
    }

    /// An adopted host fell quiet: its questions went unanswered (`Adoption`), so it is asleep from the start and
    /// spoken for at once; its addresses are claimed as nobody answers them.
    public static func adoptQuiet(previous: HostPresence? = nil) -> (HostPresence, Transition) {
        var presence = HostPresence(phase: .asleep)
        presence.adopted = true
        presence.spokeFor = true
        let transition = Transition(
            from: previous?.state, to: .asleep, orders: [.silence, .checkAt(nil), .speak],
            event: Event(.asleep, .noNameAnswer, detail: "adopted"))
        return (presence, transition)
    }

    // MARK: - Changing state

    /// The host was shown to be quiet (its addresses went unanswered, its name did, or another proxy it stood by
    /// for left): the proxy speaks for it. Nothing changes for a host already asleep.
    public mutating func fellQuiet(_ reason: HostStateReason, detail: String? = nil) -> Transition {
        guard self.state != .asleep else { return .none(self.state) }
        return self.move(to: .asleep, reason, detail: detail, orders: [.checkAt(nil), .speak])
    }

    /// After a clean stop a moment ago, a host the proxy spoke for then is spoken for again at once
    /// (`EngineRules.resumeWindow`); only from `starting`, where a restored host begins.
    public mutating func resumed(detail: String? = nil) -> Transition {
        guard self.state == .starting else { return .none(self.state) }
        return self.move(to: .asleep, .afterRestart, detail: detail, orders: [.checkAt(nil), .speak])
    }

    /// A sign of life from the host itself (its mDNS, its own name probe, its SSDP). Once the proxy spoke for
    /// it, the host woke: hand-back. Before, it is still going to sleep: its name probes start over.
    public mutating func signOfLife(_ signal: AwakeSignal, _ kind: HandBackSignal, now: Timestamp) -> Transition {
        let first = self.lastAwake == nil
        self.lastAwake = signal
        // An adopted host is held only while it is shown quiet: a word of its own, even before the proxy spoke
        // for it (restored from the journal and still being asked), means it is up.
        if self.spokeFor || self.adopted {
            // Where it goes: handed back, by `end` when the engine carries the order out (the event is that end's).
            return Transition(
                from: self.state, to: .handedBack, orders: [.handBack(kind, what: signal.what)], event: nil)
        }
        let note: Note? = first ? .stillAwake(signal.what) : nil
        guard var probes = self.nameProbes else {
            return Transition(from: self.state, to: self.state, orders: [], event: nil, note: note)
        }
        probes.sent = 0
        probes.next = max(probes.next, now + EngineRules.quietProbeInterval)
        self.nameProbes = probes
        return Transition(from: self.state, to: self.state, orders: [.checkAt(probes.next)], event: nil, note: note)
    }

    /// The quiet check came due: ask the name once more, or, all questions unanswered, the host is asleep.
    public mutating func nameCheckDue(now: Timestamp) -> Transition {
        guard var probes = self.nameProbes else { return .none(self.state) }
        guard probes.next <= now else {
            return Transition(from: self.state, to: self.state, orders: [.checkAt(probes.next)], event: nil)
        }
        guard probes.sent < EngineRules.quietProbeCount else { return self.fellQuiet(.noNameAnswer) }
        probes.sent += 1
        probes.next = now + EngineRules.quietProbeInterval
        self.nameProbes = probes
        return Transition(from: self.state, to: self.state, orders: [.askName, .checkAt(probes.next)], event: nil)
    }

    /// The host answered for one of its addresses itself (`signal`); `wasAnswering`: the takeover was answering
    /// for that address; `answeringAny`: it still answers for another of them. Asleep and answered for nowhere,
    /// it is awake: silent, its records kept.
    public mutating func ownerSeen(_ signal: AwakeSignal, wasAnswering: Bool, answeringAny: Bool) -> Transition {
        let first = self.lastAwake == nil
        self.lastAwake = signal
        let note: Note? = wasAnswering ? .answersItself(signal.what) : first ? .stillAwake(signal.what) : nil
        // An adopted host's NIC answers for it in sleep (docs/adoption.md §4): not a sign that it woke.
        guard self.state == .asleep, !answeringAny, !self.adopted else {
            return Transition(from: self.state, to: self.state, orders: [], event: nil, note: note)
        }
        var transition = self.move(to: .awake, .answersItself, detail: signal.what, orders: [.silence])
        transition.note = note
        return transition
    }

    /// Another sleep proxy answers for the host and keeps it (docs/several-proxies.md): stand by.
    public mutating func peerClaimed(_ peer: String) -> Transition {
        guard self.state != .standby else { return .none(self.state) }
        return self.move(to: .standby, .otherProxy, detail: peer, orders: [.silence])
    }

    // MARK: - Ending

    /// The host's registration ends (`removal` says why; `waking`: magic packets are going out for it). The
    /// presence is spent: the engine drops it with the registration (nil for a reload's leftover that memory had
    /// already let go).
    public static func end(_ presence: HostPresence?, _ removal: HostRemoval, waking: Bool, now: Timestamp)
        -> Transition
    {
        let asleep = presence?.state == .asleep || waking
        let speaks = presence?.speaks ?? false
        var ending = Ending(farewell: false, wake: false, endsWake: false, journal: true, pointsBack: false)
        let to: HostState
        let reason: HostStateReason
        let detail: String?
        switch removal {
        case .handBack(let why, let signal):
            (to, reason, detail) = (.handedBack, HostStateReason(signal), why)
            ending.endsWake = true
            ending.pointsBack = true
        case .expired(let action):
            to = .gone
            // The history tells the two apart: a person reading a host's day sees why no wake followed.
            reason = asleep ? .leaseEnded : .awakeAtExpiry
            // Beyond Apple (docs/protocol.md §5.4 wakes every host whose lease ends): a host known to be awake
            // needs no magic packet, and goodbyes would flush the records it answers for itself.
            ending.farewell = speaks
            ending.wake = asleep && action == .wake
            if asleep {
                detail = action.rawValue
            } else if let seen = presence?.lastAwake {
                detail = "last seen awake: \(seen.what), \((now - seen.at).components.seconds) s ago"
            } else {
                detail = "it never went quiet"
            }
        case .forgotten(let goodbyes):
            (to, reason) = (.gone, .forgotten)
            ending.farewell = goodbyes && speaks
            detail =
                goodbyes ? (asleep ? "with goodbyes" : "no goodbyes: it is awake and answers for itself") : "silently"
        case .released:
            (to, reason, detail) = (.gone, .released, nil)
        case .transferred(let peer):
            (to, reason, detail) = (.gone, .transferred, peer)
        case .unreachable:
            (to, reason, detail) = (.gone, .offOrAway, "\(AdoptionRules.wakesBeforeAway) wakes unanswered")
            ending.farewell = speaks
        case .reloaded:
            (to, reason, detail) = (.gone, .reloaded, nil)
            ending.endsWake = true
            ending.journal = false
        }
        return Transition(
            from: presence?.state, to: to, orders: [.checkAt(nil), .end(ending)],
            event: Event(to, reason, detail: detail))
    }

    private mutating func move(
        to phase: Phase, _ reason: HostStateReason, detail: String?, orders: [Order]
    ) -> Transition {
        let from = self.state
        self.phase = phase
        self.nameProbes = nil
        if phase == .asleep { self.spokeFor = true }
        return Transition(
            from: from, to: phase.state, orders: orders, event: Event(phase.state, reason, detail: detail))
    }

    /// The phases a held host can be in: `HostState` without the takeover's `waking` and the two ends.
    public enum Phase: CaseIterable, Hashable, Sendable {
        case starting
        case asleep
        case awake
        case standby

        public var state: HostState {
            switch self {
            case .starting: .starting
            case .asleep: .asleep
            case .awake: .awake
            case .standby: .standby
            }
        }
    }
}

/// Where a host stands: the one vocabulary of the engine, the admin side, the metrics and the history (each
/// wire format mirrors it once, docs/host-lifecycle.md). The raw values are the words users see.
public enum HostState: String, CaseIterable, Codable, Hashable, Sendable {
    /// Held, not yet shown to be asleep: the proxy says nothing for it.
    case starting
    /// Quiet: the proxy answers for it (at least one address claimed, its records announced).
    case asleep
    /// It spoke for itself (ARP/NDP for every address, or mDNS before the takeover): the proxy keeps its records
    /// silently and probes again.
    case awake
    /// Magic packets are going out for it.
    case waking
    /// Another sleep proxy answers for it; this one holds its records silently and takes over, without a wake,
    /// if that proxy leaves (docs/several-proxies.md).
    case standby
    /// It woke and got everything back: up on its own, no longer held.
    case handedBack = "handed-back"
    /// No longer held for another reason: its lease ended, it was forgotten, released or transferred.
    case gone

    /// The states of a host the proxy holds, in the order status and metrics list them.
    public static let held: [HostState] = [.starting, .asleep, .awake, .waking, .standby]
}

/// Why a host entered a state, in the words its history, the status page and the API show (at most 15 bytes:
/// the history keeps thousands, and Swift stores a string that short without an allocation of its own).
public enum HostStateReason: String, CaseIterable, Codable, Hashable, Sendable {
    case registered
    case handedOver = "handed over"
    case noProbeAnswer = "no probe answer"
    case noNameAnswer = "no name answer"
    case afterRestart = "after a restart"
    case answersItself = "answers itself"
    case otherProxy = "other proxy"
    /// Hand-backs, by what showed the host awake (`HandBackSignal`'s words).
    case ownerOption = "owner-option"
    case mdns
    case ownNameProbe = "own-name-probe"
    case ssdp
    case ownTraffic = "own-traffic"
    case offOrAway = "off or away"
    case leaseEnded = "lease ended"
    case awakeAtExpiry = "awake at expiry"
    case forgotten
    case released
    case transferred
    case reloaded

    public init(_ signal: HandBackSignal) {
        switch signal {
        case .ownerOption: self = .ownerOption
        case .mdns: self = .mdns
        case .ownNameProbe: self = .ownNameProbe
        case .ssdp: self = .ssdp
        case .ownTraffic: self = .ownTraffic
        }
    }
}
