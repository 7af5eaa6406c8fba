import NIOCore
import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

/// Drives the composed engine with explicit time: registrations, mDNS and frames in, actions out.
struct EngineHarness {
    static let querier = IPAddress("192.0.2.20")!
    static let querierMAC = MACAddress("02:53:50:00:00:20")!
    static let hostGlobal = IPAddress("2001:db8::2")!
    static let hostName: DNSName = "vm.local."
    static let http: DNSName = "TestSvc._http._tcp.local."

    var engine: ProxyEngine
    var now = Lab.t0
    var key: OwnerKey { OwnerKey(interface: "eth0", primaryMAC: Lab.hostMAC) }
    /// Everything the engine asked for, with when.
    var log: [(Timestamp, EngineAction)] = []

    init(takeover: Bool = true, expiryAction: RegistrationConfiguration.ExpiryAction = .wake, ssdp: Bool = false) {
        var configuration = RegistrationConfiguration()
        configuration.requireSourceAmongClaimedAddresses = false
        configuration.expiryAction = expiryAction
        let responder = Responder(
            configuration: ResponderConfiguration(
                instanceLabel: "20-40-10-65.0 Lab Proxy", hostLabel: "labproxy", registrationPort: 5599, seed: 7))
        self.engine = ProxyEngine(
            registrar: Registrar(configuration: configuration), responder: responder,
            takeover: takeover ? Takeover() : nil, ssdp: ssdp ? SSDPProxy(seed: 11) : nil)
        self.record(self.engine.setInterfaces([Lab.eth0], now: self.now))
        _ = self.run(for: .seconds(5))  // the proxy's own advertisement is probed and announced
    }

    mutating func record(_ actions: [EngineAction]) {
        self.log += actions.map { (self.now, $0) }
    }

    @discardableResult
    mutating func register(
        _ message: DNSMessage = Lab.registration(addresses: [Lab.hostV4, hostGlobal]),
        from source: IPAddress = Lab.hostV4
    ) -> [EngineAction] {
        let actions = self.engine.receiveRegistration(
            message.encoded(options: .appleUpdate), from: source, on: Lab.eth0, now: self.now)
        self.record(actions)
        return actions
    }

    @discardableResult
    mutating func mdns(_ message: DNSMessage, from source: IPAddress = querier, port: UInt16 = 5353) -> [EngineAction] {
        let actions = self.engine.receiveMDNS(
            message.encoded(options: .mdns), from: source, port: port, destination: .v4(.mdnsGroup),
            interfaceIndex: Lab.eth0.index, now: self.now)
        self.record(actions)
        return actions
    }

    @discardableResult
    mutating func frame(_ bytes: [UInt8]) -> [EngineAction] {
        let actions = self.engine.receiveFrame(bytes, interfaceIndex: Lab.eth0.index, outgoing: false, now: self.now)
        self.record(actions)
        return actions
    }

    /// A captured frame, then the wake gate's hold run out (docs/waking.md): all the frame leads to.
    @discardableResult
    mutating func deliver(_ bytes: [UInt8]) -> [EngineAction] {
        self.frame(bytes) + self.run(for: WakeRules.holdDelay).map(\.1)
    }

    /// Runs every timer due within `duration`; `each` may answer at each step (the host's NIC, say).
    @discardableResult
    mutating func run(for duration: Duration, each: ((inout EngineHarness, [EngineAction]) -> Void)? = nil) -> [(
        Timestamp, EngineAction
    )] {
        let end = self.now + duration
        var actions: [(Timestamp, EngineAction)] = []
        while let deadline = self.engine.nextDeadline(), deadline <= end {
            self.now = max(self.now, deadline)
            let step = self.engine.tick(now: self.now)
            self.record(step)
            actions += step.map { (self.now, $0) }
            each?(&self, step)
        }
        self.now = end
        return actions
    }

