import NIOCore
import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

/// Drives the pure takeover state machine with explicit time and decodes every frame it wants sent.
struct TakeoverHarness {
    static let clientMAC = MACAddress("02:53:50:00:00:20")!
    static let clientV4 = IPAddress("192.0.2.20")!
    static let clientV6 = IPAddress("2001:db8::20")!
    static let thirdMAC = MACAddress("02:53:50:00:00:33")!
    static let hostGlobal = IPAddress("2001:db8::2")!

    var registrar = Registrar(
        configuration: {
            var c = RegistrationConfiguration(); c.requireSourceAmongClaimedAddresses = false; return c
        }())
    var takeover: Takeover
    var now = Lab.t0
    var key: OwnerKey { OwnerKey(interface: "eth0", primaryMAC: Lab.hostMAC) }

    init(configuration: TakeoverConfiguration = TakeoverConfiguration()) {
        self.takeover = Takeover(configuration: configuration)
        _ = self.takeover.setInterfaces([Lab.eth0])
    }

    @discardableResult
    mutating func register(
        _ message: DNSMessage = Lab.registration(
            addresses: [Lab.hostV4, hostGlobal],
            services: [("TestSvc._http._tcp", 8080), ("Shell._ssh._tcp", 22), ("Game._game._udp", 7000)])
    ) -> [TakeoverAction] {
        let outcome = self.registrar.handle(
            datagram: message.encoded(options: .appleUpdate), from: Lab.hostV4, on: Lab.eth0, now: self.now)
        guard case .accepted(let acceptance) = outcome else { fatalError("not accepted: \(outcome)") }
        return self.takeover.registered(acceptance.registration, now: self.now)
    }

    mutating func run(for duration: Duration) -> [(Timestamp, TakeoverAction)] {
        let end = self.now + duration
        var actions: [(Timestamp, TakeoverAction)] = []
        while let deadline = self.takeover.nextDeadline(), deadline <= end {
            self.now = max(self.now, deadline)
            actions += self.takeover.tick(now: self.now).map { (self.now, $0) }
        }
        self.now = end
        return actions
    }

    /// Registers and lets probing and the announcements finish: the proxy answers for the host.
    mutating func claimed() {
        self.register()
        _ = self.run(for: .seconds(12))
    }

    /// The takeover's phase for one address (the state is per address, docs/protocol.md §5.2).
    func phase(of address: IPAddress) -> AddressState? {
        self.takeover.state(of: self.key)?.addresses.first { $0.0 == address }?.1
    }

    mutating func receive(_ frame: [UInt8], outgoing: Bool = false) -> [TakeoverAction] {
        self.takeover.receive(frame: frame, interfaceIndex: Lab.eth0.index, outgoing: outgoing, now: self.now)
    }

    /// A frame, then the wake gate's hold run out (docs/waking.md): all the frame leads to.
    mutating func deliver(_ frame: [UInt8], outgoing: Bool = false) -> [TakeoverAction] {
        self.receive(frame, outgoing: outgoing) + self.run(for: WakeRules.holdDelay).map(\.1)
    }

    static func frames(_ actions: [TakeoverAction]) -> [EthernetFrame] {
        actions.compactMap {
            if case .sendFrame(let bytes, _) = $0 {
                return try? EthernetFrame(decoding: ByteBuffer(bytes: bytes))
            } else {
                return nil
            }
        }
    }

    static func frames(_ actions: [(Timestamp, TakeoverAction)]) -> [(Timestamp, EthernetFrame)] {
        var result: [(Timestamp, EthernetFrame)] = []
        for (time, action) in actions {
            if case .sendFrame(let bytes, _) = action,
                let frame = try? EthernetFrame(decoding: ByteBuffer(bytes: bytes))
            {
                result.append((time, frame))
            }
        }
        return result
    }

    static func events(_ actions: [TakeoverAction]) -> [WakeEvent] {
        actions.compactMap { if case .event(let event) = $0 { return event } else { return nil } }
    }

    static func magic(_ frames: [EthernetFrame]) -> [EthernetFrame] { frames.filter { $0.etherType == .wakeOnLAN } }

