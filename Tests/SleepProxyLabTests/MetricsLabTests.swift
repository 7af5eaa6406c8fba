import Foundation
import SleepProxyControl
import SleepProxyCore
import SleepProxyTestSupport
import SleepProxyWire
import Testing

/// The Prometheus endpoint as a dashboard reads it: each exported series moves when its event happens on the
/// lab's wire, and not before. (SSDP's series are checked by the SSDP suite, the other proxies' claims by the
/// two-proxy suite, the wake gate's decline reasons by the wake-noise suite.)
@Suite("Metrics move with their events", .lab(.namespaces, serialized: true))
final class MetricsLabTests: ThreeHostSuite {
    let setup: ThreeHostLab
    var client: LabHost { self.setup.third }
    /// Asks the proxy about the sleeper; the client never does, so its connection is held before it wakes.
    let querier: LabHost

    init() throws {
        let setup = try ThreeHostLab(thirdName: "client")
        self.setup = setup
        self.querier = try setup.lab.addHost(
            "querier", mac: MACAddress("02:53:50:00:00:30")!, ipv4: ["192.0.2.30/24"], ipv6: ["2001:db8::30/64"])
    }

    /// Waits (bounded) until every series in `moved` has grown past its value in `before`; returns those that
    /// did not.
    func waitForGrowth(of moved: [String], since before: [String: Double], timeout: Double = 10) throws -> [String] {
        var stuck = moved
        try waitUntil(timeout: timeout, interval: 0.2) {
            let now = try self.scrape()
            stuck = moved.filter { (now[$0] ?? 0) <= (before[$0] ?? 0) }
            return stuck.isEmpty
        }
        return stuck
    }

