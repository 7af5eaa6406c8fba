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

@Suite("Wake gate: only people wake a host")
struct WakeGateTests {
    typealias G = GateHarness

    // MARK: - Scans

    /// Home Assistant's nmap tracker, raw (`-sS -F -T4`): 100 ports in random order, 10 within 50 ms, each
    /// retried once 250 ms later from source port +2 with a new ISN (docs/waking.md §2). Whatever the service
    /// port's place in the order, nothing wakes.
    @Test(arguments: [0, 5, 99])
    func aRawScanWakesNothingWhereverTheServicePortComes(place: Int) {
        var g = G()
        var ports = (1...100).map { UInt16(1000 + $0) }
        ports[place] = 445
        for (index, port) in ports.enumerated() {
            g.now = Lab.t0 + .milliseconds(index * 5)
            var shape = G.nmapSYN
            shape.sequenceNumber = UInt32(index)
            g.send(G.candidate(sourcePort: 51000, port: port, tcp: shape))
        }
        for (index, port) in ports.enumerated() {
            g.now = Lab.t0 + .milliseconds(750 + index * 5)
            var shape = G.nmapSYN
            shape.sequenceNumber = UInt32(10_000 + index)
            g.send(G.candidate(sourcePort: 51002, port: port, tcp: shape))
        }
        g.wait(.seconds(30))
        #expect(g.woken.isEmpty)
        #expect(g.gate.isScanner(G.client, now: g.now))
        #expect(g.declined.contains { $0.0.port == G.service && $0.1 == .scanner })
        // One line for the scanner, with what it touched: not one per packet.
        #expect(g.reports.filter { $0.scan != nil }.count == 1)
        #expect(g.reports.count <= 2)
        #expect(g.gate.statistics.scannersFound == 1)
    }

    /// nmap's connect scan (`-sT`): the kernel's own SYNs (full options), a new source port per probe, retries
    /// from new ports, never an identical retransmission. Caught by counting, not by the SYN's shape.
    @Test func aConnectScanWakesNothingEvenWithItsServicePortFirst() {
        var g = G()
        let ports: [UInt16] = [445] + (1...99).map { UInt16(2000 + $0) }
        for (index, port) in ports.enumerated() {
            g.now = Lab.t0 + .milliseconds(index * 5)
            var shape = G.kernelSYN
            shape.sequenceNumber = UInt32(index * 7919)
            g.send(G.candidate(sourcePort: UInt16(42000 + index), port: port, tcp: shape))
        }
        g.wait(.seconds(30))
        #expect(g.woken.isEmpty)
        #expect(g.declined.first { $0.0.port == G.service }?.1 == .scanner)
    }

    /// docs/waking.md §3: people touch at most two ports of one host at once (Windows: 445 and 139). Two wake;
    /// three are a scan.
    @Test func twoPortsOfAHostAreAPersonAndThreeAreAScan() {
        var two = G()
        two.send(G.candidate(sourcePort: 40001, port: 445))
        two.send(G.candidate(sourcePort: 40002, port: 139, services: [G.service, WakePolicy.Port(.tcp, 139)]))
        two.wait(.seconds(1))
        #expect(two.woken.count == 2 && two.woken.allSatisfy { $0.1 == .noScanSeen })
        #expect(!two.gate.isScanner(G.client, now: two.now))

        var three = G()
        three.send(G.candidate(sourcePort: 40001, port: 445))
        three.send(G.candidate(sourcePort: 40002, port: 139))
        three.send(G.candidate(sourcePort: 40003, port: 548))
        three.wait(.seconds(1))
        #expect(three.woken.isEmpty)
        #expect(three.gate.isScanner(G.client, now: three.now))
        #expect(WakeRules.scanPortsPerHost == 3)
    }

    /// One port of several sleeping hosts: four hosts is a Mac reconnecting its shares, five is a sweep.
    @Test func fourHostsAreAPersonAndFiveAreASweep() {
        var four = G()
        for host in 1...4 { four.send(G.candidate(sourcePort: UInt16(40000 + host), host: host)) }
        four.wait(.seconds(1))
        #expect(four.woken.count == 4)

        var five = G()
        for host in 1...5 { five.send(G.candidate(sourcePort: UInt16(40000 + host), host: host)) }
        five.wait(.seconds(1))
        #expect(five.woken.isEmpty)
        #expect(five.reports.first?.scan?.hosts == 5)
        #expect(WakeRules.scanHosts == 5)
    }

