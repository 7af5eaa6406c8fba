import NIOCore
import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

@Suite("Address takeover and wake")
struct TakeoverTests {
    typealias H = TakeoverHarness
    static let hostV4 = IPv4Address(192, 0, 2, 2)

    @Test func probesThenAnnouncesAtZeroOneThreeSevenSeconds() throws {
        var h = H()
        let first = h.register()
        #expect(first.contains(.watchChanged(interfaceIndex: 2)))
        #expect(H.frames(first).isEmpty, "nothing before the start delay")
        let sent = H.frames(h.run(for: .seconds(15)))
        let arp: [(Timestamp, EthernetFrame, ARPPacket)] = sent.filter { $0.1.etherType == .arp }.map {
            ($0.0, $0.1, try! ARPPacket(decoding: $0.1.payload))
        }
        let probes = arp.filter { $0.2.isProbe }
        let expectedProbes: [Duration] = [.seconds(1), .seconds(2), .seconds(3)]
        let expectedAnnouncements: [Duration] = [.seconds(4), .seconds(5), .seconds(7), .seconds(11)]
        #expect(probes.map { $0.0 - Lab.t0 } == expectedProbes)
        #expect(
            probes.allSatisfy {
                $0.1.destination == Lab.hostMAC && $0.1.source == Lab.proxyMAC && $0.2.targetIP == Self.hostV4
            })
        let announcements = arp.filter { $0.2.isAnnouncement }
        #expect(announcements.map { $0.0 - Lab.t0 } == expectedAnnouncements)
        #expect(
            announcements.allSatisfy {
                $0.1.destination == .broadcast && $0.2.senderMAC == Lab.proxyMAC && $0.2.senderIP == Self.hostV4
            })
        // IPv6: DAD-style NS from :: unicast to the wake MAC, then unsolicited NAs with O to all nodes.
        var nd: [(Timestamp, EthernetFrame, IPv6Packet, NeighborDiscoveryMessage)] = []
        for (time, frame) in sent {
            if let (packet, message) = H.nd(frame) { nd.append((time, frame, packet, message)) }
        }
        let solicitations = nd.filter { $0.3.kind == .solicitation }
        #expect(
            solicitations.count == 3
                && solicitations.allSatisfy { $0.1.destination == Lab.hostMAC && $0.2.header.source.isUnspecified })
        let adverts = nd.filter { $0.3.kind == .advertisement }
        #expect(adverts.map { $0.0 - Lab.t0 } == expectedAnnouncements)
        #expect(
            adverts.allSatisfy {
                $0.3.flags == [.override] && $0.2.header.destination == .allNodes
                    && $0.3.targetLinkLayerAddress == Lab.proxyMAC
            })
        #expect(h.takeover.state(of: h.key)?.phase == .answering)
    }

    @Test func answersARPAndNeighbourSolicitationsOnceClaimed() throws {
        var h = H()
        h.register()
        _ = h.run(for: .seconds(3.5))
        // Not yet announced: a request is not answered (the host may still be up).
        #expect(
            H.frames(
                h.receive(
                    TestFrames.arpRequest(from: H.clientMAC, senderIP: IPv4Address(192, 0, 2, 20), for: Self.hostV4))
            ).isEmpty)
        _ = h.run(for: .seconds(1))
        let reply = try #require(
            H.frames(
                h.receive(
                    TestFrames.arpRequest(from: H.clientMAC, senderIP: IPv4Address(192, 0, 2, 20), for: Self.hostV4))
            ).first)
        let arp = try ARPPacket(decoding: reply.payload)
        #expect(reply.destination == H.clientMAC && reply.source == Lab.proxyMAC)
        #expect(
            arp.operation == .reply && arp.senderMAC == Lab.proxyMAC && arp.senderIP == Self.hostV4
                && arp.targetIP == IPv4Address(192, 0, 2, 20))
        // RFC 4861 §7.2.4: NS with a source → solicited NA unicast to it, S and O set.
        guard case .v6(let client) = H.clientV6, case .v6(let target) = H.hostGlobal else { return }
        let na = try #require(
            H.frames(h.receive(TestFrames.neighbourSolicitation(from: H.clientMAC, source: client, for: target))).first)
        let (packet, message) = try #require(H.nd(na))
        #expect(na.destination == H.clientMAC && packet.header.destination == client && packet.header.source == target)
        #expect(message.flags == [.solicited, .override] && message.targetLinkLayerAddress == Lab.proxyMAC)
        // An NS for an address nobody proxies is not ours to answer; nor is an ARP for the proxy's own address.
        #expect(
            H.frames(
                h.receive(
                    TestFrames.neighbourSolicitation(
                        from: H.clientMAC, source: client, for: IPv6Address("2001:db8::99")!))
            ).isEmpty)
        #expect(
            H.frames(
                h.receive(
                    TestFrames.arpRequest(
                        from: H.clientMAC, senderIP: IPv4Address(192, 0, 2, 20), for: IPv4Address(192, 0, 2, 1)))
            ).isEmpty)
    }

    @Test func aDADProbeByAnotherMachineIsDefendedAndWakesTheOwner() throws {
        var h = H()
        h.claimed()
        guard case .v6(let target) = H.hostGlobal else { return }
        let actions = h.receive(TestFrames.neighbourSolicitation(from: H.thirdMAC, source: .any, for: target))
        let frames = H.frames(actions)
        let defence = try #require(
            frames.compactMap(H.nd).first { $0.1.kind == .advertisement && $0.1.targetLinkLayerAddress == Lab.proxyMAC }
        )
        #expect(defence.0.header.destination == .allNodes && defence.1.flags == [.override])
        #expect(H.events(actions).first?.trigger == .addressConflict(address: .v6(target), from: H.thirdMAC))
        #expect(!H.magic(frames).isEmpty)
    }

    @Test func theOwnerAnsweringTheProbesPreventsTheTakeover() throws {
        var h = H()
        h.register()
        _ = h.run(for: .seconds(1.5))
        // The host is still awake and answers the probe from its own MAC.
        let reply = ARPPacket(
            operation: .reply, senderMAC: Lab.hostMAC, senderIP: Self.hostV4, targetMAC: Lab.proxyMAC, targetIP: .any)
        _ = h.receive(reply.frame(destination: Lab.proxyMAC, source: Lab.hostMAC).bytes)
        #expect(h.phase(of: Lab.hostV4) == .ownerSeen)
        // It keeps talking: every packet pushes the next probe out; nothing is ever announced meanwhile.
        var announced = false
        for _ in 0..<10 {
            announced =
                announced
                || H.frames(h.run(for: .milliseconds(500))).contains {
                    $0.1.etherType == .arp && (try? ARPPacket(decoding: $0.1.payload))?.isAnnouncement == true
                }
            _ = h.receive(TestFrames.arpAnnouncement(from: Lab.hostMAC, for: Self.hostV4))
        }
        #expect(!announced)
        // Then it falls asleep: probing resumes after the delay and the takeover completes.
        let later = H.frames(h.run(for: .seconds(15)))
        #expect(
            later.contains {
                $0.1.etherType == .arp && (try? ARPPacket(decoding: $0.1.payload))?.isAnnouncement == true
            })
        #expect(h.takeover.state(of: h.key)?.phase == .answering)
    }

    @Test func theOwnerSeenAfterTheTakeoverStopsAnsweringAndReprobesAfterTenSecondsAtMostTwentyTimes() throws {
        var h = H()
        h.claimed()
        let released = h.receive(TestFrames.arpAnnouncement(from: Lab.hostMAC, for: Self.hostV4))
        #expect(released.contains(.removeNeighbour(interfaceIndex: 2, address: Lab.hostV4)))
        #expect(
            H.frames(
                h.receive(
                    TestFrames.arpRequest(from: H.clientMAC, senderIP: IPv4Address(192, 0, 2, 20), for: Self.hostV4))
            ).isEmpty, "no answers once the owner is up")
        let reprobe = H.frames(h.run(for: .seconds(10.5)))
        #expect(reprobe.first.map { $0.0 - (Lab.t0 + .seconds(12)) } == .seconds(10))
        // Restarts: the 20th still reprobes, the 21st stops the takeover for this sleep epoch.
        for restart in 2...TakeoverRules.maximumProbeRestarts {
            _ = h.run(for: .seconds(15))
            #expect(h.phase(of: Lab.hostV4) == .answering, "restart \(restart)")
            _ = h.receive(TestFrames.arpAnnouncement(from: Lab.hostMAC, for: Self.hostV4))
            #expect(h.takeover.state(of: h.key)?.probeRestarts == restart)
        }
        _ = h.run(for: .seconds(15))
        _ = h.receive(TestFrames.arpAnnouncement(from: Lab.hostMAC, for: Self.hostV4))
        #expect(h.phase(of: Lab.hostV4) == .stopped)
        // The other address was never answered by the owner: it stays claimed (per-address takeover).
        #expect(h.phase(of: H.hostGlobal) == .answering && h.takeover.state(of: h.key)?.phase == .answering)
        #expect(H.frames(h.run(for: .seconds(60))).isEmpty)
    }

    @Test func aSYNToARegisteredPortWakesWithMagicPacketsUntilTheHostIsUp() throws {
        var h = H()
        h.claimed()
        let syn = TestFrames.tcp(
            from: H.clientMAC, to: Lab.proxyMAC, source: H.clientV4, destination: Lab.hostV4, sourcePort: 40001,
            port: 8080)
        #expect(H.events(h.receive(syn)).isEmpty, "held a moment first: a scan would show itself meanwhile")
        let actions = h.run(for: WakeRules.holdDelay).map(\.1)
        let wokenAt = h.now
        let event = try #require(H.events(actions).first)
        #expect(event.rule == .noScanSeen)
        #expect(
            event.kind == .wake
                && event.trigger
                    == .connection(transport: .tcp, client: IPAddress("192.0.2.20")!, clientPort: 40001, port: 8080)
        )
        let magic = H.magic(H.frames(actions))
        #expect(magic.map(\.destination) == [Lab.hostMAC, .broadcast])
        // No password registered: 102 bytes of payload, no zero trailer.
        #expect(
            magic.allSatisfy {
                Array($0.payload.readableBytesView) == MagicPacket(target: Lab.hostMAC).payload
                    && $0.payload.readableBytes == 102 && $0.source == Lab.proxyMAC
            })
        // Neighbours are not pointed at the host before it shows it is up (docs/waking.md §6): a host that does
        // not wake would be unreachable.
        #expect(
            !H.frames(actions).compactMap(H.nd).contains {
                $0.1.kind == .advertisement && $0.1.targetLinkLayerAddress == Lab.hostMAC
            })
        // A retransmitted SYN does not start a second sequence.
        #expect(H.magic(H.frames(h.receive(syn))).isEmpty)
        let repeats = H.frames(h.run(for: .seconds(5)))
        #expect(H.magic(repeats.map(\.1)).count == 4 && repeats.first.map { $0.0 - wokenAt } == .seconds(2))
        // The host wakes and announces itself: magic stops, the SYN is replayed to its MAC, the wake is logged.
        let wakeAt = h.now
        let up = h.receive(TestFrames.arpAnnouncement(from: Lab.hostMAC, for: Self.hostV4))
        let awake = try #require(H.events(up).first)
        #expect(awake.kind == .awake && awake.seconds == Double((wakeAt - wokenAt).nanosecondsClamped) / 1e9)
        // Before the replay, the neighbours learn that both addresses the proxy answered for are at the host's
        // MAC again (the client's ACK must reach the host, not the proxy).
        let sent = H.frames(up)
        let pointedBack = sent.firstIndex {
            $0.etherType == .arp && (try? ARPPacket(decoding: $0.payload))?.senderMAC == Lab.hostMAC
        }
        let advertised = sent.firstIndex {
            H.nd($0).map { $0.1.target == IPv6Address("2001:db8::2")! && $0.1.targetLinkLayerAddress == Lab.hostMAC }
                ?? false
        }
        let replayAt = sent.firstIndex { $0.etherType == .ipv4 }
        #expect(pointedBack != nil && advertised != nil && replayAt != nil)
        #expect(pointedBack! < replayAt! && advertised! < replayAt!)
        #expect(sent.allSatisfy { $0.source == Lab.proxyMAC })
        let replayed = sent.filter { $0.etherType == .ipv4 }
        #expect(
            replayed.count == 1 && replayed.first?.destination == Lab.hostMAC && replayed.first?.source == Lab.proxyMAC)
        // The same SYN, its checksums computed afresh (a capture can carry a checksum left to offload).
        let packet = try IPv4Packet(decoding: replayed.first!.payload)
        let segment = try TCPSegment(decoding: packet.payload)
        #expect(
            segment.sourcePort == 40001 && segment.destinationPort == 8080 && segment.flags == .syn
                && segment.sequenceNumber == 0x0102_0304)
        #expect(packet.header.checksumValid)
        #expect(
            InternetChecksum.ipv4(
                source: packet.header.source, destination: packet.header.destination, protocol: 6,
                payload: Array(packet.payload.readableBytesView)) == 0)
        #expect(H.magic(H.frames(h.run(for: .seconds(30)).map(\.1))).isEmpty)
    }

    @Test func magicPacketsCarryThePasswordOrAppleZerosWhenAsked() throws {
        let password = try #require(SecureOnPassword(bytes: [1, 2, 3, 4, 5, 6]))
        var h = H()
        h.register(Lab.registration(addresses: [Lab.hostV4], password: password))
        _ = h.run(for: .seconds(12))
        let frames = H.magic(H.frames(h.takeover.wake(h.key, trigger: .administrator, now: h.now)))
        #expect(
            frames.count == 2
                && frames.allSatisfy {
                    Array($0.payload.readableBytesView) == MagicPacket(target: Lab.hostMAC).payload + [
                        1, 2, 3, 4, 5, 6,
                    ]
                })
        var apple = H(configuration: TakeoverConfiguration(appendZeroPassword: true, udpMagicPacket: true))
        apple.claimed()
        let actions = apple.takeover.wake(apple.key, trigger: .administrator, now: apple.now)
        #expect(
            H.magic(H.frames(actions)).allSatisfy {
                $0.payload.readableBytes == 108 && Array($0.payload.readableBytesView.suffix(6)) == [0, 0, 0, 0, 0, 0]
            })
        #expect(
            actions.contains(
                .sendWakeDatagram(MagicPacket(target: Lab.hostMAC).payload + [0, 0, 0, 0, 0, 0], interfaceIndex: 2)))
    }

    @Test func fifteenAttemptsTwoSecondsApartThenNoResponseAndAHoldoff() throws {
        var h = H()
        h.claimed()
        let start = h.now
        var actions = h.takeover.wake(h.key, trigger: .administrator, now: h.now)
        let later = h.run(for: .seconds(40))
        actions += later.map(\.1)
        let bursts = H.frames(later).filter { $0.1.etherType == .wakeOnLAN && $0.1.destination != .broadcast }.map {
            $0.0 - start
        }
        #expect(bursts == (1..<TakeoverRules.maximumWakeAttempts).map { Duration.seconds(2 * $0) })
        let outcome = try #require(H.events(actions).last)
        #expect(outcome.kind == .noResponse && outcome.attempts == TakeoverRules.maximumWakeAttempts)
        // The proxy still holds the host and re-announces it; a new trigger within the holdoff starts nothing.
        #expect(h.takeover.state(of: h.key)?.phase == .answering)
        h.now = start + .seconds(30) + .seconds(5)
        #expect(H.magic(H.frames(h.takeover.wake(h.key, trigger: .administrator, now: h.now))).isEmpty)
        h.now = h.now + TakeoverRules.wakeHoldoff
        #expect(!H.magic(H.frames(h.takeover.wake(h.key, trigger: .administrator, now: h.now))).isEmpty)
    }

    /// docs/waking.md §6: the hold-off after an unanswered wake is for conflicts and admins; a connection the gate
    /// lets through wakes again at once, and the host stays answered for in between.
    @Test func afterAnUnansweredWakeTheNextRealConnectionWakesAgain() throws {
        var h = H()
        h.claimed()
        _ = h.takeover.wake(h.key, trigger: .administrator, now: h.now)
        let ended = H.events(h.run(for: .seconds(31)).map(\.1))
        #expect(ended.last?.kind == .noResponse)
        #expect(h.takeover.state(of: h.key)?.phase == .answering)
        let syn = TestFrames.tcp(
            from: H.clientMAC, to: Lab.proxyMAC, source: H.clientV4, destination: Lab.hostV4, sourcePort: 40009,
            port: 8080)
        let again = h.deliver(syn)
        #expect(!H.magic(H.frames(again)).isEmpty, "a real connection right after a failed wake must wake")
        #expect(H.events(again).first?.kind == .wake)
    }
}
