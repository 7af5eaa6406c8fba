import NIOCore
import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

/// Two proxies holding one host (docs/several-proxies.md): a claim by a known proxy never
/// wakes the host; exactly one keeps answering; the other stands by and takes over, without a wake, when the
/// active one leaves. A claim by anyone else is still a conflict that wakes the owner.
@Suite("Other sleep proxies on the link")
struct TakeoverPeersTests {
    typealias H = TakeoverHarness
    static let peerMAC = MACAddress("02:53:50:00:00:09")!
    static let peerIP = IPv4Address(192, 0, 2, 9)
    static let hostV4 = IPv4Address(192, 0, 2, 2)
    /// Our harness proxy advertises 20-40-10 (204010); a better peer advertises 20-10-10, a worse 70-35-60.
    static let better = "20-10-10-40.0 Best Box"
    static let worse = "70-35-60-63.1 Living Room"

    static func advertised(_ h: inout H, _ label: String, ttl: UInt32 = 4500) -> [TakeoverAction] {
        h.takeover.peerAdvertised(label: label, ttl: ttl, from: .v4(Self.peerIP), interfaceIndex: 2, now: h.now)
    }

    /// The peer's kernel answering an ARP request for its own address (what our who-has asks).
    static func peerSaysItsMAC(_ h: inout H) -> [TakeoverAction] {
        h.receive(
            ARPPacket(
                operation: .reply, senderMAC: Self.peerMAC, senderIP: Self.peerIP, targetMAC: Lab.proxyMAC,
                targetIP: IPv4Address(192, 0, 2, 1)
            ).frame(destination: Lab.proxyMAC, source: Self.peerMAC).bytes)
    }

    /// The peer announcing (or answering for) the host's address.
    static func peerClaims(_ h: inout H) -> [TakeoverAction] {
        h.receive(TestFrames.arpAnnouncement(from: Self.peerMAC, for: Self.hostV4))
    }

    static func isWhoHas(_ frame: EthernetFrame, _ target: IPv4Address) -> Bool {
        guard frame.etherType == .arp, frame.destination == .broadcast,
            let arp = try? ARPPacket(decoding: frame.payload)
        else { return false }
        return arp.operation == .request && arp.targetIP == target && arp.senderIP == IPv4Address(192, 0, 2, 1)
    }

    static func answersARP(_ h: inout H) -> Bool {
        let request = TestFrames.arpRequest(from: H.clientMAC, senderIP: IPv4Address(192, 0, 2, 20), for: Self.hostV4)
        return H.frames(h.receive(request)).contains { $0.etherType == .arp && $0.destination == H.clientMAC }
    }

    /// A host this proxy (20-40-10) had claimed, then stood back for because a better proxy claimed it too.
    static func standingBy() -> H {
        var h = H()
        h.takeover.ownMetric = 20_40_10
        h.claimed()
        _ = Self.advertised(&h, Self.better)
        _ = Self.peerSaysItsMAC(&h)
        _ = Self.peerClaims(&h)
        return h
    }

    @Test func aWorsePeersClaimIsNoConflictAndThisProxyKeepsTheHost() {
        var h = H()
        h.takeover.ownMetric = 20_40_10
        h.claimed()
        _ = Self.advertised(&h, Self.worse)
        // Its MAC is not known yet: it is asked for, and the claim waits; no wake.
        let claim = Self.peerClaims(&h)
        #expect(H.frames(claim).contains { Self.isWhoHas($0, Self.peerIP) } && H.magic(H.frames(claim)).isEmpty)
        _ = Self.peerSaysItsMAC(&h)
        let settled = h.run(for: PeerRules.identifyDelay).map(\.1)
        #expect(H.magic(H.frames(settled)).isEmpty && H.events(settled).isEmpty, "a proxy's claim woke the host")
        #expect(settled.contains { if case .peerClaim(_, _, true) = $0 { true } else { false } })
        // Kept: the neighbours are pointed back at us, and we answer.
        #expect(H.frames(settled).contains { $0.etherType == .arp && $0.source == Lab.proxyMAC })
        #expect(Self.answersARP(&h))
        // Known now: its next claim is judged at once, still without a wake.
        #expect(H.magic(H.frames(Self.peerClaims(&h))).isEmpty)
        #expect(h.takeover.statistics.conflicts == 0 && h.takeover.statistics.peerClaims == 2)
    }