    @Test func touchesOlderThanTheWindowAreForgotten() {
        var g = G()
        g.send(G.candidate(sourcePort: 40001, port: 80, services: []))
        g.send(G.candidate(sourcePort: 40002, port: 81, services: []))
        g.now = g.now + WakeRules.scanWindow
        g.send(G.candidate(sourcePort: 40003, port: 445))
        g.wait(.seconds(1))
        #expect(g.woken.count == 1)
    }

    /// The quarantine runs from the scanner's last packet: Home Assistant scanning every 120 s stays quarantined;
    /// ten quiet minutes later its next connection is judged afresh.
    @Test func aScannerIsIgnoredUntilItHasBeenQuietForItsQuarantine() {
        var g = G()
        for port in [1, 2, 3] as [UInt16] { g.send(G.candidate(sourcePort: 40000 + port, port: port, services: [])) }
        #expect(g.gate.isScanner(G.client, now: g.now))
        for round in 1...5 {
            g.now = Lab.t0 + .seconds(120 * round)
            g.send(G.candidate(sourcePort: UInt16(41000 + round), port: 445))
            #expect(g.gate.isScanner(G.client, now: g.now))
        }
        g.wait(.seconds(1))
        #expect(g.woken.isEmpty)
        g.now = g.now + WakeRules.scannerQuarantine
        #expect(!g.gate.isScanner(G.client, now: g.now))
        g.send(G.candidate(sourcePort: 42000, port: 445))
        g.wait(.seconds(1))
        #expect(g.woken.count == 1)
    }

    // MARK: - People

    /// Browse → resolve → connect: no hold at all.
    @Test func aSourceThatResolvedTheHostWakesItAtOnce() {
        var g = G()
        g.gate.noteResolve(by: G.client, of: G.host(1), now: g.now)
        #expect(g.send(G.candidate()) == .wake(.resolvedFirst))
        // For another host it vouches for nothing.
        if case .hold = g.send(G.candidate(host: 2)) {} else { Issue.record("another host was not held") }
        // Nor once its records' TTL has passed.
        g.now = g.now + WakeRules.resolveWindow
        var fresh = G.kernelSYN
        fresh.sequenceNumber = 99
        if case .hold = g.send(G.candidate(sourcePort: 40100, tcp: fresh)) {} else { Issue.record("not held") }
    }

    /// A client resolves over IPv4 mDNS and connects over IPv6: the MAC its neighbour discovery showed ties
    /// them together.
    @Test func aResolveOverOneFamilyVouchesForAConnectionOverTheOther() {
        var g = G()
        let linkLocal = IPAddress("fe80::53:50ff:fe00:20")!
        g.gate.noteResolve(by: G.client, of: G.host(1), now: g.now)
        g.gate.learn(address: G.client, mac: G.clientMAC)
        #expect(g.send(G.candidate(from: linkLocal)) == .wake(.resolvedFirst))
    }

    /// A bare connect(): held 300 ms, then woken; the hold is what keeps a bare connect under a second.
    @Test func aBareConnectIsHeldAMomentThenWakes() {
        var g = G()
        #expect(g.send(G.candidate()) == .hold(until: Lab.t0 + WakeRules.holdDelay, .holdingForScan))
        g.wait(WakeRules.holdDelay - .milliseconds(1))
        #expect(g.woken.isEmpty)
        g.wait(.milliseconds(1))
        #expect(g.woken.map(\.1) == [.noScanSeen])
        #expect(WakeRules.holdDelay <= .milliseconds(450), "0.5 s resume + hold must stay under 1 s")
    }

    /// The identical SYN again after a second: an operating system (docs/waking.md §3), even from a source on
    /// a monitor budget. nmap's retry (source port +2, new ISN) is no retransmission.
    @Test func anIdenticalRetransmissionProvesARealStackAndANmapRetryDoesNot() {
        var g = G()
        var probe = G.nmapSYN
        probe.sequenceNumber = 7
        #expect(g.send(G.candidate(sourcePort: 51000, tcp: probe)).rule == .probeShape)
        g.now = g.now + .milliseconds(100)
        probe.sequenceNumber = 8
        #expect(g.send(G.candidate(sourcePort: 51002, tcp: probe)).rule == .probeShape)
        g.wait(WakeRules.retransmissionWait)
        #expect(g.woken.isEmpty && g.declined.map(\.1) == [.probeShape, .probeShape])

        // An embedded stack with the same small shape retransmits identically a second later: it wakes.
        var embedded = G()
        embedded.send(G.candidate(sourcePort: 1025, tcp: G.nmapSYN))
        embedded.wait(WakeRules.retransmissionMinimumGap - .milliseconds(1))
        #expect(embedded.send(G.candidate(sourcePort: 1025, tcp: G.nmapSYN)) == .ignore, "a duplicate, not a retry")
        embedded.wait(.milliseconds(501))
        #expect(embedded.send(G.candidate(sourcePort: 1025, tcp: G.nmapSYN)) == .wake(.retransmitted))
        embedded.wait(WakeRules.retransmissionWait)
        #expect(embedded.declined.isEmpty && embedded.woken.count == 1)
    }

