import NIOCore
import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

/// The composed engine tells the gate who resolved what: the responder's answers and resolve questions reach the
/// takeover, so a Bonjour app's connection wakes at once while a stranger's is held (docs/waking.md §3).
@Suite("Wake gate in the engine: resolves vouch for connections")
struct WakeGateEngineTests {
    typealias H = EngineHarness
    static let other = IPAddress("192.0.2.21")!

    static func syn(from source: IPAddress, port: UInt16 = 40001) -> [UInt8] {
        TestFrames.tcp(
            from: H.querierMAC, to: Lab.proxyMAC, source: source, destination: Lab.hostV4, sourcePort: port, port: 8080)
    }

    static func asleep() -> EngineHarness {
        var h = H()
        h.register()
        h.run(for: .seconds(12))
        return h
    }

    @Test func aBrowseAnswerCarryingTheServiceVouchesForItsAsker() {
        var h = Self.asleep()
        // A browse from 5353 (as python-zeroconf and mDNSResponder ask): the answer carries the SRV and address.
        h.mdns(DNSMessage(id: 0, questions: [DNSQuestion(name: "_http._tcp.local.", type: .ptr)]))
        h.run(for: .milliseconds(200))
        #expect(H.wakeEvents(h.deliver(Self.syn(from: H.querier))).map(\.rule) == [.resolvedFirst])
    }

    @Test func aResolveQuestionVouchesEvenWhenItsAnswerIsSuppressed() throws {
        var h = Self.asleep()
        var srv = try #require(h.ask(H.http, .srv).first)
        srv.ttl = 4500  // as long as any TTL the host registered (a legacy answer caps it at 10 s)
        // The asker already holds the SRV (known answer): nothing is sent, but it is resolving.
        h.mdns(DNSMessage(id: 0, questions: [DNSQuestion(name: H.http, type: .srv)], answers: [srv]), from: Self.other)
        #expect(H.transmissions(h.run(for: .seconds(1))).isEmpty, "the known answer was not suppressed")
        #expect(H.wakeEvents(h.deliver(Self.syn(from: Self.other))).map(\.rule) == [.resolvedFirst])
    }

    @Test func aStrangerAndASuppressedBrowseAreHeldAndAnAnswerToAnotherHostVouchesForNothing() throws {
        var h = Self.asleep()
        var ptr = try #require(h.ask("_http._tcp.local.", .ptr).first)
        ptr.ttl = 4500  // as a cache holds it (a legacy answer caps TTLs at 10 s, too low to suppress)
        // A cache refreshing its browse with the answer known: no answer, no vouching.
        h.mdns(
            DNSMessage(id: 0, questions: [DNSQuestion(name: "_http._tcp.local.", type: .ptr)], answers: [ptr]),
            from: Self.other)
        // A question about the proxy's own name tells nothing about the sleeper.
        h.mdns(DNSMessage(id: 0, questions: [DNSQuestion(name: "labproxy.local.", type: .a)]), from: Self.other)
        #expect(H.wakeEvents(h.frame(Self.syn(from: Self.other))).isEmpty, "held, not woken at once")
        let later = h.run(for: WakeRules.holdDelay).map(\.1)
        #expect(H.wakeEvents(later).map(\.rule) == [.noScanSeen])
    }
}

extension WakeGateEngineTests {
    /// SIGHUP hands the engine a new takeover configuration: the gate's source rules change with it, at once.
    @Test func aReloadedSourceRuleAppliesToTheNextPacket() throws {
        var h = Self.asleep()
        var sources = WakeSources()
        try sources.addIgnored(H.querier.description)
        let reloaded = h.engine.reconfigure(
            takeover: TakeoverConfiguration(sources: sources), expiryAction: .wake, refusalReply: .refused)
        // Nothing to send; one line saying what changed.
        #expect(
            reloaded.count == 1
                && H.logs(reloaded) == ["reload: the takeover and wake settings changed, refusals now refused"])
        let events = H.wakeEvents(h.frame(Self.syn(from: H.querier)))
        #expect(events.map(\.kind) == [.declined] && events.first?.rule == .sourceIgnored)
        let again = h.engine.reconfigure(
            takeover: TakeoverConfiguration(sources: sources), expiryAction: .wake, refusalReply: .refused)
        #expect(again.count == 1 && H.logs(again) == ["reload: nothing the engine uses changed"])
        _ = h.engine.reconfigure(takeover: TakeoverConfiguration(), expiryAction: .wake, refusalReply: .refused)
        #expect(H.wakeEvents(h.deliver(Self.syn(from: H.querier, port: 40002))).map(\.rule) == [.noScanSeen])
    }
}

