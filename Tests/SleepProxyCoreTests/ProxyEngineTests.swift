import NIOCore
import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

@Suite("Composed engine: the rules that tie registration, responder and takeover")
struct ProxyEngineTests {
    typealias H = EngineHarness

    @Test func aHostRegisteringWhileAwakeIsNeitherAnnouncedNorAnsweredUntilItGoesQuiet() throws {
        var h = H()
        h.register()
        #expect(h.engine.state(of: h.key) == .starting)
        // Awake: its kernel answers every probe for both addresses, and its responder answers queries itself.
        let awake = h.run(for: .seconds(20)) { h, step in
            for reply in H.ownerAnswers(step, for: [Lab.hostV4, H.hostGlobal]) { h.frame(reply) }
        }
        #expect(H.hostRecordsSent(awake.map(\.1)).isEmpty, "the proxy spoke for an awake host")
        #expect(h.ask(H.hostName, .a).isEmpty, "the proxy answered for an awake host")
        #expect(h.engine.state(of: h.key) == .starting)
        #expect(!awake.contains { if case .packet(.setNeighbour) = $0.1 { return true } else { return false } })
        // It falls asleep: the next probes go unanswered and the proxy speaks within 4 s (probes at 1 s spacing
        // after the 1 s restart delay that the last answer set).
        let quietAt = h.now
        let asleep = h.run(for: .seconds(6))
        let firstAnnouncement = try #require(asleep.first { !H.hostRecordsSent([$0.1]).isEmpty }?.0)
        #expect(firstAnnouncement - quietAt <= .seconds(4))
        #expect(h.engine.state(of: h.key) == .asleep)
        #expect(h.ask(H.hostName, .a).map(\.rdata) == [.a(ARecord(address: IPv4Address(192, 0, 2, 2)))])
        #expect(H.logs(asleep.map(\.1)).contains { $0.contains("takeover: claimed 192.0.2.2 for vm.local.") })
    }

    /// The host-sized tables are sized at start for `maximumHosts`, up to `EngineRules.reservedHostsLimit`: a
    /// small proxy reserves little, a large one no more than the limit.
    @Test func hostTablesAreSizedForTheConfiguredHostsUpToTheLimit() {
        func engine(maximumHosts: Int) -> ProxyEngine {
            var configuration = RegistrationConfiguration()
            configuration.maximumHosts = maximumHosts
            return ProxyEngine(registrar: Registrar(configuration: configuration), takeover: Takeover())
        }
        let small = engine(maximumHosts: 400).registrar.store.owners.capacity
        #expect(small >= 400 && small < 1_000)
        let limit = EngineRules.reservedHostsLimit
        let atLimit = engine(maximumHosts: limit).registrar.store.owners.capacity
        #expect(atLimit >= limit)
        #expect(engine(maximumHosts: limit + 1).registrar.store.owners.capacity == atLimit)
        #expect(engine(maximumHosts: 100_000).registrar.store.owners.capacity == atLimit)
    }