    // MARK: - Monitors

    /// A source whose wake went unused (no resolve, no retransmission) must retransmit next time; a proof
    /// during the wake, or a resolve, lifts that; zero turns it off.
    @Test func aMonitorThatNeverUsedItsWakeMustProveItselfNextTime() {
        var g = G()
        g.send(G.candidate(sourcePort: 40001))
        g.wait(.seconds(1))
        #expect(g.woken.map(\.1) == [.noScanSeen])
        // A minute later the dashboard polls again with a short timeout: held, no retransmission, declined.
        g.now = g.now + .seconds(60)
        var poll = G.kernelSYN
        poll.sequenceNumber = 2
        #expect(g.send(G.candidate(sourcePort: 40002, tcp: poll)).rule == .monitorBudget)
        g.wait(WakeRules.retransmissionWait)
        #expect(g.declined.map(\.1) == [.monitorBudget])
        // A person at that machine: the kernel retransmits after a second, and that wakes.
        poll.sequenceNumber = 3
        g.send(G.candidate(sourcePort: 40003, tcp: poll))
        g.wait(.seconds(1))
        #expect(g.send(G.candidate(sourcePort: 40003, tcp: poll)) == .wake(.retransmitted))
        // ... and lifts the budget: the next connection is held only for a scan.
        poll.sequenceNumber = 4
        #expect(g.send(G.candidate(sourcePort: 40004, tcp: poll)).rule == .holdingForScan)

        // After the hold-off the source is trusted again.
        var later = G()
        later.send(G.candidate(sourcePort: 40001))
        later.wait(.seconds(1))
        later.now = later.now + WakeRules.defaultMonitorHoldoff
        #expect(later.send(G.candidate(sourcePort: 40002)).rule == .holdingForScan)

        // A resolve lifts it too, and a hold-off of zero means no budget at all.
        var resolved = G()
        resolved.send(G.candidate(sourcePort: 40001))
        resolved.wait(.seconds(1))
        resolved.gate.noteResolve(by: G.client, of: G.host(1), now: resolved.now)
        resolved.now = resolved.now + WakeRules.resolveWindow
        #expect(resolved.send(G.candidate(sourcePort: 40002)).rule == .holdingForScan)
        var off = G(WakeGate.Configuration(monitorHoldoff: .zero))
        off.send(G.candidate(sourcePort: 40001))
        off.wait(.seconds(1))
        #expect(off.send(G.candidate(sourcePort: 40002)).rule == .holdingForScan)
    }

    // MARK: - The user's rules

