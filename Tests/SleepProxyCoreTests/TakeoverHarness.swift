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
