import NIOCore
import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

extension TakeoverTests {
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
