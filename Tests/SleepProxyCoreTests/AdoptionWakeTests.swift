import NIOCore
import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

/// The two rules adoption adds for hosts asleep out of the proxy's sight (docs/adoption.md §4, §5).
@Suite("Adoption: a NIC that answers, and a host that is gone")
struct AdoptionWakeTests {
    typealias H = EngineHarness
    typealias A = AdoptionTests

    /// Adopted, learned, asleep, with its NIC answering every ARP probe for 192.0.2.30.
    static func asleepBehindItsNIC() throws -> H {
        var h = try A.adopted()
        h.frame(A.mdnsFrame(A.announcement()))
        h.run(for: .seconds(30)) { h, step in
            for frame in H.frames(step) where frame.destination == A.mac && frame.etherType == .arp {
                guard let arp = try? ARPPacket(decoding: frame.payload) else { continue }
                h.frame(
                    ARPPacket(
                        operation: .reply, senderMAC: A.mac, senderIP: arp.targetIP, targetMAC: Lab.proxyMAC,
                        targetIP: .any
                    ).frame(destination: Lab.proxyMAC, source: A.mac).bytes)
            }
        }
        return h
    }

    static let laptop = MACAddress("02:53:50:00:00:50")!
    static let laptopV4 = IPv4Address(192, 0, 2, 50)

    /// The laptop resolves the host's SMB service over mDNS (a QM question from port 5353).
    static func resolve(_ h: inout H) {
        h.mdns(
            DNSMessage(questions: [DNSQuestion(name: A.instance, type: .srv)]), from: .v4(Self.laptopV4))
    }

    static func askForHost(_ h: inout H, from mac: MACAddress = laptop, ip: IPv4Address = laptopV4) {
        h.frame(TestFrames.arpRequest(from: mac, senderIP: ip, for: IPv4Address(192, 0, 2, 30)))
    }

    static func magic(_ actions: [EngineAction]) -> Int { H.frames(actions).filter(H.isMagic).count }

