import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

/// Drives the pure responder with explicit time and checks every packet it wants sent.
struct ResponderHarness {
    static let querierV4 = IPAddress("192.0.2.20")!
    static let querierV6 = IPAddress("fe80::20")!
    static let mdnsV4 = IPAddress.v4(.mdnsGroup)

    var registrar = Registrar(
        configuration: {
            var c = RegistrationConfiguration(); c.requireSourceAmongClaimedAddresses = false; return c
        }())
    var responder: Responder
    var now = Lab.t0

    init(established: Bool = true) {
        self.responder = Responder(
            configuration: ResponderConfiguration(
                instanceLabel: "20-40-10-65.0 Lab Proxy", hostLabel: "labproxy", registrationPort: 5599, seed: 7))
        _ = self.responder.setInterfaces([Lab.eth0], now: self.now)
        if established { _ = self.run(for: .seconds(5)) }
    }

    @discardableResult
    mutating func register(_ message: DNSMessage) -> Acceptance {
        let outcome = self.registrar.handle(
            datagram: message.encoded(options: .appleUpdate), from: Lab.hostV4, on: Lab.eth0, now: self.now)
        guard case .accepted(let acceptance) = outcome else { fatalError("not accepted: \(outcome)") }
        self.responder.registered(acceptance.registration, previous: acceptance.previous, now: self.now)
        return acceptance
    }

    mutating func receive(
        _ message: DNSMessage, from source: IPAddress = querierV4, port: UInt16 = 5353,
        to destination: IPAddress? = mdnsV4
    ) -> [ResponderAction] {
        self.responder.receive(
            message.encoded(), from: source, port: port, destination: destination, interfaceIndex: Lab.eth0.index,
            store: self.registrar.store, now: self.now)
    }

    /// Runs every timer due within `duration`, advancing `now` from deadline to deadline.
    mutating func run(for duration: Duration) -> [(Timestamp, ResponderAction)] {
        let end = self.now + duration
        var actions: [(Timestamp, ResponderAction)] = []
        while let deadline = self.responder.nextDeadline(), deadline <= end {
            self.now = max(self.now, deadline)
            actions += self.responder.tick(store: self.registrar.store, now: self.now).map { (self.now, $0) }
        }
        self.now = end
        return actions
    }

    static func transmissions(_ actions: [ResponderAction]) -> [MDNSTransmission] {
        actions.compactMap { if case .transmit(let t) = $0 { return t } else { return nil } }
    }

    static func transmissions(_ actions: [(Timestamp, ResponderAction)]) -> [(Timestamp, MDNSTransmission)] {
        actions.compactMap { if case .transmit(let t) = $0.1 { return ($0.0, t) } else { return nil } }
    }
}