    /// A restart with many hosts asleep logs one line for them all; up to `resumeLinesLimit`, one per host.
    @Test func manyHostsSpokenForAgainShareOneLogLine() throws {
        func resumed(_ count: Int) throws -> (lines: [String], asleep: Int) {
            var h = H()
            var registrar = Registrar(
                configuration: RegistrationConfiguration(maximumHosts: 100, requireSourceAmongClaimedAddresses: false))
            let registrations = try (0..<count).map { n in
                let address = IPAddress("192.0.2.\(100 + n)")!
                let outcome = registrar.handle(
                    datagram: Lab.registration(
                        mac: MACAddress(rawValue: 0x0253_5000_2000 + UInt64(n)),
                        host: try DNSName(parsing: "h\(n).local."),
                        addresses: [address]
                    ).encoded(options: .appleUpdate), from: address, on: Lab.eth0, now: h.now)
                guard case .accepted(let acceptance) = outcome else { throw CancellationError() }
                return acceptance.registration
            }
            _ = h.engine.restore(registrations, now: h.now)
            let actions = h.engine.resumeSpeaking(
                for: registrations.map(\.key), stoppedFor: .seconds(3), now: h.now)
            let asleep = registrations.filter { h.engine.state(of: $0.key) == .asleep }.count
            return (H.logs(actions), asleep)
        }
        let limit = EngineRules.resumeLinesLimit
        let each = try resumed(limit)
        #expect(each.asleep == limit && each.lines.count == limit)
        #expect(each.lines.allSatisfy { $0.contains("was asleep when the proxy stopped 3 s ago") })
        let counted = try resumed(limit + 1)
        #expect(counted.asleep == limit + 1)
        #expect(
            counted.lines == [
                "\(limit + 1) hosts were asleep when the proxy stopped 3 s ago: the proxy answers for them again at once and probes their addresses"
            ])
    }

    /// The name questions' schedule lives in a heap (`ProxyEngine.quietChecks`): each answer pushes the next
    /// question out, so a host that keeps answering is asked about once a second and never spoken for; once it
    /// is silent, three rounds later it is asleep, and then it is asked no more.
    @Test func withoutTakeoverEveryAnswerPutsTheNextQuestionOff() throws {
        var h = H(takeover: false)
        h.register()
        let answer = DNSMessage(
            flags: DNSHeaderFlags(response: true, authoritative: true),
            answers: [
                DNSResourceRecord(
                    name: H.hostName, cacheFlush: true, ttl: 120, rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 2)))
                )
            ])
        func asksForTheName(_ actions: [EngineAction]) -> Bool {
            H.transmissions(actions).contains { transmission in
                transmission.message.questions.contains { $0.name == H.hostName && $0.type == .a }
            }
        }
        var questions = 0
        let awake = h.run(for: .seconds(10)) { h, step in
            if asksForTheName(step) {
                questions += 1
                _ = h.mdns(answer, from: Lab.hostV4)
            }
        }
        #expect(questions >= 8, "asked \(questions) times in 10 s")
        #expect(h.engine.state(of: h.key) == .starting)
        #expect(H.hostRecordsSent(awake.map(\.1)).isEmpty, "the proxy spoke for an awake host")
        // Silent from now: three more questions a second apart, then the proxy speaks for it.
        let silentFrom = h.now
        let asleep = h.run(for: .seconds(6))
        // One question a round for each of the interface's families (IPv4 and IPv6).
        #expect(asleep.filter { asksForTheName([$0.1]) }.count == EngineRules.quietProbeCount * 2)
        #expect(h.engine.state(of: h.key) == .asleep)
        let firstAnnouncement = try #require(asleep.first { !H.hostRecordsSent([$0.1]).isEmpty }?.0)
        #expect(firstAnnouncement - silentFrom <= .seconds(5))
        #expect(H.logs(asleep.map(\.1)).contains { $0.contains("answered none of 3 questions") })
        // Asleep, it is asked no more.
        #expect(!h.run(for: .seconds(10)).contains { asksForTheName([$0.1]) })
    }

    @Test func theOwnersOwnQueriesAndProbesAreNeverAnsweredBeforeTheTakeover() throws {
        var h = H()
        h.register()
        h.now = h.now + .milliseconds(300)
        // avahi on the host probes and queries its own names while it is still awake.
        let probe = h.mdns(H.ownProbe(), from: Lab.hostV4)
        let query = h.mdns(DNSMessage(questions: [DNSQuestion(name: H.http, type: .srv)]), from: Lab.hostV4)
        #expect(H.transmissions(probe + query).isEmpty)
        #expect(H.transmissions(h.run(for: .seconds(2))).allSatisfy { H.hostRecordsSent([.transmit($0)]).isEmpty })
        #expect(h.engine.state(of: h.key) == .starting)
        #expect(h.engine.lastAwake(of: h.key)?.what == "mDNS from 192.0.2.2")
    }

    @Test func afterTheTakeoverTheHostsOwnMDNSHandsItBackSilently() throws {
        var h = H()
        h.register()
        h.run(for: .seconds(12))
        #expect(h.engine.state(of: h.key) == .asleep)
        // A connection starts a wake; the host comes back and its avahi (no Owner option) announces.
        let syn = TestFrames.tcp(
            from: H.querierMAC, to: Lab.proxyMAC, source: H.querier, destination: Lab.hostV4, sourcePort: 40001,
            port: 8080)
        #expect(H.wakeEvents(h.deliver(syn)).map(\.kind) == [.wake])
        h.run(for: .seconds(1))
        let announcement = DNSMessage(
            flags: DNSHeaderFlags(response: true, authoritative: true),
            answers: [
                DNSResourceRecord(
                    name: H.hostName, cacheFlush: true, ttl: 120, rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 2)))
                )
            ])
        let back = h.mdns(announcement, from: Lab.hostV4)
        #expect(H.journal(back) == [.remove(h.key)])
        #expect(h.engine.state(of: h.key) == nil && h.engine.registrar.store.hostCount == 0)
        #expect(H.wakeEvents(back).map(\.kind) == [.awake], "the wake ends as a success")
        // Counted as a hand-back by the host's own mDNS (the metrics' signal label), not by an Owner option.
        #expect(h.engine.handBacks == [.mdns: 1])
        // The captured SYN goes to the host; nothing is said on mDNS: no goodbye, no answer, no conflict.
        #expect(H.frames(back).contains { $0.destination == Lab.hostMAC && $0.etherType == .ipv4 })
        let after = h.run(for: .seconds(10))
        #expect(H.hostRecordsSent(back + after.map(\.1)).isEmpty)
        #expect(!H.frames(after.map(\.1)).contains(where: H.isMagic))
        #expect(H.logs(back).contains { $0.contains("hand-back: vm.local.") && $0.contains("mDNS from 192.0.2.2") })
    }

    @Test func aHostProbingItsOwnNamesFromAnUnregisteredAddressIsAwakeToo() throws {
        var h = H()
        h.register()
        h.run(for: .seconds(12))
        // Resumed with only its link-local address (DHCP not back yet), avahi re-probes its host name.
        let back = h.mdns(H.ownProbe(), from: IPAddress("fe80::1234")!)
        #expect(H.journal(back) == [.remove(h.key)])
        #expect(
            H.transmissions(back).isEmpty, "a host re-probing its name must not be answered (it would rename itself)")
    }

    @Test func anAppleHostIsHandedBackByItsOwnerOptionExactlyAsBefore() throws {
        var h = H()
        h.register()
        h.run(for: .seconds(12))
        let probe = DNSMessage(
            questions: [DNSQuestion(name: H.hostName, type: .any, unicastResponse: true)],
            additionals: [
                .opt(
                    EDNSHeader(udpPayloadSize: 1440),
                    options: [.owner(OwnerOption(sequence: 1, primaryMAC: Lab.hostMAC))])
            ])
        let back = h.mdns(probe, from: IPAddress("fe80::53:50ff:fe00:2")!)
        #expect(H.journal(back) == [.remove(h.key)] && H.transmissions(back).isEmpty)
        #expect(H.logs(back).contains { $0.contains("Owner option with sequence 1") })
        #expect(h.engine.handBacks == [.ownerOption: 1])
    }

    /// Apple's rule, decided once by the engine: the registered sequence within 60 s of registering is the host's
    /// own traffic while it falls asleep; a new sequence, or any after the grace, hands the host back before the
    /// responder could answer for it.
    @Test func anOwnerOptionHandsBackOnANewSequenceOrAfterTheGrace() throws {
        func probe(sequence: UInt8) -> DNSMessage {
            DNSMessage(
                questions: [DNSQuestion(name: H.hostName, type: .any, unicastResponse: true)],
                additionals: [
                    .opt(
                        EDNSHeader(udpPayloadSize: 1440),
                        options: [.owner(OwnerOption(sequence: sequence, primaryMAC: Lab.hostMAC))])
                ])
        }
        let linkLocal = IPAddress("fe80::53:50ff:fe00:2")!
        var h = H()
        h.register()
        h.run(for: .seconds(12))
        let early = h.mdns(probe(sequence: 0), from: linkLocal)
        #expect(H.journal(early).isEmpty && h.engine.state(of: h.key) == .asleep, "same sequence within 60 s")
        let back = h.mdns(probe(sequence: 1), from: linkLocal)
        #expect(H.journal(back) == [.remove(h.key)] && H.transmissions(back).isEmpty)
        #expect(H.hostRecordsSent(h.run(for: .seconds(10)).map(\.1)).isEmpty, "a hand-back sends nothing")

        var late = H()
        late.register()
        late.run(for: .seconds(61))
        #expect(H.journal(late.mdns(probe(sequence: 0), from: linkLocal)) == [.remove(late.key)])
        #expect(late.engine.handBacks == [.ownerOption: 1])
    }

    /// A woken host re-probing its own name from an address it did not register (its link-local) gets everything
    /// back, counted as such in the metrics' signal label.
    @Test func aHostProbingItsOwnNameIsHandedBackAndCountedAsSuch() throws {
        var h = H()
        h.register()
        h.run(for: .seconds(12))
        var record = try #require(h.ask(H.hostName, .a).first)
        record.cacheFlush = true
        let probe = DNSMessage(
            id: 0, questions: [DNSQuestion(name: H.hostName, type: .any)], authorities: [record])
        let back = h.mdns(probe, from: IPAddress("fe80::53:50ff:fe00:2")!)
        #expect(H.journal(back) == [.remove(h.key)])
        #expect(h.engine.handBacks == [.ownNameProbe: 1])
    }

    @Test func theOwnerKeepingItsIPv6AddressHoldsBackOnlyThatAddress() throws {
        var h = H()
        h.register()
        // The NIC answers neighbour solicitations in sleep; IPv4 is silent.
        let steps = h.run(for: .seconds(12)) { h, step in
            for reply in H.ownerAnswers(step, for: [H.hostGlobal]) { h.frame(reply) }
        }
        #expect(h.engine.state(of: h.key) == .asleep)
        let status = try #require(h.engine.takeover?.state(of: h.key))
        #expect(status.addresses.map(\.0) == [Lab.hostV4, H.hostGlobal])
        #expect(status.addresses.first { $0.0 == Lab.hostV4 }?.1 == .answering)
        #expect(status.addresses.first { $0.0 == H.hostGlobal }?.1 == .ownerSeen)
        #expect(
            steps.contains {
                if case .packet(.setNeighbour(_, Lab.hostV4, _)) = $0.1 { return true } else { return false }
            })
        // IPv4 is answered and wakes on a connection.
        let request = h.frame(
            TestFrames.arpRequest(
                from: H.querierMAC, senderIP: IPv4Address(192, 0, 2, 20), for: IPv4Address(192, 0, 2, 2)))
        #expect(H.frames(request).contains { $0.etherType == .arp && $0.destination == H.querierMAC })
        let syn = TestFrames.tcp(
            from: H.querierMAC, to: Lab.proxyMAC, source: H.querier, destination: Lab.hostV4, sourcePort: 40002,
            port: 8080)
        #expect(H.frames(h.deliver(syn)).contains(where: H.isMagic))
    }
}

