import Testing

@testable import SleepProxyCore

/// The host lifecycle's transition table (docs/host-lifecycle.md), case by case: each transition from each phase,
/// with the orders it gives.
@Suite("Host presence")
struct HostPresenceTests {
    static let t0 = Timestamp.seconds(1000)
    static let signal = AwakeSignal(what: "mDNS from 192.0.2.2", at: t0)

    static func starting(byName: Bool = false) -> HostPresence {
        HostPresence.registered(probesAddresses: !byName, now: t0).0
    }

    static func asleep() -> HostPresence {
        var presence = Self.starting()
        _ = presence.fellQuiet(note: "no probe answer")
        return presence
    }

    @Test func registeringStartsSilent() {
        let (byAddress, orders) = HostPresence.registered(probesAddresses: true, now: Self.t0)
        #expect(byAddress.phase == .starting(nil) && orders == [.silence, .checkAt(nil)])
        let (byName, nameOrders) = HostPresence.registered(probesAddresses: false, now: Self.t0)
        let first = Self.t0 + EngineRules.quietStartDelay
        #expect(byName.phase == .starting(.init(sent: 0, next: first)) && nameOrders == [.silence, .checkAt(first)])
        #expect(!byName.spokeFor && byName.lastAwake == nil && byName.state == .starting)
    }

    @Test func fallingQuietSpeaksFromEveryPhaseButAsleep() {
        for var presence in [Self.starting(), Self.starting(byName: true)] {
            #expect(
                presence.fellQuiet(note: "n") == [.checkAt(nil), .speak, .changed(.asleep, why: "n")]
                    && presence.phase == .asleep && presence.spokeFor)
        }
        var asleep = Self.asleep()
        #expect(asleep.fellQuiet(note: "n").isEmpty, "nothing changes for a host already asleep")
        var awake = Self.asleep()
        _ = awake.ownerSeen(Self.signal, answeringAny: false)
        #expect(awake.fellQuiet(note: "n") == [.checkAt(nil), .speak, .changed(.asleep, why: "n")])
        var standby = Self.starting()
        _ = standby.peerClaimed()
        #expect(standby.fellQuiet(note: "n").contains(.speak) && standby.phase == .asleep)
    }

    @Test func resumingOnlyFromStarting() {
        var starting = Self.starting()
        #expect(starting.resumed() == [.checkAt(nil), .speak, .changed(.asleep, why: "after a restart")])
        var asleep = Self.asleep()
        #expect(asleep.resumed().isEmpty)
    }

    @Test func aSignOfLifeHandsBackOnlyOnceSpokenFor() {
        var asleep = Self.asleep()
        #expect(asleep.signOfLife(Self.signal, now: Self.t0) == [.handBack] && asleep.lastAwake == Self.signal)
        // Awake and standby hosts were spoken for once: a sign of life hands them back too.
        var awake = Self.asleep()
        _ = awake.ownerSeen(Self.signal, answeringAny: false)
        #expect(awake.signOfLife(Self.signal, now: Self.t0) == [.handBack])
        // Before the proxy ever spoke: still going to sleep; the name probes start over, not sooner than before.
        var byName = Self.starting(byName: true)
        let later = Self.t0 + .seconds(5)
        #expect(byName.signOfLife(Self.signal, now: later) == [.checkAt(later + EngineRules.quietProbeInterval)])
        var byAddress = Self.starting()
        #expect(byAddress.signOfLife(Self.signal, now: later).isEmpty && byAddress.lastAwake == Self.signal)
    }

    /// N questions for the name, each a probe interval apart; the check after the last unanswered one puts the
    /// host asleep (at N it asks once more, past N it speaks).
    @Test func nameChecksAskThenSpeak() {
        var presence = Self.starting(byName: true)
        var now = Self.t0 + EngineRules.quietStartDelay
        #expect(presence.nameCheckDue(now: now - .milliseconds(1)) == [.checkAt(now)], "not due yet")
        for sent in 1...EngineRules.quietProbeCount {
            let orders = presence.nameCheckDue(now: now)
            now = now + EngineRules.quietProbeInterval
            #expect(orders == [.askName, .checkAt(now)] && presence.phase == .starting(.init(sent: sent, next: now)))
        }
        #expect(presence.nameCheckDue(now: now) == [.checkAt(nil), .speak, .changed(.asleep, why: "no name answer")])
        var byAddress = Self.starting()
        #expect(byAddress.nameCheckDue(now: now).isEmpty, "a host probed by address has no name check")
    }

    @Test func ownerSeenEverywhereIsAwake() {
        var asleep = Self.asleep()
        #expect(asleep.ownerSeen(Self.signal, answeringAny: true).isEmpty, "still answered for on another address")
        #expect(asleep.phase == .asleep && asleep.lastAwake == Self.signal)
        #expect(
            asleep.ownerSeen(Self.signal, answeringAny: false) == [.silence, .changed(.awake, why: "answers itself")])
        var starting = Self.starting()
        #expect(starting.ownerSeen(Self.signal, answeringAny: false).isEmpty && starting.phase == .starting(nil))
    }

    @Test func aPeersClaimStandsBy() {
        for var presence in [Self.starting(), Self.asleep()] {
            #expect(presence.peerClaimed() == [.silence, .changed(.standby, why: "other proxy")])
            #expect(presence.phase == .standby && presence.peerClaimed().isEmpty)
        }
    }
}
