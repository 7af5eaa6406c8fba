import NIOCore
import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

extension WakeGateTests {
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

    /// Expired entries leave the tables within `WakeRules.sweepInterval`, not only when a table nears its bound: a
    /// month's run showed the connection table grow by a few dozen a day (docs/long-running.md).
    @Test func expiredEntriesAreSweptWithinAMinute() {
        var g = G()
        g.send(G.candidate(sourcePort: 40001))  // held a moment: touched, its connection remembered
        g.gate.noteResolve(by: IPAddress("192.0.2.30")!, of: G.host(1), now: g.now)
        #expect(g.gate.attempts.count == 1 && g.gate.touches.count == 1 && g.gate.resolvedBy.count == 1)
        // One tick short of the sweep: the expired connection and touches are still there.
        g.now = Lab.t0 + WakeRules.sweepInterval - .milliseconds(1)
        g.gate.noteResolve(by: IPAddress("192.0.2.31")!, of: G.host(1), now: g.now)
        #expect(g.gate.attempts.count == 1 && g.gate.touches.count == 1)
        // At the interval: gone; the resolves, still within their window, stay.
        g.now = Lab.t0 + WakeRules.sweepInterval
        g.gate.noteResolve(by: IPAddress("192.0.2.32")!, of: G.host(1), now: g.now)
        #expect(g.gate.attempts.isEmpty && g.gate.touches.isEmpty)
        #expect(g.gate.resolvedBy.count == 3)
        // Past the resolve window, at the next sweep, the resolves go too.
        g.now = Lab.t0 + WakeRules.resolveWindow + WakeRules.sweepInterval * 2
        _ = g.gate.due(now: g.now)
        #expect(g.gate.resolvedBy.isEmpty)
    }

    /// A sweep keeps a source whose newest touch is recent even when it is not the last in its list (a port seen
    /// again is refreshed in place): dropping it forgot a scan's earlier ports.
    @Test func aSweepKeepsASourceWhoseRefreshedTouchIsRecent() {
        var g = G()
        for (at, port) in [(0, 5000), (1000, 5001), (9000, 5000)] as [(Int, UInt16)] {
            g.now = Lab.t0 + .milliseconds(at)
            g.send(G.candidate(sourcePort: UInt16(41000 + at / 1000), port: port))
        }
        g.gate.prune(now: Lab.t0 + .milliseconds(11_500))
        #expect(g.gate.touches[G.client]?.count == 2, "\(String(describing: g.gate.touches[G.client]))")
        for (at, port) in [(12_000, 5002), (12_100, 5003)] as [(Int, UInt16)] {
            g.now = Lab.t0 + .milliseconds(at)
            g.send(G.candidate(sourcePort: UInt16(42000 + at / 1000), port: port))
        }
        // 5000 (9 s), 5002 and 5003 within the scan window: three ports, a scanner.
        #expect(g.gate.isScanner(G.client, now: g.now))
    }
}
