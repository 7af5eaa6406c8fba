import Testing

@testable import SleepProxyCore

/// The host lifecycle's transition table (docs/host-lifecycle.md), row by row: each transition from each state,
/// with the orders it gives and the event a person sees, from a host's entry to its end.
@Suite("Host presence")
struct HostPresenceTests {
    typealias Transition = HostPresence.Transition
    typealias Event = HostPresence.Event

    static let t0 = Timestamp.seconds(1000)
    static let signal = AwakeSignal(what: "mDNS from 192.0.2.2", at: t0)

    static func starting(byName: Bool = false) -> HostPresence {
        HostPresence.enter(.registered, probesAddresses: !byName, now: t0).0
    }

    static func asleep() -> HostPresence {
        var presence = Self.starting()
        _ = presence.fellQuiet(.noProbeAnswer)
        return presence
    }

    static func awake() -> HostPresence {
        var presence = Self.asleep()
        _ = presence.ownerSeen(Self.signal, wasAnswering: true, answeringAny: false)
        return presence
    }

    static func standby() -> HostPresence {
        var presence = Self.starting()
        _ = presence.peerClaimed("other")
        return presence
    }

    // MARK: - Entering

    /// The stored phase can only be one a held host is in: `waking` is the takeover's, and `handed-back` and
    /// `gone` end the presence (docs/host-lifecycle.md).
    @Test func theStoredPhaseIsAlwaysAHeldOne() {
        #expect(Set(HostPresence.Phase.allCases.map(\.state)) == Set(HostState.held).subtracting([.waking]))
    }