    /// A legacy unicast question (the way dig asks): answered at once when the proxy speaks for the name.
    mutating func ask(_ name: DNSName, _ type: DNSRecordType) -> [DNSResourceRecord] {
        Self.transmissions(self.mdns(DNSMessage(id: 77, questions: [DNSQuestion(name: name, type: type)]), port: 40000))
            .flatMap(\.message.answers)
    }

    static func transmissions(_ actions: [EngineAction]) -> [MDNSTransmission] {
        actions.compactMap { if case .transmit(let t) = $0 { return t } else { return nil } }
    }

    static func transmissions(_ actions: [(Timestamp, EngineAction)]) -> [MDNSTransmission] {
        self.transmissions(actions.map(\.1))
    }

    static func frames(_ actions: [EngineAction]) -> [EthernetFrame] {
        actions.compactMap {
            if case .packet(.sendFrame(let bytes, _)) = $0 {
                return try? EthernetFrame(decoding: ByteBuffer(bytes: bytes))
            } else {
                return nil
            }
        }
    }

    static func wakeEvents(_ actions: [EngineAction]) -> [WakeEvent] {
        actions.compactMap { if case .wakeEvent(let event) = $0 { return event } else { return nil } }
    }

    static func journal(_ actions: [EngineAction]) -> [RegistrationJournal.Entry] {
        actions.compactMap { if case .journal(let entry) = $0 { return entry } else { return nil } }
    }

    static func logs(_ actions: [EngineAction]) -> [String] {
        actions.compactMap { if case .log(_, let line) = $0 { return line } else { return nil } }
    }

    /// Records of the sleeping host multicast by the proxy (announcements, answers, goodbyes).
    static func hostRecordsSent(_ actions: [EngineAction]) -> [DNSResourceRecord] {
        self.transmissions(actions).flatMap { $0.message.answers + $0.message.additionals }.filter { record in
            record.name == hostName || record.name == http || record.name == "_http._tcp.local."
        }
    }

    static func isMagic(_ frame: EthernetFrame) -> Bool { frame.etherType == .wakeOnLAN }

    /// The host's kernel answering a probe the proxy sent for one of its addresses.
    static func ownerAnswers(_ actions: [EngineAction], for addresses: Set<IPAddress>) -> [[UInt8]] {
        var replies: [[UInt8]] = []
        for frame in self.frames(actions) where frame.destination == Lab.hostMAC {
            if frame.etherType == .arp, let arp = try? ARPPacket(decoding: frame.payload), arp.senderIP == .any,
                addresses.contains(.v4(arp.targetIP))
            {
                let reply = ARPPacket(
                    operation: .reply, senderMAC: Lab.hostMAC, senderIP: arp.targetIP, targetMAC: Lab.proxyMAC,
                    targetIP: .any)
                replies.append(reply.frame(destination: Lab.proxyMAC, source: Lab.hostMAC).bytes)
            } else if frame.etherType == .ipv6, let packet = try? IPv6Packet(decoding: frame.payload),
                let ns = try? NeighborDiscoveryMessage(decoding: packet),
                ns.kind == .solicitation, addresses.contains(.v6(ns.target))
            {
                replies.append(TestFrames.neighbourAdvertisement(from: Lab.hostMAC, for: ns.target))
            }
        }
        return replies
    }