    @Test func aBetterPeersClaimPutsThisProxyOnStandbyUntilThePeerSaysGoodbye() {
        var h = H()
        h.takeover.ownMetric = 20_40_10
        h.claimed()
        _ = Self.advertised(&h, Self.better)
        _ = Self.peerSaysItsMAC(&h)
        let claim = Self.peerClaims(&h)
        #expect(claim.contains { if case .peerClaim(_, _, false) = $0 { true } else { false } })
        #expect(claim.contains(.removeNeighbour(interfaceIndex: 2, address: .v4(Self.hostV4))))
        #expect(H.magic(H.frames(claim)).isEmpty)
        #expect(!Self.answersARP(&h), "a standby must not answer for the host")
        #expect(h.takeover.state(of: h.key)?.phase == .standby)
        // It asks every 10 s whether the active proxy still answers; it does, for five minutes (thirty checks,
        // what the two-proxy lab scenario once waited in real time): no wake, no answer from this proxy.
        var everything: [TakeoverAction] = []
        for _ in 0..<Int(Duration.seconds(300) / PeerRules.standbyCheckInterval) {
            let checks = h.run(for: PeerRules.standbyCheckInterval).map(\.1)
            #expect(H.frames(checks).contains { Self.isWhoHas($0, Self.hostV4) })
            everything += checks + Self.peerClaims(&h)
        }
        #expect(H.magic(H.frames(everything)).isEmpty && !Self.answersARP(&h))
        #expect(h.takeover.state(of: h.key)?.phase == .standby)
        // The active proxy withdraws its advertisement: the host is ours at once, announced, and no wake.
        let goodbye = Self.advertised(&h, Self.better, ttl: 0)
        #expect(goodbye.contains { if case .tookOver = $0 { true } else { false } })
        #expect(goodbye.contains { if case .claimed = $0 { true } else { false } })
        let after = goodbye + h.run(for: .seconds(2)).map(\.1)
        #expect(H.magic(H.frames(after)).isEmpty)
        #expect(Self.answersARP(&h) && h.takeover.state(of: h.key)?.phase == .answering)
    }

    /// A new registration (a new sleep epoch: the host was awake in between) settles afresh who answers for it.
    @Test func aNewRegistrationEndsTheStandby() {
        var h = Self.standingBy()
        #expect(h.takeover.state(of: h.key)?.phase == .standby)
        h.register(
            Lab.registration(
                sequence: 1, addresses: [Lab.hostV4, H.hostGlobal],
                services: [("TestSvc._http._tcp", 8080), ("Shell._ssh._tcp", 22), ("Game._game._udp", 7000)]))
        #expect(h.takeover.state(of: h.key)?.phase == .starting)
    }

