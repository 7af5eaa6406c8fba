import NIOCore
import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

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

    /// Browse → resolve → connect: held only the moment a scan needs to show itself, then woken.
    @Test func aSourceThatResolvedTheHostWakesItAfterTheHold() {
        var g = G()
        g.gate.noteResolve(by: G.client, of: G.host(1), now: g.now)
        #expect(g.send(G.candidate()) == .hold(until: g.now + WakeRules.holdDelay, .resolvedFirst))
        g.wait(WakeRules.holdDelay - .milliseconds(1))
        #expect(g.woken.isEmpty)
        g.wait(.milliseconds(1))
        #expect(g.woken.map(\.1) == [.resolvedFirst])
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
        g.send(G.candidate(from: linkLocal))
        g.wait(WakeRules.holdDelay)
        #expect(g.woken.map(\.1) == [.resolvedFirst])
    }

    /// Home Assistant resolves every sleeping host (its zeroconf browses), then its nmap tracker scans them: the
    /// resolve vouches for nothing once the source shows itself a scanner within the hold (docs/waking.md §4).
    @Test func aScannerThatResolvedTheHostFirstWakesNothing() {
        var g = G()
        g.gate.noteResolve(by: G.client, of: G.host(1), now: g.now)
        for (index, port) in ([80, 445, 22, 443] as [UInt16]).enumerated() {
            g.now = Lab.t0 + .milliseconds(index * 5)
            var shape = G.nmapSYN
            shape.sequenceNumber = UInt32(index)
            g.send(G.candidate(sourcePort: 51000, port: port, tcp: shape))
        }
        g.wait(.seconds(5))
        #expect(g.woken.isEmpty)
        #expect(g.declined.contains { $0.0.port == G.service && $0.1 == .scanner })
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

    /// A source that woke a host without resolving it wakes it once per hold-off, whatever its timeout: Home
    /// Assistant's TCP sensor, check_tcp and Uptime Kuma poll with the kernel's connect(), which retransmits after
    /// a second exactly as a person's does (docs/waking.md §6). A resolve lifts the budget; so does the hold-off's
    /// end; zero turns it off.
    @Test func aMonitorWakesAHostOnceAnHourWhateverItsTimeout() {
        var g = G()
        var poll = G.kernelSYN
        poll.sequenceNumber = 1
        g.send(G.candidate(sourcePort: 40001, tcp: poll))
        g.wait(.seconds(1))
        #expect(g.woken.map(\.1) == [.noScanSeen])
        // Its own retransmission while the host resumes goes on to the wake it started.
        #expect(g.send(G.candidate(sourcePort: 40001, tcp: poll)) == .wake(.retransmitted))
        // The next polls, a minute apart, each retransmitted after a second: declined, every one.
        for n in 2...6 {
            g.now = g.now + .seconds(60)
            poll.sequenceNumber = UInt32(n)
            let port = UInt16(40000 + n)
            #expect(g.send(G.candidate(sourcePort: port, tcp: poll)) == .decline(.monitorBudget))
            g.wait(.seconds(1))
            #expect(g.send(G.candidate(sourcePort: port, tcp: poll)) == .decline(.monitorBudget))
            g.wait(.seconds(9))
        }
        #expect(g.woken.count == 2 && g.declined.count == 10 && g.declined.allSatisfy { $0.1 == .monitorBudget })
        // At the hold-off's end (N + 1 after the wake) it wakes again, once; one tick before, it does not.
        var edge = G()
        edge.send(G.candidate(sourcePort: 40001))
        edge.wait(.milliseconds(300))
        #expect(edge.woken.map(\.1) == [.noScanSeen])
        let woke = edge.now
        edge.now = woke + WakeRules.defaultMonitorHoldoff - .nanoseconds(1)
        #expect(edge.send(G.candidate(sourcePort: 40002)) == .decline(.monitorBudget))
        edge.now = woke + WakeRules.defaultMonitorHoldoff
        #expect(edge.send(G.candidate(sourcePort: 40003)).rule == .holdingForScan)

        // A first wake by retransmission (a probe-shaped SYN held for one) spends the budget too.
        var shaped = G()
        shaped.send(G.candidate(sourcePort: 40001, tcp: G.nmapSYN))
        shaped.wait(.seconds(1))
        #expect(shaped.send(G.candidate(sourcePort: 40001, tcp: G.nmapSYN)) == .wake(.retransmitted))
        shaped.now = shaped.now + .seconds(60)
        #expect(shaped.send(G.candidate(sourcePort: 40002)) == .decline(.monitorBudget))

        // An app that resolves first wakes at once, budget or not, and lifts it; so does an hourly backup that
        // resolves before it connects.
        var resolved = G()
        resolved.send(G.candidate(sourcePort: 40001))
        resolved.wait(.seconds(1))
        resolved.now = resolved.now + .seconds(60)
        resolved.gate.noteResolve(by: G.client, of: G.host(1), now: resolved.now)
        #expect(resolved.send(G.candidate(sourcePort: 40002)).rule == .resolvedFirst)
        resolved.wait(WakeRules.holdDelay)
        #expect(resolved.woken.last?.1 == .resolvedFirst)
        resolved.now = resolved.now + WakeRules.resolveWindow
        #expect(resolved.send(G.candidate(sourcePort: 40003)).rule == .holdingForScan, "the budget went with it")
        var off = G(WakeGate.Configuration(monitorHoldoff: .zero))
        off.send(G.candidate(sourcePort: 40001))
        off.wait(.seconds(1))
        #expect(off.send(G.candidate(sourcePort: 40002)).rule == .holdingForScan)
    }
}