extension ProxyEngineTests {
    /// A reload after a failed journal write drops what the journal does not hold by the one way out: silently,
    /// nothing written, the packet side let go, its history told.
    @Test func aReloadDropsWhatTheJournalLacksByTheOneWayOut() throws {
        var h = H()
        h.register()
        let other = OwnerKey(interface: "eth0", primaryMAC: MACAddress("02:53:50:00:00:07")!)
        h.register(
            Lab.registration(
                mac: other.primaryMAC, host: "other.local.", addresses: [IPAddress("192.0.2.7")!],
                services: [("Other._http._tcp", 8080)]), from: IPAddress("192.0.2.7")!)
        h.run(for: .seconds(12))
        let kept = try #require(h.engine.registrar.store[h.key])
        let actions = h.engine.reload([kept], now: h.now)
        #expect(H.journal(actions).isEmpty, "the journal already says so")
        #expect(h.engine.state(of: other) == nil && h.engine.takeover?.state(of: other) == nil)
        #expect(h.engine.state(of: h.key) == .asleep, "the host the journal holds keeps its state")
        let gone = actions.compactMap { if case .presence(let change) = $0 { change } else { nil } }
        #expect(gone.map(\.host) == [other] && gone.first?.state == .gone && gone.first?.reason == .reloaded)
        #expect(H.logs(actions).contains { $0.contains("other.local.") && $0.contains("not in the journal") })
        #expect(h.engine.handBacks.isEmpty)
    }