    @Test func sourceRulesComeBeforeEverythingButTheServicePort() throws {
        var sources = WakeSources()
        try sources.addIgnored("192.0.2.30")
        try sources.addIgnored("198.51.100.0/24")
        try sources.addIgnored("02:53:50:00:00:31")
        try sources.addOnlyFrom("\(G.host(2).primaryMAC)@192.0.2.40")
        var g = G(WakeGate.Configuration(sources: sources))
        func verdict(_ candidate: WakeCandidate) -> WakeVerdict { g.send(candidate) }
        #expect(verdict(G.candidate(from: IPAddress("192.0.2.30")!)) == .decline(.sourceIgnored))
        #expect(verdict(G.candidate(from: IPAddress("198.51.100.9")!, onLink: false)) == .decline(.sourceIgnored))
        #expect(
            verdict(G.candidate(from: IPAddress("192.0.2.31")!, mac: MACAddress("02:53:50:00:00:31")!))
                == .decline(.sourceIgnored))
        #expect(verdict(G.candidate(from: IPAddress("192.0.2.41")!, host: 2)) == .decline(.sourceNotAllowed))
        #expect(verdict(G.candidate(from: IPAddress("192.0.2.40")!, host: 2)).rule == .holdingForScan)
        // Routed traffic (a router's MAC, an off-link source) is declined unless allowed or named.
        #expect(
            verdict(G.candidate(from: IPAddress("203.0.113.5")!, mac: G.routerMAC, onLink: false))
                == .decline(.routed))
        var routed = G(WakeGate.Configuration(sources: WakeSources(allowRouted: true)))
        #expect(
            routed.send(G.candidate(from: IPAddress("203.0.113.5")!, mac: G.routerMAC, onLink: false)).rule
                == .holdingForScan)
        var vpn = WakeSources()
        try vpn.addOnlyFrom("198.51.100.0/24")
        var named = G(WakeGate.Configuration(sources: vpn))
        #expect(
            named.send(G.candidate(from: IPAddress("198.51.100.7")!, mac: G.routerMAC, onLink: false)).rule
                == .holdingForScan)
        #expect(named.send(G.candidate(from: G.client)) == .decline(.sourceNotAllowed))
    }

    @Test func sourceRulesThatDoNotParseSayWhy() {
        var sources = WakeSources()
        #expect(throws: WakeSources.ParseError.self) { try sources.addIgnored("192.0.2.300") }
        #expect(throws: WakeSources.ParseError.self) { try sources.addIgnored("192.0.2.0/33") }
        #expect(throws: WakeSources.ParseError.self) { try sources.addOnlyFrom("02:00@192.0.2.1") }
        #expect(throws: WakeSources.ParseError.self) { try sources.addOnlyFrom("02:00:00:00:00:05@nowhere") }
        #expect(sources == WakeSources(), "a rejected rule changes nothing")
    }

    // MARK: - What is not a candidate, and the service port

    @Test func resetsFinsStrayAcksAndKeepalivesAreNotCandidatesAndSSHDataWakes() {
        var g = G()
        for flags: TCPFlags in [.rst, .fin, [.fin, .ack], .ack, [.syn, .ack]] {
            let shape = WakeCandidate.TCPShape(flags: flags, window: 500, optionKinds: [], sequenceNumber: 1)
            #expect(g.send(G.candidate(tcp: shape)) == .ignore, "\(flags)")
        }
        var keepalive = G.candidate(port: 4500, tcp: nil, transport: .udp)
        keepalive.isNATKeepalive = true
        #expect(g.send(keepalive) == .ignore)
        let data = WakeCandidate.TCPShape(flags: [.ack, .psh], window: 500, optionKinds: [], sequenceNumber: 1)
        #expect(g.send(G.candidate(port: 22, tcp: data)) == .wake(.sshSession))
        #expect(g.send(G.candidate(port: 22, tcp: data, services: [])) == .ignore, "no SSH registered")
        #expect(g.send(G.candidate(port: 9999)) == .decline(.noService))
        #expect(
            g.send(G.candidate(port: 7000, tcp: nil, transport: .udp, services: [WakePolicy.Port(.udp, 7000)])).rule
                == .holdingForScan)
    }

    // MARK: - Bounds and collapsed reports

    @Test func declinesAreReportedOnceThenCountedUntilTheInterval() {
        var g = G()
        for index in 0..<50 {
            var shape = G.kernelSYN
            shape.sequenceNumber = UInt32(index)
            g.send(G.candidate(sourcePort: UInt16(40000 + index), port: 9999))
        }
        #expect(g.reports.map(\.count) == [1])
        g.now = g.now + WakeRules.declineLogInterval
        g.send(G.candidate(sourcePort: 41000, port: 9999))
        #expect(g.reports.map(\.count) == [1, 50])
    }

    /// Every declined source gets its line, but a flood from ever new (spoofed) sources gets at most the
    /// budget's lines a minute; every packet is still counted.
    @Test func aFloodOfNewSourcesIsCountedInFullButReportedWithinABudget() {
        var g = G()
        let flood = 100
        for index in 0..<flood {
            let source = IPAddress.v4(IPv4Address(rawValue: 0xC633_6400 &+ UInt32(index)))
            g.send(G.candidate(from: source, sourcePort: UInt16(2000 + index), port: 9999))
        }
        #expect(g.reports.count == LineBudget.linesPerWindow)
        #expect(g.gate.statistics.declined[.noService] == flood)
        // A minute later a source that was not reported is reported, with its count.
        g.now = g.now + LineBudget.window + WakeRules.declineLogInterval
        g.send(G.candidate(from: .v4(IPv4Address(rawValue: 0xC633_6400 &+ 99)), sourcePort: 3000, port: 9999))
        #expect(g.reports.last?.count == 2)
    }

    /// A flood from spoofed sources fills the held table; past it packets are declined, never woken.
    @Test func theHeldTableIsBoundedAndAFloodWakesNobody() {
        var g = G()
        for index in 0..<WakeRules.maximumHeld {
            let source = IPAddress.v4(
                IPv4Address(rawValue: 0xC633_6400 &+ UInt32(index % 250) &+ UInt32(index / 250) << 8))
            g.send(G.candidate(from: source, sourcePort: UInt16(1024 + index)))
        }
        #expect(g.gate.held.count == WakeRules.maximumHeld && g.declined.isEmpty)
        #expect(g.send(G.candidate(from: IPAddress("192.0.2.99")!)) == .decline(.busy))
        g.wait(.seconds(1))
        #expect(g.gate.held.isEmpty)
    }

    @Test func theTablesTheNetworkFillsStayWithinTheirBounds() {
        var g = G()
        let count = WakeRules.maximumTrackedSources + 10
        for index in 0..<count {
            let source = IPAddress.v4(IPv4Address(rawValue: 0xC000_0200 &+ UInt32(index)))
            g.gate.noteResolve(by: source, of: G.host(1), now: g.now)
            g.gate.learn(
                address: source, mac: MACAddress(bytes: [2, 0, 0, 0, UInt8(index >> 8 & 0xFF), UInt8(index & 0xFF)])!)
            _ = g.gate.consider(G.candidate(from: source, sourcePort: 2000, port: 9999), now: g.now)
        }
        #expect(g.gate.touches.count <= WakeRules.maximumTrackedSources)
        #expect(g.gate.resolvedBy.count <= WakeRules.maximumResolvers)
        #expect(g.gate.learnedMACs.count <= WakeRules.maximumLearnedMACs)
        #expect(g.gate.attempts.count <= WakeRules.maximumConnections)
        #expect(g.gate.declines.count <= WakeRules.maximumDeclineKeys)
        for host in 0..<(WakeRules.maximumResolvedHostsPerSource + 1) {
            g.gate.noteResolve(by: G.client, of: G.host(host), now: g.now)
        }
        #expect(g.gate.resolvedBy[G.client]?.count == WakeRules.maximumResolvedHostsPerSource)
    }

    @Test func theSYNsShapeComesFromItsOptions() {
        #expect(WakeGate.isProbeShaped(G.nmapSYN))
        #expect(!WakeGate.isProbeShaped(G.kernelSYN))
        let windows = WakeCandidate.TCPShape(
            flags: .syn, window: 8192, optionKinds: [2, 1, 3, 4], sequenceNumber: 1)
        #expect(!WakeGate.isProbeShaped(windows))
        let atLimit = WakeCandidate.TCPShape(
            flags: .syn, window: WakeRules.probeWindowLimit, optionKinds: [2], sequenceNumber: 1)
        var overLimit = atLimit
        overLimit.window += 1
        #expect(WakeGate.isProbeShaped(atLimit) && !WakeGate.isProbeShaped(overLimit))
        // Option kinds as decoded: NOPs left out, a malformed length ends the walk.
        #expect(
            TCPSegment.optionKinds([2, 4, 5, 0xB4, 1, 3, 3, 7, 4, 2, 8, 10] + [UInt8](repeating: 0, count: 8)) == [
                2, 3, 4, 8,
            ])
        #expect(TCPSegment.optionKinds([2, 4, 5, 0xB4, 9, 0, 3, 3, 7]) == [2])
        #expect(TCPSegment.optionKinds([2, 40]) == [])
        #expect(TCPSegment.optionKinds([0, 2, 4, 5, 0xB4]) == [])
    }
}

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
        #expect(H.wakeEvents(h.frame(Self.syn(from: H.querier))).map(\.rule) == [.resolvedFirst])
    }

    @Test func aResolveQuestionVouchesEvenWhenItsAnswerIsSuppressed() throws {
        var h = Self.asleep()
        var srv = try #require(h.ask(H.http, .srv).first)
        srv.ttl = 4500  // as long as any TTL the host registered (a legacy answer caps it at 10 s)
        // The asker already holds the SRV (known answer): nothing is sent, but it is resolving.
        h.mdns(DNSMessage(id: 0, questions: [DNSQuestion(name: H.http, type: .srv)], answers: [srv]), from: Self.other)
        #expect(H.transmissions(h.run(for: .seconds(1))).isEmpty, "the known answer was not suppressed")
        #expect(H.wakeEvents(h.frame(Self.syn(from: Self.other))).map(\.rule) == [.resolvedFirst])
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
        // The question resolved the host: the same client's connection wakes it at once.
        #expect(H.wakeEvents(h.frame(Self.syn(from: H.querier))).map(\.rule) == [.resolvedFirst])
    }
}
