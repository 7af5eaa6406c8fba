/// One held host's lifecycle (docs/host-lifecycle.md): a value with one phase at a time, each carrying the data
/// only it needs, and transitions that are built from the phase they leave. Each transition returns the orders
/// it gives (speak, go silent, ask the host's name, hand it back, record the change); the engine carries them
/// out on the responder, SSDP and the takeover, so that what the proxy does for a host follows from this one
/// value. No clock and no I/O: time comes in as `now`.
public struct HostPresence: Hashable, Sendable {
    public enum Phase: Hashable, Sendable {
        /// Registered, not yet shown to be asleep: the proxy is silent. A host with addresses to probe is probed
        /// by the takeover (`nameProbes` nil); one without is asked for its name (`NameProbes`).
        case starting(NameProbes?)
        /// The proxy answers for it.
        case asleep
        /// It answers for every one of its addresses itself: held silently, probed again.
        case awake
        /// Another sleep proxy answers for it: held silently (docs/several-proxies.md).
        case standby
    }

    /// Questions for the host's own name (docs/coexistence.md; `EngineRules.quietProbeCount`), for hosts with no
    /// address to probe: `sent` so far, the next at `next`.
    public struct NameProbes: Hashable, Sendable {
        public var sent: Int
        public var next: Timestamp
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
        /// The host woke: its registration ends by a hand-back.
        case handBack
        /// The host entered another state: for its history and the status page.
        case changed(PresenceChange.Phase, why: String)
    }

    public private(set) var phase: Phase
    /// The proxy spoke for the host at least once in this registration: a sign of life now means it woke.
    public private(set) var spokeFor = false
    /// The latest sign that the host was up, in this registration.
    public private(set) var lastAwake: AwakeSignal?

    /// Whether the proxy speaks for the host (answers, announces and defends it): only while it is asleep. The
    /// responder's and SSDP's own marks follow from the orders and must always agree with this.
    public var speaks: Bool { self.phase == .asleep }

    /// The phase as the admin side and the metrics name it (without `waking`, which is the takeover's).
    public var state: HostState {
        switch self.phase {
        case .starting: .starting
        case .asleep: .asleep
        case .awake: .awake
        case .standby: .standby
        }
    }

    /// A registration that is new (not a retransmission): the host is awake now, so it starts silent, probed by
    /// address or, with none to probe, by name from `EngineRules.quietStartDelay` on.
    public static func registered(probesAddresses: Bool, now: Timestamp) -> (HostPresence, [Order]) {
        guard !probesAddresses else { return (HostPresence(phase: .starting(nil)), [.silence, .checkAt(nil)]) }
        let next = now + EngineRules.quietStartDelay
        return (HostPresence(phase: .starting(NameProbes(sent: 0, next: next))), [.silence, .checkAt(next)])
    }

    private init(phase: Phase) { self.phase = phase }

    /// The host was shown to be quiet (its addresses went unanswered, its name did, or another proxy it stood by
    /// for left): the proxy speaks for it. Nothing changes for a host already asleep.
    public mutating func fellQuiet(note: String) -> [Order] {
        guard self.phase != .asleep else { return [] }
        self.phase = .asleep
        self.spokeFor = true
        return [.checkAt(nil), .speak, .changed(.asleep, why: note)]
    }

    /// After a clean stop a moment ago, a host the proxy spoke for then is spoken for again at once
    /// (`EngineRules.resumeWindow`); only from `starting`, where a restored host begins.
    public mutating func resumed() -> [Order] {
        guard case .starting = self.phase else { return [] }
        self.phase = .asleep
        self.spokeFor = true
        return [.checkAt(nil), .speak, .changed(.asleep, why: "after a restart")]
    }

    /// A sign of life from the host itself (its mDNS, its own name probe, its SSDP). Once the proxy spoke for
    /// it, the host woke: hand-back. Before, it is still going to sleep: its name probes start over.
    public mutating func signOfLife(_ signal: AwakeSignal, now: Timestamp) -> [Order] {
        self.lastAwake = signal
        if self.spokeFor { return [.handBack] }
        guard case .starting(var probes?) = self.phase else { return [] }
        probes.sent = 0
        probes.next = max(probes.next, now + EngineRules.quietProbeInterval)
        self.phase = .starting(probes)
        return [.checkAt(probes.next)]
    }

    /// The quiet check came due: ask the name once more, or, all questions unanswered, the host is asleep.
    public mutating func nameCheckDue(now: Timestamp) -> [Order] {
        guard case .starting(var probes?) = self.phase else { return [] }
        guard probes.next <= now else { return [.checkAt(probes.next)] }
        guard probes.sent < EngineRules.quietProbeCount else { return self.fellQuiet(note: "no name answer") }
        probes.sent += 1
        probes.next = now + EngineRules.quietProbeInterval
        self.phase = .starting(probes)
        return [.askName, .checkAt(probes.next)]
    }

    /// The host answered for one of its addresses itself (`signal`); `answeringAny`: the takeover still answers
    /// for another of them. Asleep and answered for nowhere, it is awake: silent, its records kept.
    public mutating func ownerSeen(_ signal: AwakeSignal, answeringAny: Bool) -> [Order] {
        self.lastAwake = signal
        guard self.phase == .asleep, !answeringAny else { return [] }
        self.phase = .awake
        return [.silence, .changed(.awake, why: "answers itself")]
    }

    /// Another sleep proxy answers for the host and keeps it (docs/several-proxies.md): stand by.
    public mutating func peerClaimed() -> [Order] {
        guard self.phase != .standby else { return [] }
        self.phase = .standby
        return [.silence, .changed(.standby, why: "other proxy")]
    }
}
