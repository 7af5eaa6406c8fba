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
