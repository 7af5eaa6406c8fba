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
        #expect(WindowsIdentity(encoded: identity.encoded.dropLast()) == nil)
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
}