    static func nd(_ frame: EthernetFrame) -> (IPv6Packet, NeighborDiscoveryMessage)? {
        guard frame.etherType == .ipv6, let packet = try? IPv6Packet(decoding: frame.payload),
            let message = try? NeighborDiscoveryMessage(decoding: packet)
        else { return nil }
        return (packet, message)
    }
}

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

    @Test func nothingButRegisteredServiceTrafficWakes() throws {
        var h = H()
        h.claimed()
        func wakes(_ frame: [UInt8]) -> Bool { !H.magic(H.frames(h.deliver(frame))).isEmpty }
        let c = H.clientMAC, p = Lab.proxyMAC
        #expect(
            !wakes(TestFrames.tcp(from: c, to: p, source: H.clientV4, destination: Lab.hostV4, port: 9999)),
            "unregistered port")
        #expect(!wakes(TestFrames.ping(from: c, to: p, source: H.clientV4, destination: Lab.hostV4)), "ICMP")
        #expect(!wakes(TestFrames.ping(from: c, to: p, source: H.clientV6, destination: H.hostGlobal)), "ICMPv6")
        #expect(
            !wakes(TestFrames.udp(from: c, to: p, source: H.clientV4, destination: Lab.hostV4, port: 7001)),
            "unregistered UDP port")
        #expect(
            !wakes(
                TestFrames.udp(from: c, to: p, source: H.clientV4, destination: IPAddress("192.0.2.255")!, port: 7000)),
            "broadcast")
        #expect(
            !wakes(
                TestFrames.tcp(from: c, to: p, source: H.clientV4, destination: Lab.hostV4, port: 8080, flags: .rst)),
            "RST")
        #expect(
            !wakes(
                TestFrames.tcp(
                    from: c, to: p, source: H.clientV4, destination: Lab.hostV4, port: 8080, flags: [.fin, .ack])),
            "FIN")
        #expect(
            !wakes(
                TestFrames.tcp(
                    from: c, to: p, source: H.clientV4, destination: Lab.hostV4, port: 8080, flags: [.syn, .ack])),
            "SYN-ACK")
        #expect(
            !wakes(
                TestFrames.tcp(
                    from: c, to: p, source: H.clientV4, destination: Lab.hostV4, port: 8080, flags: [.ack, .psh])),
            "data to a non-SSH port")
        #expect(
            !wakes(
                TestFrames.tcp(from: c, to: p, source: H.clientV4, destination: IPAddress("192.0.2.77")!, port: 8080)),
            "another address")
        #expect(
            !wakes(
                TestFrames.udp(from: c, to: p, source: H.clientV4, destination: Lab.hostV4, port: 4500, payload: [0xFF])
            ), "NAT-T keepalive")
        // The one ignored SYN is logged, once per port and minute.
        #expect(
            H.events(h.receive(TestFrames.tcp(from: c, to: p, source: H.clientV4, destination: Lab.hostV4, port: 9999)))
                .isEmpty)
        // Two SYNs and a datagram to ports without a service: each counted, and the repeat told once.
        #expect(h.takeover.statistics.ignoredConnections == 3 && h.takeover.statistics.wakes == 0)
        // SSH data (not only a SYN) wakes a host that registered _ssh._tcp.
        #expect(
            wakes(
                TestFrames.tcp(
                    from: c, to: p, source: H.clientV4, destination: Lab.hostV4, port: 22, flags: [.ack, .psh])))
    }

    @Test func theFirstIgnoredSYNIsLoggedAndUDPAndIPv6SYNsWake() throws {
        var h = H()
        h.claimed()
        let ignored = H.events(
            h.receive(
                TestFrames.tcp(
                    from: H.clientMAC, to: Lab.proxyMAC, source: H.clientV6, destination: H.hostGlobal, port: 445)))
        #expect(
            ignored.map(\.kind) == [.ignored]
                && ignored.first?.trigger
                    == .connection(transport: .tcp, client: IPAddress("2001:db8::20")!, clientPort: 50000, port: 445)
        )
        let udp = h.deliver(
            TestFrames.udp(from: H.clientMAC, to: Lab.proxyMAC, source: H.clientV4, destination: Lab.hostV4, port: 7000)
        )
        #expect(
            H.events(udp).first?.trigger
                == .connection(transport: .udp, client: IPAddress("192.0.2.20")!, clientPort: 50000, port: 7000))
        var v6 = H()
        v6.claimed()
        #expect(
            !H.magic(
                H.frames(
                    v6.deliver(
                        TestFrames.tcp(
                            from: H.clientMAC, to: Lab.proxyMAC, source: H.clientV6, destination: H.hostGlobal,
                            port: 8080)))
            ).isEmpty)
    }

    @Test func theProxyMachinesOwnConnectionWakesAndItsKernelGetsANeighbourEntry() throws {
        var h = H()
        let claim = h.register() + h.run(for: .seconds(12)).map(\.1)
        #expect(claim.contains(.setNeighbour(interfaceIndex: 2, address: Lab.hostV4, mac: Lab.hostMAC)))
        // Our own ARP probes and announcements, seen going out, change nothing; the kernel's own request does.
        #expect(
            h.receive(
                ARPPacket.announcement(from: Lab.proxyMAC, for: Self.hostV4).frame(
                    destination: .broadcast, source: Lab.proxyMAC
                ).bytes, outgoing: true
            ).isEmpty)
        #expect(
            h.receive(
                TestFrames.arpRequest(from: Lab.proxyMAC, senderIP: IPv4Address(192, 0, 2, 1), for: Self.hostV4),
                outgoing: true)
                == [.setNeighbour(interfaceIndex: 2, address: Lab.hostV4, mac: Lab.hostMAC)])
        let syn = TestFrames.tcp(
            from: Lab.proxyMAC, to: Lab.hostMAC, source: IPAddress("192.0.2.1")!, destination: Lab.hostV4, port: 8080)
        #expect(!H.magic(H.frames(h.deliver(syn, outgoing: true))).isEmpty)
    }

    @Test func anotherMachineClaimingTheAddressWakesTheOwner() throws {
        var h = H()
        h.claimed()
        let actions = h.receive(TestFrames.arpAnnouncement(from: H.thirdMAC, for: Self.hostV4))
        #expect(
            H.events(actions).first?.trigger == .addressConflict(address: IPAddress("192.0.2.2")!, from: H.thirdMAC))
        #expect(!H.magic(H.frames(actions)).isEmpty)
        // An ARP probe (sender 0.0.0.0) is only defended, as Apple does: it claims nothing yet.
        var probe = H()
        probe.claimed()
        let defended = probe.receive(
            ARPPacket.probe(from: H.thirdMAC, for: Self.hostV4).frame(destination: .broadcast, source: H.thirdMAC).bytes
        )
        #expect(H.magic(H.frames(defended)).isEmpty && H.frames(defended).count == 1)
    }

    @Test func handBackReleasesSilentlyAndExpiryWakes() throws {
        var h = H()
        h.claimed()
        _ = h.takeover.wake(h.key, trigger: .administrator, now: h.now)
        let handBack = h.takeover.removed(h.key, endsWake: true, wake: true, now: h.now + .seconds(1))
        #expect(H.events(handBack).map(\.kind) == [.awake])
        #expect(handBack.contains(.removeNeighbour(interfaceIndex: 2, address: Lab.hostV4)))
        #expect(h.takeover.hostCount == 0 && h.takeover.watchedAddresses(interfaceIndex: 2).isEmpty)
        var e = H()
        e.claimed()
        let expiry = e.takeover.removed(e.key, endsWake: false, wake: true, now: e.now)
        #expect(H.events(expiry).first?.trigger == .leaseExpired && !H.magic(H.frames(expiry)).isEmpty)
        #expect(
            H.frames(
                e.receive(
                    TestFrames.arpRequest(from: H.clientMAC, senderIP: IPv4Address(192, 0, 2, 20), for: Self.hostV4))
            ).isEmpty, "no longer proxied")
        _ = e.run(for: .seconds(40))
        #expect(e.takeover.hostCount == 0, "forgotten after the last attempt")
    }

    @Test func wakePolicyAddsAndRemovesPortsGloballyAndPerHost() throws {
        var policy = WakePolicy()
        try policy.add(rule: "tcp/445")
        try policy.add(rule: "-tcp/8080")
        try policy.add(rule: "\(Lab.hostMAC)@tcp/8080")
        try policy.add(rule: "-\(Lab.hostMAC)@udp/7000")
        #expect(throws: WakePolicy.ParseError.self) { try policy.add(rule: "tcp/0") }
        #expect(throws: WakePolicy.ParseError.self) { try policy.add(rule: "sctp/80") }
        #expect(throws: WakePolicy.ParseError.self) { try policy.add(rule: "02:00@tcp/80") }
        #expect(throws: WakePolicy.ParseError.self) { try policy.add(rule: "tcp/65536") }
        // One client wakes the host several times here: no monitor budget, which WakeGateTests cover.
        var h = H(configuration: TakeoverConfiguration(policy: policy, monitorHoldoff: .zero))
        h.claimed()
        func wakes(_ frame: [UInt8]) -> Bool {
            let actions = h.deliver(frame)
            if let index = actions.firstIndex(where: {
                if case .event(let e) = $0 { return e.kind == .wake } else { return false }
            }) {
                _ = index
                _ = h.takeover.removed(h.key, endsWake: true, wake: false, now: h.now)
                h.register()
                _ = h.run(for: .seconds(12))
                return true
            }
            return false
        }
        #expect(
            wakes(
                TestFrames.tcp(
                    from: H.clientMAC, to: Lab.proxyMAC, source: H.clientV4, destination: Lab.hostV4, port: 445)))
        #expect(
            wakes(
                TestFrames.tcp(
                    from: H.clientMAC, to: Lab.proxyMAC, source: H.clientV4, destination: Lab.hostV4, port: 8080)),
            "the host rule beats the global removal")
        #expect(
            !wakes(
                TestFrames.udp(
                    from: H.clientMAC, to: Lab.proxyMAC, source: H.clientV4, destination: Lab.hostV4, port: 7000)))
    }

    @Test func hostileFramesAreDroppedAtEveryTruncation() throws {
        var h = H()
        h.claimed()
        guard case .v6(let client) = H.clientV6, case .v6(let target) = H.hostGlobal else { return }
        let frames = [
            TestFrames.tcp(
                from: H.clientMAC, to: Lab.proxyMAC, source: H.clientV4, destination: Lab.hostV4, port: 8080),
            TestFrames.tcp(
                from: H.clientMAC, to: Lab.proxyMAC, source: H.clientV6, destination: H.hostGlobal, port: 8080),
            TestFrames.udp(
                from: H.clientMAC, to: Lab.proxyMAC, source: H.clientV4, destination: Lab.hostV4, port: 7000),
            TestFrames.arpRequest(from: H.clientMAC, senderIP: IPv4Address(192, 0, 2, 20), for: Self.hostV4),
            TestFrames.neighbourSolicitation(from: H.clientMAC, source: client, for: target),
        ]
        for frame in frames {
            for length in 0..<frame.count {
                _ = h.receive(Array(frame.prefix(length)))
            }
        }
        // Frames cut inside their headers were dropped, not acted on; none of it broke the state.
        #expect(h.takeover.state(of: h.key)?.phase == .answering)
        #expect(h.takeover.statistics.malformedFrames > 0)
        // A neighbour solicitation with a bad checksum or hop limit is not answered.
        var bad = TestFrames.neighbourSolicitation(from: H.clientMAC, source: client, for: target)
        bad[14 + 7] = 64
        #expect(H.frames(h.receive(bad)).isEmpty)
    }

    /// The timer heap (`Takeover.HostTable`) against a walk over every host, after every step of a mixed run:
    /// hosts registering at staggered times, owners answering, wakes, removals and re-registrations.
    @Test func timersStayInStepWithTheHostsWhateverHappens() {
        var h = H()
        var generator = SplitMix64(seed: 0x5EED)
        var keys: [OwnerKey] = []
        func walked(_ takeover: Takeover) -> Timestamp? {
            takeover.hosts.values.flatMap { [$0.next, $0.wake?.next] }.compactMap { $0 }.min()
        }
        for step in 0..<400 {
            h.now = h.now + .milliseconds(Int64(generator.next() % 700))
            let n = Int(generator.next() % 40)
            let mac = MACAddress(rawValue: 0x0253_5000_2000 + UInt64(n))
            let key = OwnerKey(interface: "eth0", primaryMAC: mac)
            switch generator.next() % 6 {
            case 0, 1:
                let outcome = h.registrar.handle(
                    datagram: Lab.registration(
                        id: UInt16(step), mac: mac, host: try! DNSName(parsing: "h\(n).local."),
                        addresses: [.v4(IPv4Address(rawValue: 0xC000_0240 + UInt32(n)))]
                    ).encoded(options: .appleUpdate), from: Lab.hostV4, on: Lab.eth0, now: h.now)
                if case .accepted(let acceptance) = outcome {
                    _ = h.takeover.registered(acceptance.registration, now: h.now)
                    keys.append(key)
                }
            case 2: _ = h.takeover.ownerActive(key, now: h.now)
            case 3: _ = h.takeover.wake(key, trigger: .administrator, now: h.now)
            case 4: _ = h.takeover.removed(key, endsWake: false, wake: generator.next() % 2 == 0, now: h.now)
            default:
                if let deadline = h.takeover.nextDeadline(), deadline <= h.now { _ = h.takeover.tick(now: h.now) }
            }
            #expect(h.takeover.nextDeadline() == walked(h.takeover), "step \(step)")
        }
        // Run everything out: nothing due is ever left behind.
        _ = h.run(for: .seconds(120))
        #expect(!h.takeover.hosts.values.contains { $0.next.map { $0 <= h.now } ?? false }, "a due host was skipped")
        #expect(h.takeover.nextDeadline() == walked(h.takeover))
        #expect(!keys.isEmpty)
    }

    /// The capture filter's watch list: each family listed up to the limit, "the whole family" past it (N and
    /// N+1), counted as hosts come and go rather than by walking them.
    @Test func theWatchListNamesAddressesUpToTheLimitAndTheWholeFamilyPastIt() {
        var h = H()
        let limit = 3
        func register(_ n: Int) -> OwnerKey {
            let mac = MACAddress(rawValue: 0x0253_5000_4000 + UInt64(n))
            let outcome = h.registrar.handle(
                datagram: Lab.registration(
                    id: UInt16(n), mac: mac, host: try! DNSName(parsing: "w\(n).local."),
                    addresses: [
                        .v4(IPv4Address(rawValue: 0xC000_0250 + UInt32(n))),
                        .v6(IPv6Address(high: 0x2001_0DB8_0000_0000, low: 0x4000 + UInt64(n))),
                    ]
                ).encoded(options: .appleUpdate), from: Lab.hostV4, on: Lab.eth0, now: h.now)
            guard case .accepted(let acceptance) = outcome else { fatalError("\(outcome)") }
            _ = h.takeover.registered(acceptance.registration, now: h.now)
            return acceptance.registration.key
        }
        var keys: [OwnerKey] = []
        for n in 0..<limit { keys.append(register(n)) }
        var list = h.takeover.watchList(interfaceIndex: Lab.eth0.index, limit: limit)
        #expect(list.v4?.count == limit && list.v6?.count == limit)
        #expect(h.takeover.watchedAddresses(interfaceIndex: Lab.eth0.index).count == 2 * limit)
        keys.append(register(limit))
        list = h.takeover.watchList(interfaceIndex: Lab.eth0.index, limit: limit)
        #expect(list.v4 == nil && list.v6 == nil)
        h.takeover.forget(keys.removeLast())
        list = h.takeover.watchList(interfaceIndex: Lab.eth0.index, limit: limit)
        #expect(list.v4?.count == limit && list.v6?.count == limit)
        #expect(h.takeover.watchList(interfaceIndex: 99, limit: limit).v4 == [])
    }

    /// One timer pass steps at most `maximumHostsPerTick` hosts (N and N+1); the others stay due for the next.
    @Test func aTimerPassStepsAtMostItsLimitOfHosts() {
        let limit = TakeoverRules.maximumHostsPerTick
        for count in [limit, limit + 1] {
            var h = H()
            h.registrar = Registrar(
                configuration: RegistrationConfiguration(
                    maximumHosts: 1_000, requireSourceAmongClaimedAddresses: false, rateLimitBurst: 1 << 30,
                    rateLimitPerSecond: 1 << 30))
            for n in 0..<count {
                let outcome = h.registrar.handle(
                    datagram: Lab.registration(
                        id: UInt16(n), mac: MACAddress(rawValue: 0x0253_5000_5000 + UInt64(n)),
                        host: try! DNSName(parsing: "t\(n).local."),
                        addresses: [.v6(IPv6Address(high: 0x2001_0DB8_0000_0000, low: 0x5000 + UInt64(n)))]
                    ).encoded(options: .appleUpdate), from: Lab.hostV4, on: Lab.eth0, now: h.now)
                guard case .accepted(let acceptance) = outcome else { fatalError("\(outcome)") }
                _ = h.takeover.registered(acceptance.registration, now: h.now)
            }
            let due = h.takeover.nextDeadline()!
            let first = H.frames(h.takeover.tick(now: due))
            #expect(first.count == limit, "one probe per stepped host")
            #expect(h.takeover.nextDeadline() == (count > limit ? due : due + TakeoverRules.probeInterval))
            if count > limit { #expect(H.frames(h.takeover.tick(now: due)).count == 1) }
        }
    }
}