    @Test func aClientThatResolvedTheHostAndAsksForItsAddressWakesIt() throws {
        var h = try Self.asleepBehindItsNIC()
        let key = OwnerKey(interface: "eth0", primaryMAC: A.mac)
        #expect(h.engine.state(of: key) == .asleep)
        // Asking without having resolved it (a router refreshing its cache): nothing.
        Self.askForHost(&h)
        #expect(Self.magic(h.run(for: .seconds(1)).map(\.1)) == 0)
        // Resolved, then asked for (an app connecting): woken once the hold is over.
        Self.resolve(&h)
        Self.askForHost(&h)
        let woken = h.run(for: .seconds(1)).map(\.1)
        #expect(Self.magic(woken) > 0)
        #expect(
            H.wakeEvents(woken).contains {
                $0.kind == .wake && $0.trigger == .addressRequest(client: .v4(Self.laptopV4), address: A.v4)
            })
    }

    @Test func anAddressStillBeingProbedWakesNothing() throws {
        var h = try A.adopted()
        h.frame(A.mdnsFrame(A.announcement()))
        let key = OwnerKey(interface: "eth0", primaryMAC: A.mac)
        // Held asleep, its address probed but not yet claimed (nobody answers it: the host has no offload).
        _ = try #require(
            h.run(for: .seconds(5)).first { _ in h.engine.state(of: key) == .asleep })
        #expect(h.engine.addressStates(of: key)?.first?.1 != .answering)
        Self.resolve(&h)
        Self.askForHost(&h)
        #expect(Self.magic(h.run(for: .milliseconds(500)).map(\.1)) == 0)
    }

    @Test func aSweepThatResolvedTheHostFirstWakesNothing() throws {
        var h = try Self.asleepBehindItsNIC()
        // Home Assistant resolves everything, then its tracker ARP-pings the subnet.
        Self.resolve(&h)
        for n: UInt8 in 25...40 {
            h.frame(TestFrames.arpRequest(from: Self.laptop, senderIP: Self.laptopV4, for: IPv4Address(192, 0, 2, n)))
        }
        #expect(Self.magic(h.run(for: .seconds(2)).map(\.1)) == 0)
    }

    @Test func aRegisteredHostIsNeverWokenByAnAddressRequest() throws {
        var h = H()
        h.register()
        // Awake: it answers its own ARP, so the proxy does not; a client that resolved it asks for it.
        h.run(for: .seconds(10)) { h, step in
            for reply in H.ownerAnswers(step, for: [Lab.hostV4, H.hostGlobal]) { h.frame(reply) }
        }
        h.mdns(DNSMessage(questions: [DNSQuestion(name: H.http, type: .srv)]), from: .v4(Self.laptopV4))
        h.frame(TestFrames.arpRequest(from: Self.laptop, senderIP: Self.laptopV4, for: IPv4Address(192, 0, 2, 2)))
        #expect(Self.magic(h.run(for: .seconds(1)).map(\.1)) == 0)
    }

    @Test func aHostThatAnswersNoWakeTwiceIsWithdrawnUntilSeenAgain() throws {
        var h = try A.adopted()
        h.frame(A.mdnsFrame(A.announcement()))
        let key = OwnerKey(interface: "eth0", primaryMAC: A.mac)
        h.run(for: .seconds(8))
        #expect(h.engine.state(of: key) == .asleep)
        // Two wakes, each unanswered to its end, with the hold-off between them.
        for round in 1...AdoptionRules.wakesBeforeAway {
            h.record(h.engine.wake(key, trigger: .administrator, now: h.now))
            let run = h.run(for: TakeoverRules.wakeInterval * TakeoverRules.maximumWakeAttempts + .seconds(11))
            if round < AdoptionRules.wakesBeforeAway {
                #expect(h.engine.state(of: key) == .asleep, "one unanswered wake is not enough")
            } else {
                #expect(h.engine.state(of: key) == nil)
                let goodbyes = H.transmissions(run).flatMap(\.message.answers).filter { $0.name == A.name }
                #expect(!goodbyes.isEmpty && goodbyes.allSatisfy { $0.ttl == 0 })
            }
        }
        #expect(h.engine.adoption.hosts[A.mac]?.phase == .away)
        // Quiet and away: never held again, whatever the time.
        h.run(for: .seconds(60))
        #expect(h.engine.state(of: key) == nil)
        // Seen again (its own mDNS), then quiet: held again.
        h.frame(A.mdnsFrame(A.announcement()))
        h.run(for: .seconds(8))
        #expect(h.engine.state(of: key) == .asleep)
    }
}

/// A host that publishes nothing over mDNS (a Windows PC): checked by address, woken on its wake rule's port.
@Suite("Adoption: a host that publishes nothing")
struct AdoptionWithoutNameTests {
    typealias H = EngineHarness
    typealias A = AdoptionTests
    static let pcV4 = IPv4Address(192, 0, 2, 30)

    /// A NetBIOS name broadcast: traffic of its own, and its address.
    static func netbios(_ h: inout H) {
        h.frame(
            TestFrames.udp(
                from: A.mac, to: .broadcast, source: .v4(Self.pcV4), destination: IPAddress("192.0.2.255")!,
                sourcePort: 137, port: 137))
    }

    static func answersProbes(_ h: inout H, _ step: [EngineAction]) {
        for frame in H.frames(step) where frame.destination == A.mac && frame.etherType == .arp {
            guard let arp = try? ARPPacket(decoding: frame.payload), arp.targetIP == Self.pcV4 else { continue }
            h.frame(
                ARPPacket(
                    operation: .reply, senderMAC: A.mac, senderIP: Self.pcV4, targetMAC: arp.senderMAC, targetIP: .any
                ).frame(destination: arp.senderMAC, source: A.mac).bytes)
        }
    }