    @Test func theEngineChoosesTheServedInterfacesAndSaysSoOnlyWhenTheyChange() {
        var engine = ProxyEngine(registrar: Registrar(), responder: nil, takeover: Takeover())
        let loopback = InterfaceContext(name: "lo", index: 1, macAddress: .zero, prefixes: [IPPrefix("127.0.0.1/8")!])
        let tunnel = InterfaceContext(
            name: "wg0", index: 3, macAddress: .zero, prefixes: [IPPrefix("198.51.100.1/24")!])
        let listed = [
            NetworkInterface(context: loopback, isUp: true, isLoopback: true, supportsMulticast: false),
            NetworkInterface(context: Lab.eth0, isUp: true, isLoopback: false, supportsMulticast: true),
            NetworkInterface(context: tunnel, isUp: true, isLoopback: false, supportsMulticast: false),
        ]
        func served(_ actions: [EngineAction]) -> [[String]] {
            actions.compactMap { if case .serve(let served) = $0 { served.map(\.name) } else { nil } }
        }
        #expect(served(engine.interfacesListed(listed, named: [], now: Lab.t0)) == [["eth0"]])
        #expect(engine.interfaces.keys.sorted() == [Lab.eth0.index])
        #expect(served(engine.interfacesListed(listed, named: [], now: Lab.t0)).isEmpty, "unchanged: nothing to do")
        // Named, an interface is served without multicast; a named interface that is down is not.
        #expect(served(engine.interfacesListed(listed, named: ["wg0"], now: Lab.t0)) == [["wg0"]])
        var down = listed
        down[2].isUp = false
        #expect(served(engine.interfacesListed(down, named: ["wg0"], now: Lab.t0)) == [[]])
        #expect(engine.interfaces.isEmpty)
    }
}