    @Test func registeringStartsSilentProbedByAddressOrByName() {
        let (byAddress, entered) = HostPresence.enter(.registered, probesAddresses: true, now: Self.t0)
        #expect(
            entered
                == Transition(
                    from: nil, to: .starting, orders: [.silence, .checkAt(nil)], event: Event(.starting, .registered)))
        #expect(byAddress.state == .starting && byAddress.nameProbes == nil)
        let (byName, named) = HostPresence.enter(.registered, probesAddresses: false, now: Self.t0)
        let first = Self.t0 + EngineRules.quietStartDelay
        #expect(byName.nameProbes == .init(sent: 0, next: first) && named.orders == [.silence, .checkAt(first)])
        #expect(!byName.spokeFor && byName.lastAwake == nil && !byName.speaks)
    }

    @Test func aHandOverIsItsOwnEntryAndARestoreOrReloadIsNoNews() {
        let handedOver = HostPresence.enter(.handedOver, probesAddresses: true, now: Self.t0).1
        #expect(handedOver.event == Event(.starting, .handedOver))
        for entry in [HostPresence.Entry.restored, .reloaded] {
            let transition = HostPresence.enter(entry, probesAddresses: true, now: Self.t0).1
            #expect(transition.to == .starting && transition.event == nil, "the history already says where it was")
        }
    }

    @Test func registeringAgainStartsOverFromWhereItWas() {
        for previous in [Self.asleep(), Self.awake(), Self.standby()] {
            let (again, transition) = HostPresence.enter(
                .registered, previous: previous, probesAddresses: true, now: Self.t0)
            #expect(transition.from == previous.state && transition.to == .starting && !again.spokeFor)
        }
    }

    // MARK: - Changing state

    @Test func fallingQuietSpeaksFromEveryStateButAsleep() {
        for var presence in [Self.starting(), Self.starting(byName: true), Self.awake(), Self.standby()] {
            let from = presence.state
            #expect(
                presence.fellQuiet(.noProbeAnswer, detail: "192.0.2.2")
                    == Transition(
                        from: from, to: .asleep, orders: [.checkAt(nil), .speak],
                        event: Event(.asleep, .noProbeAnswer, detail: "192.0.2.2")))
            #expect(presence.state == .asleep && presence.spokeFor && presence.speaks && presence.nameProbes == nil)
        }
        var asleep = Self.asleep()
        #expect(asleep.fellQuiet(.noProbeAnswer) == .none(.asleep), "nothing changes for a host already asleep")
    }

    @Test func resumingOnlyFromStarting() {
        var starting = Self.starting()
        #expect(
            starting.resumed(detail: "4")
                == Transition(
                    from: .starting, to: .asleep, orders: [.checkAt(nil), .speak],
                    event: Event(.asleep, .afterRestart, detail: "4")))
        var asleep = Self.asleep()
        #expect(asleep.resumed() == .none(.asleep))
    }

    @Test func aSignOfLifeHandsBackOnlyOnceSpokenFor() {
        for var spoken in [Self.asleep(), Self.awake(), Self.standby().afterFallingQuiet()] {
            let transition = spoken.signOfLife(Self.signal, .mdns, now: Self.t0)
            #expect(transition.orders == [.handBack(.mdns, what: Self.signal.what)] && transition.event == nil)
            #expect(transition.to == .handedBack)
            #expect(spoken.lastAwake == Self.signal)
        }
        // Before the proxy ever spoke: still going to sleep; the name probes start over, not sooner than before.
        var byName = Self.starting(byName: true)
        let later = Self.t0 + .seconds(5)
        #expect(
            byName.signOfLife(Self.signal, .mdns, now: later).orders == [
                .checkAt(later + EngineRules.quietProbeInterval)
            ])
        #expect(byName.nameProbes?.sent == 0)
        var byAddress = Self.starting()
        #expect(
            byAddress.signOfLife(Self.signal, .ssdp, now: later)
                == Transition(
                    from: .starting, to: .starting, orders: [], event: nil, note: .stillAwake(Self.signal.what)))
        #expect(byAddress.lastAwake == Self.signal)
        #expect(byAddress.signOfLife(Self.signal, .ssdp, now: later) == .none(.starting), "said once a registration")
    }

    /// Only its first sign of life before the proxy spoke for it is worth a line (the host is still going to
    /// sleep); the note comes from the transition, so nothing reads the host's flags before it.
    @Test func theFirstSignOfLifeIsNotedOnce() {
        var byName = Self.starting(byName: true)
        #expect(byName.signOfLife(Self.signal, .mdns, now: Self.t0).note == .stillAwake(Self.signal.what))
        #expect(byName.signOfLife(Self.signal, .mdns, now: Self.t0).note == nil)
        var probed = Self.starting()
        #expect(
            probed.ownerSeen(Self.signal, wasAnswering: false, answeringAny: true).note == .stillAwake(Self.signal.what)
        )
        #expect(probed.ownerSeen(Self.signal, wasAnswering: false, answeringAny: true) == .none(.starting))
        var handedBack = Self.asleep()
        #expect(handedBack.signOfLife(Self.signal, .mdns, now: Self.t0).note == nil, "its hand-back says it")
    }

    /// The adoption rows (docs/adoption.md): held asleep at once, spoken for; a word of its own hands it back even
    /// before the proxy spoke for it (restored from the journal); its NIC's answers change nothing; two wakes
    /// unanswered end it with goodbyes.
    @Test func anAdoptedHostsRows() {
        let (held, entered) = HostPresence.adoptQuiet(previous: nil)
        #expect(
            entered
                == Transition(
                    from: nil, to: .asleep, orders: [.silence, .checkAt(nil), .speak],
                    event: Event(.asleep, .noNameAnswer, detail: "adopted")))
        #expect(held.speaks && held.spokeFor && held.adopted)
        var nic = held
        #expect(
            nic.ownerSeen(Self.signal, wasAnswering: true, answeringAny: false)
                == Transition(
                    from: .asleep, to: .asleep, orders: [], event: nil, note: .answersItself(Self.signal.what)))
        #expect(nic.state == .asleep && nic.lastAwake == Self.signal)
        var restored = HostPresence.enter(.restored, probesAddresses: true, adopted: true, now: Self.t0).0
        let word = restored.signOfLife(Self.signal, .ownTraffic, now: Self.t0)
        #expect(word.to == .handedBack && word.orders == [.handBack(.ownTraffic, what: Self.signal.what)])
        let away = HostPresence.end(held, .unreachable, waking: false, now: Self.t0)
        #expect(away.to == .gone && away.event?.reason == .offOrAway)
        #expect(away.orders.contains { if case .end(let ending) = $0 { ending.farewell } else { false } })
    }

    /// N questions for the name, each a probe interval apart; the check after the last unanswered one puts the
    /// host asleep (at N it asks once more, past N it speaks).
    @Test func nameChecksAskThenSpeak() {
        var presence = Self.starting(byName: true)
        var now = Self.t0 + EngineRules.quietStartDelay
        #expect(presence.nameCheckDue(now: now - .milliseconds(1)).orders == [.checkAt(now)], "not due yet")
        for sent in 1...EngineRules.quietProbeCount {
            let transition = presence.nameCheckDue(now: now)
            now = now + EngineRules.quietProbeInterval
            #expect(transition.orders == [.askName, .checkAt(now)] && transition.event == nil)
            #expect(presence.nameProbes == .init(sent: sent, next: now))
        }
        #expect(
            presence.nameCheckDue(now: now)
                == Transition(
                    from: .starting, to: .asleep, orders: [.checkAt(nil), .speak],
                    event: Event(.asleep, .noNameAnswer)))
        var byAddress = Self.starting()
        #expect(byAddress.nameCheckDue(now: now) == .none(.starting), "a host probed by address has no name check")
    }

    @Test func ownerSeenEverywhereIsAwake() {
        var asleep = Self.asleep()
        #expect(
            asleep.ownerSeen(Self.signal, wasAnswering: true, answeringAny: true).to == .asleep,
            "answered for elsewhere")
        #expect(asleep.lastAwake == Self.signal)
        #expect(
            asleep.ownerSeen(Self.signal, wasAnswering: true, answeringAny: false)
                == Transition(
                    from: .asleep, to: .awake, orders: [.silence],
                    event: Event(.awake, .answersItself, detail: Self.signal.what),
                    note: .answersItself(Self.signal.what)))
        var starting = Self.starting()
        _ = starting.ownerSeen(Self.signal, wasAnswering: false, answeringAny: false)
        #expect(starting.ownerSeen(Self.signal, wasAnswering: false, answeringAny: false) == .none(.starting))
    }

    @Test func aPeersClaimStandsBy() {
        for var presence in [Self.starting(), Self.asleep(), Self.awake()] {
            let from = presence.state
            #expect(
                presence.peerClaimed("p")
                    == Transition(
                        from: from, to: .standby, orders: [.silence], event: Event(.standby, .otherProxy, detail: "p")))
            #expect(presence.state == .standby && presence.peerClaimed("p") == .none(.standby))
        }
    }

    // MARK: - Ending

    static func ending(_ transition: Transition) -> HostPresence.Ending? {
        for case .end(let ending) in transition.orders { return ending }
        return nil
    }

    @Test func aHandBackEndsSilentlyAndEndsAWake() {
        let end = HostPresence.end(
            Self.asleep(), .handBack(why: "x", signal: .ownNameProbe), waking: true, now: Self.t0)
        #expect(
            end.from == .asleep && end.to == .handedBack && end.event == Event(.handedBack, .ownNameProbe, detail: "x"))
        #expect(
            Self.ending(end) == .init(farewell: false, wake: false, endsWake: true, journal: true, pointsBack: true))
        #expect(end.orders.first == .checkAt(nil), "its quiet check goes with it")
    }

    @Test func aLeaseEndsWithFarewellsAndAWakeOnlyOnASleepingHost() {
        let asleep = HostPresence.end(Self.asleep(), .expired(.wake), waking: false, now: Self.t0)
        #expect(asleep.event == Event(.gone, .leaseEnded, detail: "wake"))
        #expect(
            Self.ending(asleep) == .init(farewell: true, wake: true, endsWake: false, journal: true, pointsBack: false))
        let quiet = HostPresence.end(Self.asleep(), .expired(.dropWithGoodbyes), waking: false, now: Self.t0)
        #expect(Self.ending(quiet)?.wake == false && Self.ending(quiet)?.farewell == true)
        // Beyond Apple: an awake host needs neither goodbyes nor magic packets, and its history says why.
        let awake = HostPresence.end(Self.awake(), .expired(.wake), waking: false, now: Self.t0 + .seconds(7))
        #expect(awake.event == Event(.gone, .awakeAtExpiry, detail: "last seen awake: \(Self.signal.what), 7 s ago"))
        #expect(
            Self.ending(awake) == .init(farewell: false, wake: false, endsWake: false, journal: true, pointsBack: false)
        )
        let never = HostPresence.end(Self.starting(), .expired(.wake), waking: false, now: Self.t0)
        #expect(never.event?.detail == "it never went quiet")
        // Being woken counts as asleep for the wake, and goodbyes follow what the proxy spoke for.
        let waking = HostPresence.end(Self.awake(), .expired(.wake), waking: true, now: Self.t0)
        #expect(waking.event?.reason == .leaseEnded && Self.ending(waking)?.wake == true)
        #expect(Self.ending(waking)?.farewell == false)
    }

    @Test func anAdministratorsEndsNeverWakeAndSayGoodbyeOnlyWhenAsked() {
        let cases: [(HostRemoval, HostStateReason, Bool)] = [
            (.forgotten(goodbyes: true), .forgotten, true), (.forgotten(goodbyes: false), .forgotten, false),
            (.released, .released, false), (.transferred(to: "p"), .transferred, false),
        ]
        for (removal, reason, farewell) in cases {
            let end = HostPresence.end(Self.asleep(), removal, waking: false, now: Self.t0)
            #expect(end.to == .gone && end.event?.reason == reason)
            #expect(
                Self.ending(end)
                    == .init(farewell: farewell, wake: false, endsWake: false, journal: true, pointsBack: false))
        }
        let awake = HostPresence.end(Self.awake(), .forgotten(goodbyes: true), waking: false, now: Self.t0)
        #expect(Self.ending(awake)?.farewell == false, "an awake host answers for itself: no goodbyes")
    }

    @Test func aReloadEndsWithoutWritingEvenAHostMemoryLetGo() {
        let end = HostPresence.end(nil, .reloaded, waking: false, now: Self.t0)
        #expect(end.from == nil && end.event == Event(.gone, .reloaded))
        #expect(
            Self.ending(end) == .init(farewell: false, wake: false, endsWake: true, journal: false, pointsBack: false))
    }

    // MARK: - Vocabulary

    @Test func reasonsAreShortWordsStoredInline() {
        for reason in HostStateReason.allCases { #expect(reason.rawValue.utf8.count <= 15, "\(reason)") }
        for signal in HandBackSignal.allCases { #expect(HostStateReason(signal).rawValue == signal.rawValue) }
        #expect(HostState.held == [.starting, .asleep, .awake, .waking, .standby])
    }
}

extension HostPresence {
    fileprivate func afterFallingQuiet() -> HostPresence {
        var presence = self
        _ = presence.fellQuiet(.noProbeAnswer)
        return presence
    }
}
