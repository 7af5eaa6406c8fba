import NIOCore
import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

/// A sleeping Windows PC found by name (docs/windows.md): its names learned from its own frames and the proxy's
/// questions while it is awake, answered byte for byte as it answered while it sleeps, and a client that
/// resolved it that way vouched for to the wake gate.
@Suite("Windows names: NetBIOS and LLMNR for adopted PCs")
struct WindowsNamesTests {
    typealias H = EngineHarness
    typealias V = WindowsVectors
    static let proxyV4 = IPAddress("192.0.2.1")!
    static let broadcast = IPAddress("192.0.2.255")!
    static var key: OwnerKey { OwnerKey(interface: "eth0", primaryMAC: V.pcMAC) }

    static func fromPC(_ payload: [UInt8], port: UInt16, to destination: IPAddress, mac: MACAddress) -> [UInt8] {
        TestFrames.udp(
            from: V.pcMAC, to: mac, source: V.pcV4, destination: destination, sourcePort: port, port: port,
            payload: payload)
    }

    static func fromClient(_ payload: [UInt8], port: UInt16, sourcePort: UInt16, to destination: IPAddress)
        -> [UInt8]
    {
        TestFrames.udp(
            from: V.clientMAC, to: destination == broadcast ? .broadcast : Lab.proxyMAC, source: V.clientV4,
            destination: destination, sourcePort: sourcePort, port: port, payload: payload)
    }

    /// UDP payloads sent by the proxy to `port` (as frames), with their addresses.
    static func sent(_ actions: [EngineAction], toPort port: UInt16? = nil, fromPort: UInt16? = nil)
        -> [(
            source: IPAddress, destination: IPAddress, destinationMAC: MACAddress, sourcePort: UInt16, port: UInt16,
            payload: [UInt8]
        )]
    {
        H.frames(actions).compactMap { frame in
            guard let (source, destination, datagram) = WindowsFrames.udp(in: frame) else { return nil }
            if let port, datagram.destinationPort != port { return nil }
            if let fromPort, datagram.sourcePort != fromPort { return nil }
            return (
                source, destination, frame.destination, datagram.sourcePort, datagram.destinationPort,
                Array(datagram.payload.readableBytesView)
            )
        }
    }

    /// The PC adopted, awake: its registration broadcast, then its answers to the proxy's node-status and LLMNR
    /// questions, each asked because of what came before.
    static func learnedPC() throws -> H {
        var h = H()
        h.engine.takeover?.configuration.policy.global.added = [WakePolicy.Port(.tcp, 445)]
        h.record(try h.engine.setAdopted([V.pcMAC], now: h.now))
        let first = h.frame(Self.fromPC(V.registration, port: 137, to: broadcast, mac: .broadcast))
        let statusQuestion = try #require(Self.sent(first, toPort: 137).first)
        #expect(statusQuestion.destination == V.pcV4 && statusQuestion.destinationMAC == V.pcMAC)
        #expect(statusQuestion.source == proxyV4)
        #expect(try NetBIOSMessage(decoding: statusQuestion.payload).questions.first?.type == NetBIOSMessage.typeNBSTAT)
        #expect(h.engine.adoption.hosts[V.pcMAC]?.windows.uniqueNames == [NetBIOSName("WINPC", suffix: 0x20)!])

        let second = h.frame(Self.fromPC(V.nodeStatusResponse, port: 137, to: proxyV4, mac: Lab.proxyMAC))
        #expect(h.engine.adoption.hosts[V.pcMAC]?.windows.names.count == 5)
        let llmnrQuestion = try #require(Self.sent(second, toPort: 5355).first)
        let asked = try DNSMessage(decoding: llmnrQuestion.payload)
        #expect(asked.questions.first?.name.labelStrings == ["WINPC"])
        h.frame(Self.fromPC(V.llmnrResponse, port: 5355, to: proxyV4, mac: Lab.proxyMAC))
        #expect(h.engine.adoption.hosts[V.pcMAC]?.windows.llmnrName == "winpc")
        return h
    }