    /// The host's responder probing its own names with exactly what the proxy holds (avahi after a restart).
    static func ownProbe() -> DNSMessage {
        DNSMessage(
            questions: [DNSQuestion(name: hostName, type: .any, unicastResponse: true)],
            authorities: [
                DNSResourceRecord(
                    name: hostName, cacheFlush: true, ttl: 120, rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 2))))
            ])
    }
}

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

    @Test func aLeaseEndingOnAnAwakeHostDropsItWithoutMagicPacketsOrGoodbyes() throws {
        var h = H()
        h.register(Lab.registration(lease: 30, addresses: [Lab.hostV4, H.hostGlobal]))
        let steps = h.run(for: .seconds(40)) { h, step in
            for reply in H.ownerAnswers(step, for: [Lab.hostV4, H.hostGlobal]) { h.frame(reply) }
        }
        let actions = steps.map(\.1)
        #expect(h.engine.registrar.store.hostCount == 0)
        #expect(H.wakeEvents(actions).isEmpty && !H.frames(actions).contains(where: H.isMagic))
        #expect(H.hostRecordsSent(actions).isEmpty, "no goodbyes for records the host answers itself")
        #expect(
            H.logs(actions).contains {
                $0.contains("lease ended for vm.local.") && $0.contains("while it was awake (last seen awake: a")
                    && $0.contains("from its MAC")
            })
        let gone = actions.compactMap { if case .presence(let change) = $0 { return change } else { return nil } }.last
        #expect(gone?.state == .gone && gone?.reason == .awakeAtExpiry, "\(String(describing: gone))")
    }

    @Test func aLeaseEndingOnASleepingHostWakesItAndTheOwnersARPEndsTheWakeAsASuccess() throws {
        var h = H()
        h.register(Lab.registration(lease: 30, addresses: [Lab.hostV4, H.hostGlobal]))
        let steps = h.run(for: .seconds(31)).map(\.1)
        #expect(H.wakeEvents(steps).map(\.kind) == [.wake])
        #expect(H.hostRecordsSent(steps).contains { $0.ttl == 0 }, "goodbyes for the records the proxy spoke for")
        // The host wakes: its kernel announces its address. The wake ends as a success, not "no sign of waking".
        let up = h.frame(TestFrames.arpAnnouncement(from: Lab.hostMAC, for: IPv4Address(192, 0, 2, 2)))
        #expect(H.wakeEvents(up).map(\.kind) == [.awake])
        let later = h.run(for: .seconds(40)).map(\.1)
        #expect(!H.frames(later).contains(where: H.isMagic) && !H.wakeEvents(later).contains { $0.kind == .noResponse })
    }

    @Test func aNewRegistrationReplacesThePreviousOnesRecordsAndItsPartsStillMerge() throws {
        var h = H()
        let services: [(String, UInt16)] = [("TestSvc._http._tcp", 8080), ("Files._smb._tcp", 445)]
        h.register(Lab.registration(id: 1, addresses: [Lab.hostV4], services: services))
        // A second part of the same registration (same ID) adds to it.
        h.register(Lab.registration(id: 1, addresses: [Lab.hostV4], services: [("Printer._ipp._tcp", 631)]))
        #expect(h.engine.registrar.store[h.key]?.summary.services.count == 3)
        h.run(for: .seconds(12))
        #expect(!h.ask("Files._smb._tcp.local.", .srv).isEmpty)
        // Woken, it sleeps again with the same Owner sequence (avahi never bumps it) and one service fewer.
        h.register(Lab.registration(id: 2, addresses: [Lab.hostV4], services: [("TestSvc._http._tcp", 8080)]))
        #expect(h.engine.registrar.store[h.key]?.summary.services.map(\.port) == [8080])
        h.run(for: .seconds(12))
        #expect(h.ask("Files._smb._tcp.local.", .srv).isEmpty && h.ask("Printer._ipp._tcp.local.", .srv).isEmpty)
        #expect(h.ask(H.http, .txt).count == 1, "one TXT record per instance")
    }

    @Test func withoutTakeoverTheHostIsAskedForItsNameAndSpokenForOnceSilent() throws {
        var h = H(takeover: false)
        h.register()
        // Its responder answers the first question from its address: still awake.
        var answered = false
        let early = h.run(for: .milliseconds(1500)) { h, step in
            let asked = H.transmissions(step).contains { $0.message.questions.contains { $0.name == H.hostName } }
            if asked, !answered {
                answered = true
                h.mdns(
                    DNSMessage(
                        flags: DNSHeaderFlags(response: true, authoritative: true),
                        answers: [
                            DNSResourceRecord(
                                name: H.hostName, cacheFlush: true, ttl: 120,
                                rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 2))))
                        ]), from: Lab.hostV4)
            }
        }
        #expect(
            answered
                && H.hostRecordsSent(
                    early.map(\.1).filter {
                        if case .transmit(let t) = $0 { return t.message.flags.isResponse } else { return false }
                    }
                ).isEmpty)
        #expect(h.engine.state(of: h.key) == .starting)
        let later = h.run(for: .seconds(6))
        #expect(h.engine.state(of: h.key) == .asleep)
        #expect(
            H.transmissions(later).filter { $0.message.questions.contains { $0.name == H.hostName } }.count >= 3 * 2,
            "three questions, on both families")
        #expect(!H.hostRecordsSent(later.map(\.1)).isEmpty)
    }

    @Test func forgetSaysGoodbyeOnlyForAHostTheProxySpokeFor() throws {
        var awake = H()
        awake.register()
        let quiet = awake.engine.forget(awake.key, goodbyes: true, now: awake.now)
        #expect(H.journal(quiet) == [.remove(awake.key)])
        #expect(H.hostRecordsSent(quiet + awake.run(for: .seconds(10)).map(\.1)).isEmpty)
        #expect(H.logs(quiet).contains { $0.contains("no goodbyes: it is awake") })

        var asleep = H()
        asleep.register()
        asleep.run(for: .seconds(12))
        let forgotten = asleep.engine.forget(asleep.key, goodbyes: true, now: asleep.now)
        #expect(H.journal(forgotten) == [.remove(asleep.key)])
        #expect(H.hostRecordsSent(asleep.run(for: .seconds(10)).map(\.1)).contains { $0.ttl == 0 })
    }

    @Test func aFailedJournalAppendPutsBackWhatTheBatchTookAway() throws {
        var h = H()
        h.register()
        h.run(for: .seconds(12))
        let registration = try #require(h.engine.registrar.store[h.key])
        _ = h.mdns(H.ownProbe(), from: Lab.hostV4)  // handed back in memory ...
        #expect(h.engine.registrar.store.hostCount == 0)
        _ = h.engine.reload([registration], now: h.now)  // ... but the journal said no
        #expect(h.engine.registrar.store.hostCount == 1 && h.engine.state(of: h.key) == .starting)
        #expect(h.engine.takeover?.state(of: h.key) != nil, "the packet side holds the host again")
    }

    @Test func restoredHostsStartSilentAndAreProbedAgain() throws {
        var source = H()
        source.register()
        let registration = try #require(source.engine.registrar.store[source.key])
        var h = H()
        _ = h.engine.restore([registration], now: h.now)
        #expect(h.engine.state(of: h.key) == .starting && h.ask(H.hostName, .a).isEmpty)
        h.run(for: .seconds(6))
        #expect(h.engine.state(of: h.key) == .asleep && !h.ask(H.hostName, .a).isEmpty)
    }

    @Test func statusCountsHostsByState() throws {
        var h = H()
        h.register()
        #expect(h.engine.hostsByState == [.starting: 1])
        h.run(for: .seconds(12))
        #expect(h.engine.hostsByState == [.asleep: 1])
        let syn = TestFrames.tcp(
            from: H.querierMAC, to: Lab.proxyMAC, source: H.querier, destination: Lab.hostV4, sourcePort: 40003,
            port: 8080)
        h.deliver(syn)
        #expect(h.engine.hostsByState == [.waking: 1])
        // A second host, asleep, is counted apart from the waking one; once the first is seen awake, no waking.
        h.register(
            Lab.registration(
                mac: MACAddress("02:53:50:00:00:07")!, host: "other.local.", addresses: [IPAddress("192.0.2.7")!],
                services: [("Other._http._tcp", 8080)]), from: IPAddress("192.0.2.7")!)
        h.run(for: .seconds(12))
        #expect(h.engine.hostsByState[.waking] == 1 && h.engine.hostsByState.values.reduce(0, +) == 2)
        #expect(h.engine.hosts(in: .waking) == [h.key] && h.engine.hosts(in: .asleep).count == 1)
        #expect(!h.engine.hosts(in: .asleep).contains(h.key), "a waking host is counted as waking only")
        _ = h.frame(TestFrames.arpAnnouncement(from: Lab.hostMAC, for: IPv4Address(192, 0, 2, 2)))
        #expect(h.engine.hostsByState[.waking] == nil && h.engine.hostsByState.values.reduce(0, +) == 2)
        #expect(h.engine.hosts(in: .waking).isEmpty)
    }

    /// The history behind the status page (docs/status-page.md): one `presence` action each time a host moves,
    /// in order, from registration to the hand-back.
    @Test func everyChangeOfAHostsStateIsReportedOnce() throws {
        var h = H()
        h.register()
        h.run(for: .seconds(12))
        h.deliver(
            TestFrames.tcp(
                from: H.querierMAC, to: Lab.proxyMAC, source: H.querier, destination: Lab.hostV4, sourcePort: 40003,
                port: 8080))
        _ = h.mdns(H.ownProbe(), from: Lab.hostV4)
        let changes = h.log.compactMap { entry -> (HostState, HostStateReason)? in
            guard case .presence(let change) = entry.1 else { return nil }
            #expect(change.host == h.key && change.hostName == "vm.local.")
            return (change.state, change.reason)
        }
        #expect(changes.map(\.0) == [.starting, .asleep, .handedBack], "\(changes)")
        #expect(changes.map(\.1) == [.registered, .noProbeAnswer, .mdns])
    }

    @Test func aHostWokenAfterItsLeaseEndedIsForgottenOnceItShowsItselfOrRegistersAgain() throws {
        // Seen by its ARP: the wake ends as a success and nothing of the host stays behind.
        var seen = H()
        seen.register(Lab.registration(lease: 30, addresses: [Lab.hostV4]))
        seen.run(for: .seconds(31))
        #expect(seen.engine.takeover?.isWaking(seen.key) == true)
        // Its registration is gone, so the status counts it in no state, waking included.
        #expect(seen.engine.hostsByState.isEmpty)
        _ = seen.frame(TestFrames.arpAnnouncement(from: Lab.hostMAC, for: IPv4Address(192, 0, 2, 2)))
        #expect(
            seen.engine.takeover?.hostCount == 0
                && seen.engine.takeover?.host(owning: Lab.hostV4, interface: "eth0") == nil)
        // Registering again: the wake ends as a success too, and the new registration starts silent.
        var back = H()
        back.register(Lab.registration(id: 1, lease: 30, addresses: [Lab.hostV4]))
        back.run(for: .seconds(31))
        let actions = back.register(Lab.registration(id: 2, lease: 7200, addresses: [Lab.hostV4]))
        #expect(H.wakeEvents(actions).map(\.kind) == [.awake])
        #expect(back.engine.state(of: back.key) == .starting && back.engine.takeover?.isWaking(back.key) == false)
        #expect(!H.frames(back.run(for: .seconds(3)).map(\.1)).contains(where: H.isMagic))
    }

    /// After a clean stop a moment ago the hosts the proxy spoke for are answered at once (not after seconds of
    /// probing); a restored host it did not speak for stays silent; and a sign of life still silences it.
    @Test func afterACleanStopTheHostsSpokenForAreAnsweredAtOnceAndStillSilencedBySignsOfLife() throws {
        var before = H()
        before.register()
        before.run(for: .seconds(12))
        #expect(before.engine.state(of: before.key) == .asleep)
        #expect(before.engine.spokenFor == [before.key])
        let registration = try #require(before.engine.registrar.store[before.key])
        // A host that has since shown itself up on every address is awake, and is not recorded as spoken for.
        var woke = before
        woke.frame(TestFrames.arpAnnouncement(from: Lab.hostMAC, for: IPv4Address(192, 0, 2, 2)))
        guard case .v6(let global) = H.hostGlobal else { return }
        woke.frame(TestFrames.neighbourAdvertisement(from: Lab.hostMAC, for: global))
        #expect(woke.engine.state(of: woke.key) == .awake)
        #expect(woke.engine.spokenFor.isEmpty, "an awake host would be spoken for after a restart")

        // The next start: restored, so silent, until told the proxy spoke for it when it stopped.
        var after = H()
        _ = after.engine.restore([registration], now: after.now)
        #expect(after.engine.state(of: after.key) == .starting && after.ask(H.http, .srv).isEmpty)
        let resumed = after.engine.resumeSpeaking(
            for: [after.key, OwnerKey(interface: "eth0", primaryMAC: MACAddress("02:53:50:00:00:99")!)],
            stoppedFor: .seconds(3), now: after.now)
        #expect(H.logs(resumed).count == 1, "one line, for the host it holds")
        #expect(after.engine.state(of: after.key) == .asleep)
        #expect(after.ask(H.http, .srv).count == 1, "answered at once after the restart")
        // Its addresses are answered for at once too (they used to be probed for 4 s first, while the records were
        // already answered), and announced as after a claim.
        let request = after.frame(
            TestFrames.arpRequest(
                from: H.querierMAC, senderIP: IPv4Address(192, 0, 2, 20), for: IPv4Address(192, 0, 2, 2)))
        #expect(H.frames(request).contains { $0.etherType == .arp && $0.destination == H.querierMAC })
        let announced = after.run(for: .seconds(2)).map(\.1)
        #expect(
            H.frames(announced).contains {
                $0.etherType == .arp && (try? ARPPacket(decoding: $0.payload))?.senderMAC == Lab.proxyMAC
            }, "its addresses are announced again")
        // A host that is up after all shows itself on its addresses: the proxy falls silent at once, sends nothing
        // for it, and keeps its records (docs/coexistence.md).
        let up =
            after.frame(TestFrames.arpAnnouncement(from: Lab.hostMAC, for: IPv4Address(192, 0, 2, 2)))
            + after.frame(TestFrames.neighbourAdvertisement(from: Lab.hostMAC, for: global))
        #expect(after.engine.state(of: after.key) == .awake && H.hostRecordsSent(up).isEmpty)
        #expect(after.ask(H.http, .srv).isEmpty, "silent once the host shows it is up")
    }
}