    @Test func aStandbyTakesOverWhenTheActiveProxyFallsSilent() {
        var h = Self.standingBy()
        // No answer to N checks: still standing by; to N+1: taken over, no wake.
        let waited = h.run(for: PeerRules.standbyCheckInterval * PeerRules.standbyMissedChecks).map(\.1)
        #expect(
            h.takeover.state(of: h.key)?.phase == .standby
                && !waited.contains { if case .tookOver = $0 { true } else { false } })
        let taken = h.run(for: PeerRules.standbyCheckInterval + .seconds(1)).map(\.1)
        #expect(taken.contains { if case .tookOver = $0 { true } else { false } })
        #expect(H.magic(H.frames(waited + taken)).isEmpty && Self.answersARP(&h))
    }

    /// Where a proxy is known, an address is asked for by broadcast before it is claimed: a proxy already
    /// answering for the host says so, and this one stands by without ever claiming (Apple's would wake the host).
    @Test func anAddressAnotherProxyAlreadyAnswersForIsNeverClaimedSecond() {
        var h = H()
        h.takeover.ownMetric = 10_10_10  // better than any peer: answering first still wins
        _ = Self.advertised(&h, Self.worse)
        _ = Self.peerSaysItsMAC(&h)
        h.register()
        var claimed = false
        var asked = false
        let end = h.now + .seconds(12)
        while let deadline = h.takeover.nextDeadline(), deadline <= end {
            h.now = max(h.now, deadline)
            let step = h.takeover.tick(now: h.now)
            if H.frames(step).contains(where: { Self.isWhoHas($0, Self.hostV4) }) {
                asked = true
                // The active proxy answers the broadcast for the host's address.
                _ = h.receive(
                    ARPPacket(
                        operation: .reply, senderMAC: Self.peerMAC, senderIP: Self.hostV4, targetMAC: Lab.proxyMAC,
                        targetIP: IPv4Address(192, 0, 2, 1)
                    ).frame(destination: Lab.proxyMAC, source: Self.peerMAC).bytes)
            }
            if step.contains(where: { if case .claimed(_, .v4) = $0 { true } else { false } }) { claimed = true }
        }
        #expect(asked && !claimed, "claimed an address another proxy already answered for")
        #expect(h.takeover.state(of: h.key)?.addresses.first { $0.0 == .v4(Self.hostV4) }?.1 == .standby)
    }

    /// A host handed to us by a proxy that is leaving: that proxy's last answers for the host (it drops the host
    /// a moment after our acceptance) are no reason to stand by for it.
    @Test func theLeavingProxysLastAnswersAreNoReasonToStandBy() {
        var h = H()
        h.takeover.ownMetric = 80_40_60  // worse: without the hand-over, its claim would make us stand by
        _ = Self.advertised(&h, Self.better)
        _ = Self.peerSaysItsMAC(&h)
        h.register()
        h.takeover.handedOver(h.key, by: .v4(Self.peerIP), now: h.now)
        #expect(Self.peerClaims(&h).isEmpty)
        _ = h.run(for: .seconds(12))
        #expect(h.takeover.state(of: h.key)?.phase == .answering, "the handed-over host must be taken over")
    }

    /// A host handed over sleeps already: its addresses are probed at once, 200 ms apart, with no extra check
    /// for another proxy, and claimed 0.6 s after the hand-over (N probes); a moment before, not yet. A host going
    /// to sleep is still given Apple's second before and between its probes.
    @Test func aHandedOverHostIsClaimedWithinASecond() {
        var h = H()
        _ = Self.advertised(&h, Self.better)
        _ = Self.peerSaysItsMAC(&h)
        h.register()
        let start = h.now
        h.takeover.handedOver(h.key, by: .v4(Self.peerIP), now: h.now)
        let claimedAt = TakeoverRules.handoverProbeInterval * TakeoverRules.probeCount
        let before = h.run(for: claimedAt - .nanoseconds(1)).map(\.1)
        #expect(!before.contains { if case .claimed = $0 { true } else { false } })
        #expect(H.frames(before).filter { $0.etherType == .arp }.count == TakeoverRules.probeCount)
        let at = h.run(for: .nanoseconds(1)).map(\.1)
        #expect(at.contains { if case .claimed = $0 { true } else { false } }, "claimed \(h.now - start) after")
        // A handed-over host that shows itself awake is a host like any other again: probed a second apart later.
        var awake = H()
        awake.register()
        awake.takeover.handedOver(awake.key, by: .v4(Self.peerIP), now: awake.now)
        _ = awake.receive(TestFrames.arpAnnouncement(from: Lab.hostMAC, for: Self.hostV4))
        let later = awake.run(for: .seconds(30)).filter { step in
            H.frames([step.1]).contains {
                $0.etherType == .arp && $0.destination == Lab.hostMAC
                    && (try? ARPPacket(decoding: $0.payload))?.targetIP == Self.hostV4
            }
        }.map(\.0)
        #expect(later.count >= 2 && zip(later, later.dropFirst()).allSatisfy { $1 - $0 >= TakeoverRules.probeInterval })
        var going = H()
        _ = Self.advertised(&going, Self.better)
        _ = Self.peerSaysItsMAC(&going)
        going.register()
        #expect(!going.run(for: .seconds(3)).contains { if case .claimed = $0.1 { true } else { false } })
    }

    /// While this proxy wakes the host for a client, a better proxy's claim does not make it drop the wake: the
    /// client's request is delivered, and the wake ends with its outcome in the log.
    @Test func aPeersClaimDuringOurWakeLeavesTheWakeGoing() {
        var h = H()
        h.takeover.ownMetric = 20_40_10
        h.claimed()
        _ = Self.advertised(&h, Self.better)
        _ = Self.peerSaysItsMAC(&h)
        _ = h.takeover.wake(h.key, trigger: .administrator, now: h.now)
        let claim = Self.peerClaims(&h)
        #expect(claim.contains { if case .peerClaim(_, _, true) = $0 { true } else { false } })
        #expect(h.takeover.isWaking(h.key) && h.takeover.state(of: h.key)?.phase == .answering)
        #expect(!H.magic(H.frames(h.run(for: .seconds(3)).map(\.1))).isEmpty, "the wake goes on")
    }

    /// A flood of claims while a proxy's MAC is unknown asks that proxy once per wait, not once per claim.
    @Test func claimsAskEachProxyForItsMACOncePerWait() {
        var h = H()
        h.claimed()
        _ = Self.advertised(&h, Self.worse)
        var requests = 0
        for index in 0..<20 {
            let frame = TestFrames.arpAnnouncement(
                from: MACAddress(rawValue: 0x0253_5000_0500 + UInt64(index)), for: Self.hostV4)
            requests += H.frames(h.receive(frame)).filter { Self.isWhoHas($0, Self.peerIP) }.count
        }
        #expect(requests == 1)
        h.now = h.now + PeerRules.identifyDelay
        requests = H.frames(Self.peerClaims(&h)).filter { Self.isWhoHas($0, Self.peerIP) }.count
        #expect(requests == 1, "asked again once the wait is over")
    }

    @Test func aThirdMachineIsStillAConflictThatWakes() {
        var h = H()
        h.claimed()
        _ = Self.advertised(&h, Self.better)
        // The proxy's MAC is asked for first; the claimant is not it: the owner is woken.
        _ = h.receive(TestFrames.arpAnnouncement(from: H.thirdMAC, for: Self.hostV4))
        _ = Self.peerSaysItsMAC(&h)
        let settled = h.run(for: PeerRules.identifyDelay).map(\.1)
        #expect(!H.magic(H.frames(settled)).isEmpty)
        #expect(H.events(settled).first?.trigger == .addressConflict(address: .v4(Self.hostV4), from: H.thirdMAC))
    }

    @Test func thePeerTableIsBoundedAndOurOwnAdvertisementIsNotAPeer() {
        var h = H()
        for n in 0..<(PeerRules.maximumPeers + 5) {
            _ = h.takeover.peerAdvertised(
                label: Self.worse, ttl: 4500, from: .v4(IPv4Address(192, 0, 2, UInt8(100 + n))), interfaceIndex: 2,
                now: h.now)
        }
        _ = h.takeover.peerAdvertised(
            label: Self.better, ttl: 4500, from: .v4(IPv4Address(192, 0, 2, 1)), interfaceIndex: 2, now: h.now)
        #expect(h.takeover.peers(on: "eth0").count == PeerRules.maximumPeers)
        #expect(!h.takeover.peers(on: "eth0").contains { $0.address == .v4(IPv4Address(192, 0, 2, 1)) })
    }
}