    /// Records which of `moved` did not grow.
    func expectGrowth(
        of moved: [String], since before: [String: Double], sourceLocation: SourceLocation = #_sourceLocation
    )
        throws
    {
        let stuck = try self.waitForGrowth(of: moved, since: before)
        let now = try self.scrape()
        #expect(
            stuck.isEmpty, "did not move: \(stuck.map { "\($0) \(now[$0].map { "\($0)" } ?? "absent")" })",
            sourceLocation: sourceLocation)
    }

    func registration(id: UInt16, sequence: UInt8 = 0) -> [UInt8] {
        SampleRegistration.message(
            id: id, mac: ThreeHostLab.sleeperMAC, sequence: sequence, host: "sleeper.local.",
            addresses: [IPAddress("192.0.2.2")!], services: [("Web._http._tcp", 8080)]
        ).encoded(options: .appleUpdate)
    }

    @Test func everySeriesMovesWithItsEvent() throws {
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        defer { daemon.stop() }
        let start = try self.scrape()
        // Exported from the start, at zero, so that a dashboard's rate() sees them before their first event.
        for series in [
            "sleepproxy_registrations_total{outcome=\"accepted\"}", "sleepproxy_magic_packets_total",
            "sleepproxy_hand_backs_total{signal=\"owner-option\"}", "sleepproxy_wakes_total{reason=\"connection\"}",
            "sleepproxy_wakes_declined_total{reason=\"no-service\"}", "sleepproxy_arp_replies_total",
        ] {
            #expect(start[series] == 0, "\(series) not exported at zero: \(start[series].map { "\($0)" } ?? "absent")")
        }

        // A registration accepted; a malformed one; one refused (its source claims none of its addresses).
        var before = try self.scrape()
        _ = try UDPClient.exchange(
            in: self.sleeper.host, to: "192.0.2.1", port: 5599, from: "192.0.2.2",
            payloads: [self.registration(id: 0x7400)])
        _ = try UDPClient.exchange(
            in: self.sleeper.host, to: "192.0.2.1", port: 5599, from: "192.0.2.2", timeout: 0.5,
            payloads: [[0x12, 0x34, 0x28, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]])
        _ = try UDPClient.exchange(
            in: self.client, to: "192.0.2.1", port: 5599, from: "192.0.2.20", timeout: 0.5,
            payloads: [self.registration(id: 0x7401)])
        try self.expectGrowth(
            of: [
                "sleepproxy_registrations_total{outcome=\"accepted\"}",
                "sleepproxy_registrations_total{outcome=\"malformed\"}",
                "sleepproxy_registrations_total{outcome=\"refused\"}",
                "sleepproxy_refusals_total{reason=\"sourceNotClaimed\"}", "sleepproxy_hosts", "sleepproxy_records",
                "sleepproxy_journal_syncs_total",
            ], since: before)
        #expect(
            try self.scrape().keys.contains { $0.hasPrefix("sleepproxy_parse_errors_total{reason=\"registration_") })

        // Asleep: the proxy answers ARP for it and mDNS questions about it.
        try self.sleeper.sleep()
        #expect(
            Daemon.waitForHost("sleeper.local.", in: .asleep, proxy: self.proxy, stateDirectory: self.state) == .asleep)
        before = try self.scrape()
        _ = try self.querier.run(["ip", "neigh", "flush", "dev", "eth0"])
        // Any datagram makes the querier's kernel ask who has the address (the lab has no ping).
        _ = try self.querier.run([
            "/usr/bin/python3", "-c",
            "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('192.0.2.2', 7))",
        ])
        let answers = try Queriers.dig(in: self.querier, server: "192.0.2.1", name: "sleeper.local.", type: "A")
        #expect(answers.contains { $0.data == "192.0.2.2" }, "\(answers)")
        _ = try UDPClient.exchange(
            in: self.querier, to: "192.0.2.1", port: 5353, from: "192.0.2.30", timeout: 0.5, payloads: [[1, 2, 3]])
        try self.expectGrowth(
            of: [
                "sleepproxy_arp_replies_total", "sleepproxy_queries_answered_total",
                "sleepproxy_mdns_packets_sent_total", "sleepproxy_parse_errors_total{reason=\"mdns_malformed\"}",
            ], since: before)
        // The counts by state are at most a second old (`EngineRunner.hostsByStateInterval`), not live.
        let asleep = "sleepproxy_hosts_by_state{state=\"asleep\"}"
        var seen: Double?
        try waitUntil(timeout: 5, interval: 0.2) {
            seen = try self.scrape()[asleep]
            return seen == 1
        }
        #expect(seen == 1, "\(asleep) \(seen.map { "\($0)" } ?? "absent")")

        // A connection to a port with no service wakes nobody; one to its service wakes it (held, then woken).
        before = try self.scrape()
        let nothing = try self.client.spawn(
            ["/usr/bin/python3", "-c", TakeoverLabTests.connectScript, "192.0.2.2", "9999", "3"], logName: "nothing")
        defer { nothing.stop() }
        try self.expectGrowth(
            of: ["sleepproxy_wakes_declined_total{reason=\"no-service\"}", "sleepproxy_ignored_connections_total"],
            since: before)
        before = try self.scrape()
        let connection = try self.client.spawn(
            ["/usr/bin/python3", "-c", TakeoverLabTests.connectScript, "192.0.2.2", "8080", "20"], logName: "connect")
        defer { connection.stop() }
        try self.expectGrowth(
            of: [
                "sleepproxy_wake_holds_total", "sleepproxy_wakes_total{reason=\"connection\"}",
                "sleepproxy_magic_packets_total",
            ], since: before)

        // The host is up and says so with a new Owner sequence: it is handed back.
        try self.sleeper.wake()
        #expect(connection.waitForOutput("connected", timeout: 15), "\(connection.output)")
        before = try self.scrape()
        let announcement = DNSMessage(
            id: 0, flags: .init(response: true, authoritative: true),
            answers: [
                DNSResourceRecord(
                    name: "sleeper.local.", cacheFlush: true, ttl: 120,
                    rdata: .a(.init(address: IPv4Address(192, 0, 2, 2))))
            ],
            additionals: [
                .opt(
                    EDNSHeader(udpPayloadSize: 1440),
                    options: [.owner(OwnerOption(sequence: 1, primaryMAC: ThreeHostLab.sleeperMAC))])
            ])
        _ = try RawMDNS.exchange(
            in: self.sleeper.host, packets: [announcement], to: .v4(.mdnsGroup), sourcePort: 5353,
            listen: .milliseconds(200))
        // Counted by what it carried: its Owner option, though it came from its own address too.
        try self.expectGrowth(of: ["sleepproxy_hand_backs_total{signal=\"owner-option\"}"], since: before)
        #expect(try self.scrape()["sleepproxy_hand_backs_total{signal=\"mdns\"}"] == 0)
        #expect(try self.scrape()["sleepproxy_hosts"] == 0)
        // No reply waited on the hand-back: its journal entry was written, not synced (docs/state.md).
        #expect(try self.scrape()["sleepproxy_journal_syncs_total"] == before["sleepproxy_journal_syncs_total"])
    }
}