extension WakeGateEngineTests {
    /// docs/waking.md §7: pyatv and Home Assistant ask a device's own address on port 5353. For a sleeping host the
    /// proxy answers from that address and port (where the querier expects it), and nothing wakes or is declined.
    @Test func aQuestionToTheSleepersOwnAddressIsAnsweredFromItAndWakesNothing() throws {
        var h = Self.asleep()
        let question = DNSMessage(id: 0x5151, questions: [DNSQuestion(name: H.http, type: .srv)])
        var datagram = ByteBuffer()
        UDPDatagram(
            sourcePort: 40053, destinationPort: 5353, payload: ByteBuffer(bytes: question.encoded(options: .mdns))
        ).write(to: &datagram)
        let frame = EthernetFrame.withTransportChecksumsRecomputed(
            TestFrames.ip(
                from: H.querierMAC, to: Lab.proxyMAC, source: H.querier, destination: Lab.hostV4, proto: .udp,
                payload: Array(datagram.readableBytesView)))
        let actions = h.deliver(frame)
        #expect(H.wakeEvents(actions).isEmpty, "no wake, no decline: \(H.wakeEvents(actions))")
        let answers = H.frames(actions).filter { $0.destination == H.querierMAC && $0.source == Lab.proxyMAC }
        let packet = try IPv4Packet(decoding: try #require(answers.first).payload)
        let udp = try UDPDatagram(decoding: packet.payload)
        #expect(
            packet.header.source == IPv4Address(192, 0, 2, 2) && packet.header.destination == IPv4Address(192, 0, 2, 20)
        )
        #expect(udp.sourcePort == 5353 && udp.destinationPort == 40053 && packet.header.ttl == 255)
        #expect(
            InternetChecksum.ipv4(
                source: packet.header.source, destination: packet.header.destination, protocol: 17,
                payload: Array(packet.payload.readableBytesView)) == 0, "the UDP checksum must verify")
        let reply = try DNSMessage(decoding: Array(udp.payload.readableBytesView))
        #expect(reply.id == 0x5151 && reply.answers.contains { $0.type == .srv })
        // The question resolved the host: the same client's connection wakes it after the hold.
        #expect(H.wakeEvents(h.deliver(Self.syn(from: H.querier))).map(\.rule) == [.resolvedFirst])
    }
}

extension WakeGateEngineTests {
    /// The answer to a question sent to a sleeping host's own address, as it leaves the proxy.
    static func askAtHostAddress(_ h: inout H, _ questions: [DNSQuestion], port: UInt16) throws -> DNSMessage? {
        let question = DNSMessage(id: 0x5152, questions: questions)
        var datagram = ByteBuffer()
        UDPDatagram(
            sourcePort: port, destinationPort: 5353, payload: ByteBuffer(bytes: question.encoded(options: .mdns))
        ).write(to: &datagram)
        let frame = EthernetFrame.withTransportChecksumsRecomputed(
            TestFrames.ip(
                from: H.querierMAC, to: Lab.proxyMAC, source: H.querier, destination: Lab.hostV4, proto: .udp,
                payload: Array(datagram.readableBytesView)))
        let answers = H.frames(h.deliver(frame)).filter { $0.destination == H.querierMAC }
        guard let first = answers.first else { return nil }
        let udp = try UDPDatagram(decoding: try IPv4Packet(decoding: first.payload).payload)
        return try DNSMessage(decoding: Array(udp.payload.readableBytesView))
    }

    /// A question to one sleeping host's address gets that host's records alone: pyatv and Home Assistant ask each
    /// address for `_services._dns-sd._udp`, and the proxy's own sleep proxy service in the answer made them take
    /// the host for a sleep proxy; another sleeping host's services there would be a second device at one address.
    /// From 5353 and from an ephemeral port (the legacy path, whose answer cache must not leak either).
    @Test(arguments: [UInt16(5353), 40054])
    func aQuestionToAHostsAddressGetsThatHostsRecordsAlone(port: UInt16) throws {
        var h = Self.asleep()
        h.register(
            Lab.registration(
                mac: MACAddress("02:53:50:00:00:07")!, host: "other.local.", addresses: [IPAddress("192.0.2.7")!],
                services: [("Other._ipp._tcp", 631)]), from: IPAddress("192.0.2.7")!)
        h.run(for: .seconds(12))
        // The same questions at the proxy's own address see everyone (and warm the legacy cache).
        h.mdns(
            DNSMessage(questions: [DNSQuestion(name: "_services._dns-sd._udp.local.", type: .ptr)]),
            from: H.querier, port: port)
        let enumeration = try #require(
            try Self.askAtHostAddress(&h, [DNSQuestion(name: "_services._dns-sd._udp.local.", type: .ptr)], port: port))
        let types = enumeration.answers.compactMap { if case .ptr(let ptr) = $0.rdata { ptr.target } else { nil } }
        #expect(types == ["_http._tcp.local."], "\(types)")
        #expect(
            try Self.askAtHostAddress(&h, [DNSQuestion(name: "_sleep-proxy._udp.local.", type: .ptr)], port: port)?
                .answers.isEmpty ?? true, "no sleep proxy service at a host's address")
        #expect(
            try Self.askAtHostAddress(&h, [DNSQuestion(name: "_ipp._tcp.local.", type: .ptr)], port: port)?.answers
                .isEmpty ?? true, "no other host's service")
        let own = try #require(
            try Self.askAtHostAddress(&h, [DNSQuestion(name: "_http._tcp.local.", type: .ptr)], port: port))
        #expect(own.answers.count == 1 && own.additionals.contains { $0.type == .srv })
        #expect(!own.additionals.contains { $0.name == "other.local." })
    }
}