    /// The PC falls silent: checked by its NetBIOS name (no mDNS), unanswered, held.
    static func sleepingPC() throws -> H {
        var h = try Self.learnedPC()
        let run = h.run(for: .seconds(40))
        let checks = Self.sent(run.map(\.1), toPort: 137).filter {
            (try? NetBIOSMessage(decoding: $0.payload))?.questions.first?.type == NetBIOSMessage.typeNBSTAT
        }
        #expect(checks.count == AdoptionRules.checkQuestions, "checked by a node-status query")
        #expect(checks.allSatisfy { $0.destination == V.pcV4 && $0.destinationMAC == V.pcMAC })
        #expect(h.engine.state(of: Self.key) == .asleep)
        return h
    }

    @Test func aSleepingPCsNamesAreAnsweredByteForByteAsItAnswered() throws {
        var h = try Self.sleepingPC()
        // NetBIOS name query, broadcast: unicast from the PC's address and port 137 to the asker's port.
        let name = Self.sent(h.frame(Self.fromClient(V.nameQuery, port: 137, sourcePort: 55849, to: Self.broadcast)))
        #expect(name.count == 1)
        #expect(name.first?.payload == V.nameQueryResponse)
        #expect(name.first?.source == V.pcV4 && name.first?.sourcePort == 137)
        #expect(name.first?.destination == V.clientV4 && name.first?.port == 55849)
        #expect(name.first?.destinationMAC == V.clientMAC)
        // Node status to its held address: its table, as it listed it.
        let status = Self.sent(h.frame(Self.fromClient(V.nodeStatusQuery, port: 137, sourcePort: 43578, to: V.pcV4)))
        #expect(status.map(\.payload) == [V.nodeStatusResponse])
        // LLMNR A over 224.0.0.252.
        let llmnr = Self.sent(
            h.frame(
                TestFrames.udp(
                    from: V.clientMAC, to: MACAddress("01:00:5e:00:00:fc")!, source: V.clientV4,
                    destination: .v4(WindowsRules.llmnrGroupV4), sourcePort: 42159, port: 5355, payload: V.llmnrQuery)))
        let answer = try DNSMessage(decoding: try #require(llmnr.first?.payload))
        #expect(answer == (try DNSMessage(decoding: V.llmnrResponse)))
        #expect(llmnr.first?.source == V.pcV4 && llmnr.first?.sourcePort == 5355 && llmnr.first?.port == 42159)
    }

    @Test func groupNamesOtherNamesAndMalformedQueriesGetNothing() throws {
        var h = try Self.sleepingPC()
        var query = try NetBIOSMessage(decoding: V.nameQuery)
        query.questions[0].name = NetBIOSName("WORKGROUP", suffix: 0)!
        #expect(
            Self.sent(h.frame(Self.fromClient(query.encoded(), port: 137, sourcePort: 1, to: Self.broadcast))).isEmpty)
        query.questions[0].name = NetBIOSName("OTHERPC", suffix: 0x20)!
        #expect(
            Self.sent(h.frame(Self.fromClient(query.encoded(), port: 137, sourcePort: 1, to: Self.broadcast))).isEmpty)
        for cut in [0, 5, 12, 30, V.nameQuery.count - 1] {
            let actions = h.frame(
                Self.fromClient(Array(V.nameQuery.prefix(cut)), port: 137, sourcePort: 1, to: Self.broadcast))
            #expect(Self.sent(actions).isEmpty)
        }
        #expect(h.engine.windows.statistics.malformed == 5)
        // AAAA: the PC has no IPv6 address to wake it through, so no answer.
        #expect(
            Self.sent(
                h.frame(
                    Self.fromClient(V.llmnrQueryAAAA, port: 5355, sourcePort: 2, to: .v4(WindowsRules.llmnrGroupV4)))
            ).isEmpty)
        #expect(h.engine.state(of: Self.key) == .asleep)
    }

    @Test(arguments: ["netbios", "llmnr", "none"])
    func aClientThatResolvedThePCByNameIsAResolverToTheWakeGate(_ way: String) throws {
        var h = try Self.sleepingPC()
        if way == "netbios" {
            h.frame(Self.fromClient(V.nameQuery, port: 137, sourcePort: 55849, to: Self.broadcast))
        } else if way == "llmnr" {
            h.frame(Self.fromClient(V.llmnrQuery, port: 5355, sourcePort: 42159, to: .v4(WindowsRules.llmnrGroupV4)))
        }
        let warm = h.deliver(
            TestFrames.tcp(from: V.clientMAC, to: Lab.proxyMAC, source: V.clientV4, destination: V.pcV4, port: 445))
        let wake = try #require(H.wakeEvents(warm).first)
        // A client that asked nothing is no resolver (the test's control).
        #expect((wake.rule == .resolvedFirst) == (way != "none"), "\(wake.rule.map(\.rawValue) ?? "-")")
        #expect(wake.host == Self.key)
    }

    @Test func whatThePCTaughtSurvivesTheJournalAndARestart() throws {
        let h = try Self.sleepingPC()
        let held = try #require(h.engine.registrar.store[Self.key])
        #expect(held.windows?.names.count == 5 && held.windows?.llmnrName == "winpc")
        let back = AdoptionTests.throughJournal([held], now: h.now)
        #expect(back.first?.windows == held.windows)
        // A damaged Windows trailer drops the entry, not the journal.
        var identity = try #require(held.windows)
        #expect(WindowsIdentity(encoded: identity.encoded[...]) == identity)
        #expect(WindowsIdentity(encoded: identity.encoded.dropLast(2)) == nil)
        identity.names = Array(repeating: identity.names[0], count: WindowsRules.maximumNames)
        #expect(WindowsIdentity(encoded: identity.encoded[...]) != nil)
        var tooMany = identity.encoded
        tooMany[0] = UInt8(WindowsRules.maximumNames + 1)
        #expect(WindowsIdentity(encoded: tooMany[...]) == nil)
    }

    @Test func theTableIsBoundedAndOnlyThePCsOwnFramesTeach() throws {
        var h = H()
        h.record(try h.engine.setAdopted([V.pcMAC], now: h.now))
        // Someone else's registration of a name is not the PC's.
        h.frame(
            TestFrames.udp(
                from: V.clientMAC, to: .broadcast, source: V.clientV4, destination: Self.broadcast, sourcePort: 137,
                port: 137, payload: V.registration))
        #expect(h.engine.adoption.hosts[V.pcMAC]?.windows.isEmpty == true)
        for index in 0..<(WindowsRules.maximumNames + 3) {
            var registration = try NetBIOSMessage(decoding: V.registration)
            registration.questions[0].name = NetBIOSName("PC\(index)", suffix: 0x20)!
            h.frame(Self.fromPC(registration.encoded(), port: 137, to: Self.broadcast, mac: .broadcast))
        }
        #expect(h.engine.adoption.hosts[V.pcMAC]?.windows.names.count == WindowsRules.maximumNames)
    }

    @Test func port139WakesAHostThat445WakesUnlessARuleRemovesIt() throws {
        let mac = V.pcMAC
        let p139 = WakePolicy.netbiosSession
        #expect(!WakePolicy().wakes(p139, macs: [mac], registered: []))
        #expect(WakePolicy().wakes(p139, macs: [mac], registered: [WakePolicy.smb]))
        var policy = WakePolicy()
        try policy.add(rule: "\(mac)@tcp/445")
        #expect(policy.wakes(p139, macs: [mac], registered: []))
        #expect(!policy.wakes(p139, macs: [MACAddress("02:00:00:00:00:09")!], registered: []))
        try policy.add(rule: "-tcp/139")
        #expect(!policy.wakes(p139, macs: [mac], registered: []))
        var removed445 = WakePolicy()
        try removed445.add(rule: "-tcp/445")
        #expect(!removed445.wakes(p139, macs: [mac], registered: [WakePolicy.smb]))
    }

    /// The PC registers itself (a sleep-proxy client on it, or its own responder's registration): the proxy's
    /// stand-in gives way whatever the registration's message ID, 0 (the stand-in's own) included, and a host that
    /// has just shown it is awake is not answered for by name.
    @Test func aPCsOwnRegistrationShowsItAwakeWhateverItsMessageID() throws {
        var h = try Self.sleepingPC()
        let registration = SleepRegistration(
            hostName: "winpc.local.", addresses: [V.pcV4], services: [],
            owner: OwnerOption(sequence: 1, primaryMAC: V.pcMAC), lease: 7200)
        for message in registration.messages(id: 0, maximumSize: 1440) {
            let actions = h.engine.receiveRegistration(
                message.encoded(options: .appleUpdate), from: V.pcV4, on: Lab.eth0, now: h.now)
            #expect(h.engine.auditViolation(after: actions) == nil)
        }
        #expect(h.engine.registration(Self.key)?.isAdopted == false)
        #expect(h.engine.state(of: Self.key) != .asleep, "\(h.engine.hostsByState)")
        #expect(
            Self.sent(h.frame(Self.fromClient(V.nameQuery, port: 137, sourcePort: 55849, to: Self.broadcast))).isEmpty)
    }

    /// Speaking for a host's registration answers that registration's names and no others: one that shows none
    /// (its Windows names forgotten) leaves nothing of the old ones answered.
    @Test func speakingForARegistrationWithoutNamesDropsTheOldOnes() throws {
        var h = try Self.sleepingPC()
        var registration = try #require(h.engine.registration(Self.key))
        let query = Self.fromClient(V.nameQuery, port: 137, sourcePort: 55849, to: Self.broadcast)
        #expect(Self.sent(h.frame(query)).count == 1, "answered while its names are known")
        registration.windows = nil
        h.engine.windows.speak(for: registration)
        #expect(h.engine.windows.held[Self.key] == nil)
        #expect(Self.sent(h.frame(query)).isEmpty)
    }

    // MARK: - WS-Discovery

    static let wsdGroup = IPAddress("239.255.255.250")!

    static func wsdFromClient(_ payload: [UInt8]) -> [UInt8] {
        TestFrames.udp(
            from: V.clientMAC, to: WindowsRules.wsdGroupV4MAC, source: V.clientV4, destination: wsdGroup,
            sourcePort: 35977, port: 3702, payload: payload)
    }

    @Test func aSleepingPCStaysInExplorersNetworkViewAndItsMetadataPortRefusesAtOnce() throws {
        var h = try Self.learnedPC()
        // Its LLMNR answer showed a PC: the proxy probed for devices, once.
        let probes = Self.sent(h.log.map(\.1), toPort: 3702)
        #expect(probes.count == 1 && probes.first?.destination == Self.wsdGroup)
        #expect(
            try WSDiscoveryMessage(decoding: try #require(probes.first?.payload)).types == [WindowsNames.deviceType])
        // Its Hello (as at start) teaches its endpoint.
        let hello = h.frame(
            TestFrames.udp(
                from: V.pcMAC, to: WindowsRules.wsdGroupV4MAC, source: V.pcV4, destination: Self.wsdGroup,
                sourcePort: 45558, port: 3702, payload: V.wsdHello))
        // A Hello without types: its endpoint resolved, once.
        let resolve = try #require(Self.sent(hello, toPort: 3702).first)
        #expect(
            try WSDiscoveryMessage(decoding: resolve.payload).endpoint
                == "urn:uuid:6bd51d6a-0000-4000-8000-025749000002")
        #expect(h.engine.adoption.hosts[V.pcMAC]?.windows.wsd?.types == [], "wsdd's Hello lists no types")
        // Its match to the proxy's Probe gives its types; the XAddrs of its Hello are kept.
        h.frame(Self.fromPC(V.wsdProbeMatches, port: 3702, to: Self.proxyV4, mac: Lab.proxyMAC))
        let endpoint = try #require(h.engine.adoption.hosts[V.pcMAC]?.windows.wsd)
        #expect(endpoint.address == "urn:uuid:6bd51d6a-0000-4000-8000-025749000002" && endpoint.xaddrs != nil)
        #expect(endpoint.types.map(\.local) == ["Device", "Computer"] && endpoint.instanceID == "1795825739")
        _ = h.run(for: .seconds(40))
        #expect(h.engine.state(of: Self.key) == .asleep)

        // Explorer's Probe: nothing at once, then its match twice within SOAP-over-UDP's delays.
        #expect(Self.sent(h.frame(Self.wsdFromClient(V.wsdProbe))).isEmpty)
        let matches = Self.sent(h.run(for: .milliseconds(800)).map(\.1), fromPort: 3702)
        #expect(matches.count == 2 && matches.first?.payload == matches.last?.payload)
        let match = try WSDiscoveryMessage(decoding: try #require(matches.first?.payload))
        let expected = try WSDiscoveryMessage(decoding: V.wsdProbeMatches)
        #expect(match.kind == .probeMatches && match.relatesTo == expected.relatesTo)
        #expect(match.endpoint == expected.endpoint && match.types == expected.types && match.xaddrs == nil)
        #expect(match.instanceID == expected.instanceID && match.metadataVersion == "1")
        #expect(matches.first?.source == V.pcV4 && matches.first?.port == 35977)
        // The Probe's repeat (same MessageID) is answered once; a Probe for another type is not answered.
        h.frame(Self.wsdFromClient(V.wsdProbe))
        let printer = Array(
            String(decoding: V.wsdProbe, as: UTF8.self).replacing("wsdp:Device", with: "wsdp:Printer")
                .replacing("764f8865819c", with: "764f8865819d").utf8)
        h.frame(Self.wsdFromClient(printer))
        #expect(Self.sent(h.run(for: .seconds(1)).map(\.1), fromPort: 3702).isEmpty)
        // Its Resolve: the XAddrs it gave.
        h.frame(Self.wsdFromClient(V.wsdResolve))
        let resolved = Self.sent(h.run(for: .milliseconds(800)).map(\.1), fromPort: 3702)
        #expect(try WSDiscoveryMessage(decoding: try #require(resolved.first?.payload)).xaddrs == endpoint.xaddrs)
        // The metadata Get's connection: refused at once from its address, and nothing wakes.
        let syn = TestFrames.tcp(
            from: V.clientMAC, to: Lab.proxyMAC, source: V.clientV4, destination: V.pcV4, sourcePort: 47918,
            port: 5357, sequence: 1000)
        let refused = h.deliver(syn)
        #expect(H.wakeEvents(refused).isEmpty)
        let reset = try #require(H.frames(refused).first)
        let packet = try IPv4Packet(decoding: reset.payload)
        let segment = try TCPSegment(decoding: packet.payload)
        #expect(packet.header.source == IPv4Address("192.0.2.2") && segment.sourcePort == 5357)
        #expect(segment.flags == [.rst, .ack] && segment.acknowledgementNumber == 1001)
        #expect(h.engine.state(of: Self.key) == .asleep)
    }

    @Test func anotherMachineRegisteringThePCsNameIsDefendedAndWakesIt() throws {
        var h = try Self.sleepingPC()
        // Someone registers WORKGROUP<00> (a group name): anyone may.
        var group = try NetBIOSMessage(decoding: V.registration)
        group.questions[0].name = NetBIOSName("WORKGROUP", suffix: 0)!
        group.additionals[0].rdata = [0x80, 0, 192, 0, 2, 3]
        let shared = h.frame(Self.fromClient(group.encoded(), port: 137, sourcePort: 137, to: Self.broadcast))
        #expect(Self.sent(shared).isEmpty && H.wakeEvents(shared).isEmpty)
        // Someone registers WINPC<20> (unique) for its own address: told no, and the PC is woken to defend it.
        var taken = try NetBIOSMessage(decoding: V.registration)
        taken.additionals[0].rdata = [0, 0, 192, 0, 2, 3]
        let actions = h.frame(Self.fromClient(taken.encoded(), port: 137, sourcePort: 137, to: Self.broadcast))
        let negative = try NetBIOSMessage(decoding: try #require(Self.sent(actions).first?.payload))
        #expect(negative.isResponse && negative.opcode == .registration && negative.responseCode == 6)
        #expect(negative.id == taken.id && negative.answers.first?.name == NetBIOSName("WINPC", suffix: 0x20))
        #expect(Self.sent(actions).first?.source == V.pcV4 && Self.sent(actions).first?.destination == V.clientV4)
        let wake = try #require(H.wakeEvents(actions).first)
        #expect(wake.kind == .wake && wake.trigger == .netbiosConflict(name: "WINPC<20>", from: V.clientV4))
    }

    @Test func aHeldPCsOwnQuestionHandsItBackAndIsNotAnsweredNorAreItsQueuedMatches() throws {
        var h = try Self.sleepingPC()
        h.frame(Self.fromPC(V.wsdProbeMatches, port: 3702, to: Self.proxyV4, mac: Lab.proxyMAC))
        // A client's Probe queues its match; then the PC resumes and asks for its own name over LLMNR.
        _ = h.run(for: .seconds(40))
        h.frame(Self.wsdFromClient(V.wsdProbe))
        let own = h.frame(
            TestFrames.udp(
                from: V.pcMAC, to: MACAddress("01:00:5e:00:00:fc")!, source: V.pcV4,
                destination: .v4(WindowsRules.llmnrGroupV4), sourcePort: 50001, port: 5355, payload: V.llmnrQuery))
        #expect(Self.sent(own, fromPort: 5355).isEmpty, "the proxy answered the PC's own question")
        #expect(h.engine.state(of: Self.key) == nil, "not handed back by its own question")
        #expect(Self.sent(h.run(for: .seconds(1)).map(\.1), fromPort: 3702).isEmpty, "a queued match went out")
    }

    @Test func aFloodOfProbesQueuesNoMoreThanTheBound() throws {
        var h = try Self.sleepingPC()
        h.frame(Self.fromPC(V.wsdProbeMatches, port: 3702, to: Self.proxyV4, mac: Lab.proxyMAC))
        _ = h.run(for: .seconds(40))
        #expect(h.engine.state(of: Self.key) == .asleep)
        let text = String(decoding: V.wsdProbe, as: UTF8.self)
        func probe(_ n: Int) -> [UInt8] {
            Self.wsdFromClient(Array(text.replacing("764f8865819c", with: String(format: "%012x", n)).utf8))
        }
        // Each match is sent twice: N/2 Probes fill the queue exactly, one more is dropped.
        let fits = WindowsRules.maximumPendingMatches / 2
        for n in 0..<fits { h.frame(probe(n)) }
        #expect(h.engine.windows.statistics.matchesDropped == 0)
        h.frame(probe(fits))
        #expect(h.engine.windows.statistics.matchesDropped == 1)
        for n in (fits + 1)..<(fits + 1000) { h.frame(probe(n)) }
        let sent = Self.sent(h.run(for: .seconds(1)).map(\.1), fromPort: 3702)
        #expect(sent.count == WindowsRules.maximumPendingMatches)
    }

    @Test func aPCWhoseFirewallDropsNodeStatusIsCheckedByARPNotHeldWhileAwake() throws {
        var h = H()
        h.record(try h.engine.setAdopted([V.pcMAC], now: h.now))
        // Its registration broadcasts teach its names; it never answers the proxy's node status.
        h.frame(Self.fromPC(V.registration, port: 137, to: Self.broadcast, mac: .broadcast))
        #expect(h.engine.adoption.hosts[V.pcMAC]?.windows.answersNodeStatus == false)
        var asked: [EngineAction] = []
        _ = h.run(for: .seconds(30)) { _, actions in asked += actions }
        let nodeStatus = Self.sent(asked, toPort: 137).filter {
            (try? NetBIOSMessage(decoding: $0.payload))?.questions.first?.type == NetBIOSMessage.typeNBSTAT
        }
        #expect(nodeStatus.count <= WindowsRules.questionsPerSpell, "only the learning questions")
        let arpProbes = H.frames(asked).filter { $0.etherType == .arp && $0.destination == V.pcMAC }
        #expect(!arpProbes.isEmpty, "its checks are ARP probes")
    }
}