    @Test func itIsCheckedByAddressAndWokenOnlyOnItsWakeRulesPort() throws {
        var h = try A.adopted()
        var policy = WakePolicy()
        try policy.add(rule: "\(A.mac)@tcp/3389")
        h.record(
            h.engine.reconfigure(
                takeover: TakeoverConfiguration(policy: policy), expiryAction: .wake, refusalReply: .refused))
        let key = OwnerKey(interface: "eth0", primaryMAC: A.mac)
        Self.netbios(&h)
        // Awake: it answers the ARP probes the proxy sends, 2 s after its first word and then at the idle pace
        // (docs/adoption.md §3), and is never held.
        var probes = 0
        h.run(for: .seconds(30)) { h, step in
            probes += H.frames(step).filter { $0.destination == A.mac && $0.etherType == .arp }.count
            Self.answersProbes(&h, step)
        }
        #expect(probes == 2)
        #expect(h.engine.state(of: key) == nil)
        // Asleep, nothing answering: held, its address claimed, and a connection to RDP wakes it.
        Self.netbios(&h)
        h.run(for: .seconds(12))
        #expect(h.engine.state(of: key) == .asleep)
        #expect(h.engine.addressStates(of: key)?.map(\.1) == [.answering])
        let syn = TestFrames.tcp(
            from: Self.laptop, to: Lab.proxyMAC, source: IPAddress("192.0.2.50")!, destination: .v4(Self.pcV4),
            port: 3389, options: TestFrames.kernelSYNOptions)
        h.frame(syn)
        h.now = h.now + .seconds(1)
        h.frame(syn)
        let woken = h.run(for: .seconds(2)).map(\.1)
        #expect(H.frames(woken).contains(where: H.isMagic), "\(H.wakeEvents(woken))")
    }

    static let laptop = MACAddress("02:53:50:00:00:50")!
}

/// An adopted media server (docs/adoption.md, docs/ssdp.md): what it announced over SSDP while awake is answered
/// for once it sleeps, and its description port wakes it, as for a registered one.
@Suite("Adoption: a media server")
struct AdoptionSSDPTests {
    typealias H = EngineHarness

    @Test func itsUPnPAnnouncementsAreAnsweredForAsleepAndItsDescriptionPortWakesIt() throws {
        var h = H(ssdp: true)
        h.record(try h.engine.setAdopted([Lab.hostMAC], now: h.now))
        // Awake: its responder and its media server announce themselves.
        let announcement = DNSMessage(
            flags: DNSHeaderFlags(response: true, authoritative: true),
            answers: [
                DNSResourceRecord(
                    name: "nas.local.", cacheFlush: true, ttl: 120,
                    rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 2))))
            ])
        h.frame(
            TestFrames.udp(
                from: Lab.hostMAC, to: MACAddress("01:00:5e:00:00:fb")!, source: Lab.hostV4,
                destination: .v4(.mdnsGroup), sourcePort: 5353, port: 5353,
                payload: announcement.encoded(options: .mdns)))
        for type in MediaServer.types {
            h.ssdpIn(MediaServer.alive(type), from: Lab.hostV4, destination: IPAddress("239.255.255.250")!)
        }
        let tv = IPAddress("192.0.2.30")!
        let search = MediaServer.search("ssdp:all", mx: nil)
        #expect(EngineSSDPTests.ssdp(h.ssdpIn(search, from: tv, port: 41000)).isEmpty, "answered while awake")
        // Asleep: answered for, and opening it wakes it.
        h.run(for: .seconds(8))
        #expect(h.engine.state(of: h.key) == .asleep)
        #expect(EngineSSDPTests.ssdp(h.ssdpIn(search, from: tv, port: 41000)).count == MediaServer.types.count)
        let syn = TestFrames.tcp(
            from: MACAddress("02:53:50:00:00:30")!, to: Lab.proxyMAC, source: tv, destination: Lab.hostV4,
            sourcePort: 40100, port: 8200)
        #expect(H.wakeEvents(h.deliver(syn)).map(\.kind) == [.wake])
    }
}
