import NIOCore
import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

/// Feeds the wake gate the traffic shapes of docs/waking.md: nmap's raw and connect scans, sweeps, monitors,
/// operating systems retransmitting, apps that resolve first. Time is explicit.
struct GateHarness {
    static let client = IPAddress("192.0.2.20")!
    static let clientMAC = MACAddress("02:53:50:00:00:20")!
    static let routerMAC = MACAddress("02:53:50:00:00:fe")!
    static let service = WakePolicy.Port(.tcp, 445)

    var gate: WakeGate
    var now = Lab.t0
    /// What each packet ended in, held ones included once their time came.
    var woken: [(WakeCandidate, WakeRule)] = []
    var declined: [(WakeCandidate, WakeRule)] = []
    var reports: [WakeGate.DeclineReport] = []

    init(_ configuration: WakeGate.Configuration = WakeGate.Configuration()) {
        self.gate = WakeGate(configuration: configuration)
    }

    static func host(_ number: Int) -> OwnerKey {
        OwnerKey(interface: "eth0", primaryMAC: MACAddress(bytes: [2, 0x53, 0x50, 0, 1, UInt8(number)])!)
    }

    /// A Linux connect(): window 64240, MSS, SACK permitted, timestamps, window scale.
    static let kernelSYN = WakeCandidate.TCPShape(
        flags: .syn, window: 64240, optionKinds: [2, 4, 8, 3], sequenceNumber: 0x1111_0000)
    /// nmap -sS: window 1024, MSS only.
    static let nmapSYN = WakeCandidate.TCPShape(
        flags: .syn, window: 1024, optionKinds: [2], sequenceNumber: 0x2222_0000)

    static func candidate(
        from source: IPAddress = client, mac: MACAddress = clientMAC, sourcePort: UInt16 = 40000, host: Int = 1,
        port: UInt16 = 445, tcp: WakeCandidate.TCPShape? = kernelSYN, transport: WakeTrigger.Transport = .tcp,
        services: Set<WakePolicy.Port> = [service, WakePolicy.Port(.tcp, 22)], onLink: Bool = true
    ) -> WakeCandidate {
        let key = Self.host(host)
        return WakeCandidate(
            source: source, sourceMAC: mac, sourcePort: sourcePort, host: key, hostMACs: [key.primaryMAC],
            destination: IPAddress("192.0.2.\(100 + host)")!, port: WakePolicy.Port(transport, port), tcp: tcp,
            servicePorts: services, onLink: onLink)
    }

    @discardableResult
    mutating func send(_ candidate: WakeCandidate) -> WakeVerdict {
        let decision = self.gate.consider(candidate, now: self.now)
        self.file(candidate, decision)
        return decision.verdict
    }

    mutating func file(_ candidate: WakeCandidate, _ decision: WakeGate.Decision) {
        switch decision.verdict {
        case .wake(let rule): self.woken.append((candidate, rule))
        case .decline(let rule): self.declined.append((candidate, rule))
        case .hold, .ignore: break
        }
        if let report = decision.report { self.reports.append(report) }
    }

    /// Lets time pass, settling held packets as they come due.
    mutating func wait(_ duration: Duration) {
        let end = self.now + duration
        while let deadline = self.gate.nextDeadline(), deadline <= end {
            self.now = max(self.now, deadline)
            for (candidate, decision) in self.gate.due(now: self.now) { self.file(candidate, decision) }
        }
        self.now = end
    }
}