/// `release-all --transfer` in the composed engine: the plan, what the other proxy makes of it, and the end.
@Suite("Handing hosts to another proxy")
struct HostTransferTests {
    typealias H = EngineHarness
    static let peer = IPAddress("192.0.2.9")!

    /// The other proxy's announcement, as it multicasts it: its PTR and SRV (registration port 5599).
    static func announcement() -> DNSMessage {
        let instance: DNSName = "70-35-60-63.1 Living Room._sleep-proxy._udp.local."
        return DNSMessage(
            flags: DNSHeaderFlags(response: true, authoritative: true),
            answers: [
                DNSResourceRecord(
                    name: "_sleep-proxy._udp.local.", ttl: 4500, rdata: .ptr(PTRRecord(target: instance))),
                DNSResourceRecord(
                    name: instance, cacheFlush: true, ttl: 120, rdata: .srv(SRVRecord(port: 5599, target: "tv.local."))),
            ])
    }

    @Test func thePlanHandsEachHostWithItsOwnOwnerOptionAndOnlyAKnownProxyMaySendIt() throws {
        var h = H()
        h.register()
        h.run(for: .seconds(12))
        h.mdns(Self.announcement(), from: Self.peer)
        let plan = h.engine.transferPlan(now: h.now)
        let transfer = try #require(plan.first)
        #expect(plan.count == 1 && transfer.peer.address == Self.peer && transfer.peer.port == 5599)
        #expect(transfer.source == IPAddress("192.0.2.1")! && transfer.key == h.key)
        // What the other proxy receives: the same records and the host's own Owner option.
        let held = try #require(h.engine.registrar.store[h.key])
        var receiver = Registrar(configuration: RegistrationConfiguration())
        let outcome = receiver.handle(
            datagram: try #require(transfer.messages.first), from: Self.peer, on: Lab.eth0, fromPeer: true, now: h.now)
        guard case .accepted(let acceptance) = outcome else {
            Issue.record("a proxy's hand-over was refused: \(outcome)")
            return
        }
        #expect(acceptance.registration.owner == held.owner)
        #expect(Set(acceptance.registration.records.map(\.record)) == Set(held.records.map(\.record)))
        // From a source that is neither the host nor a known proxy, the same bytes are refused.
        var stranger = Registrar(configuration: RegistrationConfiguration())
        let refused = stranger.handle(
            datagram: try #require(transfer.messages.first), from: Self.peer, on: Lab.eth0, now: h.now)
        guard case .refused(.sourceNotClaimed, _) = refused else {
            Issue.record("accepted from a stranger: \(refused)")
            return
        }
    }

    @Test func aTakenHostIsDroppedSilentlyAndTheOthersAreWoken() throws {
        var taken = H()
        taken.register()
        taken.run(for: .seconds(12))
        let actions = taken.engine.finishTransfers(taken: [taken.key: "Living Room"], now: taken.now)
        #expect(H.journal(actions) == [.remove(taken.key)] && taken.engine.registrar.store.hostCount == 0)
        #expect(
            H.logs(actions).contains(
                "admin: release-all --transfer: 1 hosts taken by other proxies, 0 woken and released"))
        let after = actions + taken.run(for: .seconds(10)).map(\.1)
        #expect(H.hostRecordsSent(after).isEmpty, "no goodbyes: the other proxy answers for it now")
        #expect(!H.frames(after).contains(where: H.isMagic), "no wake")

        var left = H()
        left.register()
        left.run(for: .seconds(12))
        let wakes = left.engine.finishTransfers(taken: [:], now: left.now)
        #expect(H.journal(wakes) == [.remove(left.key)] && H.frames(wakes).contains(where: H.isMagic))
    }
}
