import NIOCore
import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

/// A proxy restarted beside another (docs/several-proxies.md): it comes back claiming the hosts it held before it
/// advertises itself again, and the other had forgotten it at its goodbye; each took the other's claim for a
/// conflict, and both woke the host.
@Suite("Other sleep proxies across a restart")
struct TakeoverPeersRestartTests {
    typealias H = TakeoverHarness
    typealias P = TakeoverPeersTests

    /// The peer's claim N after its goodbye is a proxy's (no wake); at the memory's end (N + 1) it is a stranger's
    /// again, a conflict that wakes the host.
    @Test func aProxyThatSaidGoodbyeIsStillKnownByItsMACForAWhile() {
        for (after, wakes) in [
            (PeerRules.departedPeerMemory - .nanoseconds(1), false), (PeerRules.departedPeerMemory, true),
        ] {
            var h = H()
            h.takeover.ownMetric = 20_40_10
            h.claimed()
            _ = P.advertised(&h, P.worse)
            _ = P.peerSaysItsMAC(&h)
            _ = P.advertised(&h, P.worse, ttl: 0)
            #expect(h.takeover.peers(on: "eth0").isEmpty, "a goodbye removes it from the list of proxies")
            h.now = h.now + after
            let claim = P.peerClaims(&h) + h.run(for: PeerRules.identifyDelay).map(\.1)
            #expect(!H.magic(H.frames(claim)).isEmpty == wakes, "\(after)")
            #expect(h.takeover.statistics.conflicts == (wakes ? 1 : 0))
            if !wakes { #expect(P.answersARP(&h), "the better metric keeps the host") }
        }
    }

    /// Advertising again brings it back to the list with its MAC.
    @Test func aDepartedProxyAdvertisingAgainIsKnownAgainWithItsMAC() {
        var h = H()
        h.claimed()
        _ = P.advertised(&h, P.worse)
        _ = P.peerSaysItsMAC(&h)
        _ = P.advertised(&h, P.worse, ttl: 0)
        _ = P.advertised(&h, P.worse)
        #expect(h.takeover.peers(on: "eth0").map(\.mac) == [P.peerMAC])
    }

    /// The restarted side: the proxies known before the stop, given back at the start, are known by their MACs,
    /// so the one that holds the host now is a proxy, not a conflict; only identified ones are kept for it.
    @Test func aRestartedProxyKnowsThePeersItKnewBefore() {
        var before = H()
        _ = P.advertised(&before, P.better)
        _ = P.peerSaysItsMAC(&before)
        _ = before.takeover.peerAdvertised(
            label: P.worse, ttl: 4500, from: IPAddress("192.0.2.8")!, interfaceIndex: 2, now: before.now)
        let remembered = before.takeover.identifiedPeers
        #expect(remembered.map(\.mac) == [P.peerMAC], "a proxy whose MAC is not known is not remembered")

        var after = H()
        after.takeover.ownMetric = 20_40_10
        after.takeover.restorePeers(remembered, now: after.now)
        after.claimed()
        let claim = P.peerClaims(&after)
        #expect(H.magic(H.frames(claim)).isEmpty && after.takeover.statistics.conflicts == 0)
        #expect(
            claim.contains { if case .peerClaim(_, _, false) = $0 { true } else { false } }, "the better one keeps it")
        #expect(!P.answersARP(&after))
    }
}

extension TakeoverPeersRestartTests {
    /// Where other proxies are known, the IPv4 address is asked for with its last probe, so it is claimed with the
    /// IPv6 one: asked a probe later, ARP went unanswered for a second while mDNS already spoke for the host.
    @Test func withOtherProxiesKnownBothFamiliesAreClaimedTogether() {
        var h = H()
        _ = P.advertised(&h, P.worse)
        _ = P.peerSaysItsMAC(&h)
        _ = h.register()
        let steps = h.run(for: .seconds(12))
        let claims = steps.compactMap { step -> (Timestamp, IPAddress)? in
            if case .claimed(_, let address) = step.1 { (step.0, address) } else { nil }
        }
        #expect(Set(claims.map(\.1)) == [Lab.hostV4, H.hostGlobal], "\(claims)")
        #expect(Set(claims.map(\.0)).count == 1, "claimed at different times: \(claims)")
        let asked = steps.filter { H.frames([$0.1]).contains { P.isWhoHas($0, P.hostV4) } }.map(\.0)
        #expect(asked.count == 1 && asked.first! < claims.first!.0, "asked once, before the claim")
    }
}