/// The registration's reply and its log line are the engine's actions like the rest (docs/architecture.md): the
/// reply only to an address a reply can go to, malformed datagrams logged within their budget.
@Suite("Composed engine: registration replies and lines")
struct RegistrationActionTests {
    typealias H = EngineHarness

    static func replies(_ actions: [EngineAction]) -> [RegistrationReply] {
        actions.compactMap { if case .reply(let reply) = $0 { reply } else { nil } }
    }

    @Test func theReplyIsAnActionToASourceThatCanTakeIt() {
        var h = H()
        let bytes = Lab.registration().encoded(options: .appleUpdate)
        let answered = h.engine.receiveRegistration(bytes, from: Lab.hostV4, port: 5353, on: Lab.eth0, now: h.now)
        #expect(Self.replies(answered).map(\.destination) == [Lab.hostV4])
        #expect(H.logs(answered).contains { $0.hasPrefix("registered vm.local.") })
        let portZero = h.engine.receiveRegistration(bytes, from: Lab.hostV4, port: 0, on: Lab.eth0, now: h.now)
        #expect(Self.replies(portZero).isEmpty, "port 0 takes no reply")
        #expect(H.logs(portZero).contains { $0.hasPrefix("registration: no reply to") }, "the reply was there to send")
    }

    @Test func malformedDatagramsAreLoggedWithinTheirBudget() {
        var h = H()
        var lines = 0
        for _ in 0..<(LineBudget.linesPerWindow * 2) {
            let actions = h.engine.receiveRegistration(
                [0x12, 0x34, 0x28, 0x00, 0, 1, 0, 0, 0, 0, 0, 0], from: Lab.hostV4, port: 5353, on: Lab.eth0,
                now: h.now)
            lines += H.logs(actions).filter { $0.contains("malformed") }.count
        }
        #expect(lines == LineBudget.linesPerWindow, "\(lines) lines for \(LineBudget.linesPerWindow * 2) datagrams")
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
