import Foundation
import SleepProxyControl
import SleepProxyCore
import SleepProxyTestSupport
import SleepProxyWire
import Testing

/// sleepproxyctl against a running sleepproxyd in the lab: hosts listed after a registration, the
/// JSON parsed and checked, `wake` produces a magic packet at the sleeper, `events` shows it with its reason,
/// `forget` stops the answers.
@Suite("Admin CLI in the lab", .lab(.namespaces, serialized: true))
final class AdminLabTests: ThreeHostSuite {
    let setup: ThreeHostLab
    var client: LabHost { self.setup.third }

    static let sleeperMAC = ThreeHostLab.sleeperMAC

    init() throws {
        self.setup = try ThreeHostLab(thirdName: "client")
    }

    static var ctl: String {
        Daemon.executable.deletingLastPathComponent().appendingPathComponent("sleepproxyctl").path
    }

    func ctl(_ arguments: [String]) throws -> CommandResult {
        try self.proxy.run(
            [Self.ctl] + arguments + ["--socket", self.state.appendingPathComponent("control.sock").path])
    }

    /// Runs a command with --json and decodes its (first) response line.
    func json(_ command: [String]) throws -> ControlResponse {
        let result = try self.proxy.run(
            [Self.ctl] + command + ["--socket", self.state.appendingPathComponent("control.sock").path, "--json"])
        #expect(result.succeeded, "\(command): \(result)")
        let line = result.stdout.split(separator: "\n").first.map { Array($0.utf8) } ?? []
        return try ControlProtocol.decode(ControlResponse.self, from: line)
    }

    @Test func listShowWakeEventsAndForgetAHost() throws {
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        defer { daemon.stop() }
        let message = SampleRegistration.message(
            id: 0x6100, mac: Self.sleeperMAC, host: "sleeper.local.", addresses: [IPAddress("192.0.2.2")!],
            services: [("Files._smb._tcp", 445), ("Web._http._tcp", 8080)])
        let replies = try UDPClient.exchange(
            in: self.sleeper.host, to: "192.0.2.1", port: 5599, from: "192.0.2.2",
            payloads: [message.encoded(options: .appleUpdate)])
        #expect(replies.first??.prefix(2) == [0x61, 0x00])
        try self.sleeper.sleep()
        #expect(
            Daemon.waitForHost("sleeper.local.", in: .asleep, proxy: self.proxy, stateDirectory: self.state) == .asleep)

        let hosts = try #require(try self.json(["hosts"]).hosts)
        let listed = try #require(hosts.first)
        #expect(
            hosts.count == 1 && listed.name == "sleeper.local." && listed.mac == Self.sleeperMAC.description
                && listed.addresses == ["192.0.2.2"])
        #expect(
            listed.services.sorted() == ["_http._tcp:8080", "_smb._tcp:445"] && listed.state == .asleep
                && listed.leaseSeconds > 7000)
        let table = try self.ctl(["hosts"])
        #expect(
            table.succeeded && table.stdout.contains("sleeper.local.") && table.stdout.contains("asleep"), "\(table)")

        let detail = try #require(try self.json(["host", "sleeper"]).host)
        #expect(
            detail.records.contains { $0.type == "SRV" && $0.data.contains("445") } && detail.sequence == 0
                && !detail.hasPassword)
        #expect(try self.json(["host", Self.sleeperMAC.description]).host?.summary.mac == Self.sleeperMAC.description)

        // wake: a magic packet at the sleeper, and the event with its reason, also to a follower. Whether the
        // follower connects before or after the wake, it prints it (answered from the log, or streamed); the
        // release-all below is streamed for certain, since the follower has printed by then.
        let follower = try self.proxy.spawn(
            [Self.ctl, "events", "--follow", "--socket", self.state.appendingPathComponent("control.sock").path],
            logName: "follow")
        defer { follower.stop() }
        let woken = try self.ctl(["wake", "sleeper.local"])
        #expect(woken.succeeded && woken.stdout.contains("waking"), "\(woken)")
        #expect(!self.sleeper.waitForMagicPackets(1, timeout: 3).isEmpty)
        let events = try #require(try self.json(["events", "--host", "sleeper"]).events)
        #expect(events.contains { $0.kind == .wake && $0.trigger.type == .administrator })
        #expect(follower.waitForOutput("woken: administrator", timeout: 3), "events --follow: \(follower.output)")
        let human = try self.ctl(["events", "--since", "10m"])
        #expect(human.stdout.contains("woken: administrator"), "\(human)")
        // Times in the machine's zone, ISO 8601 (a POSIX TZ string: no tzdata needed): the same instant as the JSON's.
        let zoned = try self.proxy.run(
            [
                "/usr/bin/env", "TZ=IST-5:30", Self.ctl, "events", "--since", "10m", "--socket",
                self.state.appendingPathComponent("control.sock").path,
            ])
        let wake = try #require(events.first { $0.kind == .wake })
        let formatter = ISO8601DateFormatter()
        formatter.timeZone = TimeZone(secondsFromGMT: 19_800)
        let expected = formatter.string(from: wake.time)
        #expect(
            zoned.stdout.split(separator: "\n").contains {
                $0.hasPrefix("\(expected)  ") && $0.contains("woken: administrator")
            },
            "expected a line starting \(expected): \(zoned)")

        // Metrics: the wake and the host, in Prometheus text format on the local endpoint.
        let scrape = try self.proxy.run([
            "/usr/bin/python3", "-c",
            "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9580/metrics', timeout=5).read().decode())",
        ])
        #expect(scrape.succeeded, "\(scrape)")
        #expect(scrape.stdout.contains("sleepproxy_wakes_total{reason=\"administrator\"} 1"), "\(scrape.stdout)")
        #expect(
            scrape.stdout.contains("sleepproxy_hosts 1")
                && scrape.stdout.contains("sleepproxy_registrations_total{outcome=\"accepted\"} 1"))
        #expect(scrape.stdout.contains("sleepproxy_magic_packets_total"))
        // Every answer of this quiet lab went out directly from the engine thread.
        #expect(scrape.stdout.contains("sleepproxy_unicast_sends_deferred_total 0"), "\(scrape.stdout)")
        #expect(scrape.stdout.contains("sleepproxy_unicast_sends_failed_total 0"))
        #expect(scrape.stdout.contains("sleepproxy_multicast_sockets_reopened_total 0"))
        // Hosts by state: the one host is counted once, in whichever state the last count (at most a second old) saw.
        let byState = scrape.stdout.split(separator: "\n").filter { $0.hasPrefix("sleepproxy_hosts_by_state{") }
        #expect(
            byState.count == HostState.held.count
                && byState.compactMap { $0.split(separator: " ").last.flatMap { Double($0) } }.reduce(0, +) == 1,
            "\(byState)")

        // forget: no answers for its records any more.
        let forgot = try self.ctl(["forget", "sleeper"])
        #expect(forgot.succeeded, "\(forgot)")
        let query = DNSMessage(id: 3, questions: [DNSQuestion(name: "sleeper.local.", type: .a)])
        #expect(
            try RawMDNS.exchange(in: self.client, packets: [query], to: .v4(.mdnsGroup), listen: .seconds(1)).isEmpty)
        #expect(try self.json(["status"]).status?.hosts == 0)

        // Errors: one sentence, non-zero exit, nothing changed.
        let missing = try self.ctl(["host", "nosuch"])
        #expect(missing.status != 0 && missing.stderr.contains("no sleeping host named \"nosuch\""), "\(missing)")
        let badSince = try self.ctl(["events", "--since", "soon"])
        #expect(badSince.status != 0 && badSince.stderr.contains("--since takes a duration"))
        // Decommissioning: asks for confirmation; then wakes and releases every host.
        #expect(try self.ctl(["release-all"]).stderr.contains("add --yes"))
        let again = SampleRegistration.message(
            id: 0x6101, mac: Self.sleeperMAC, sequence: 1, host: "sleeper.local.", addresses: [IPAddress("192.0.2.2")!],
            services: [("Web._http._tcp", 8080)])
        try self.sleeper.wake()
        _ = try UDPClient.exchange(
            in: self.sleeper.host, to: "192.0.2.1", port: 5599, from: "192.0.2.2",
            payloads: [again.encoded(options: .appleUpdate)])
        try self.sleeper.sleep()
        let before = self.sleeper.magicPackets.count
        let released = try self.ctl(["release-all", "--yes"])
        #expect(released.succeeded && released.stdout.contains("released 1 host: sleeper.local."), "\(released)")
        #expect(
            self.sleeper.waitForMagicPackets(before + 1, timeout: 3).count > before, "release-all did not wake the host"
        )
        #expect(
            waitUntil(timeout: 5) { follower.output.components(separatedBy: "woken: administrator").count > 2 },
            "the release-all wake was not streamed to the follower: \(follower.output)")
        #expect(try self.json(["hosts"]).hosts?.isEmpty == true)
        let noDaemon = try self.proxy.run([
            Self.ctl, "status", "--socket", self.lab.directory.appendingPathComponent("nothing.sock").path,
        ])
        #expect(noDaemon.status != 0 && noDaemon.stderr.contains("sleepproxyd is not running"), "\(noDaemon)")
    }

    @Test func aConfigurationFileIsReadAndReloadedOnSIGHUPAndABadEditChangesNothing() throws {
        let config = self.lab.directory.appendingPathComponent("sleepproxyd.conf")
        try "# lab\nlog-level = info\nwake-rule = tcp/445\n".write(to: config, atomically: true, encoding: .utf8)
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state, extra: ["--config", config.path])
        defer { daemon.stop() }
        // A bad edit: the reload is refused with the line, and the daemon keeps running on what it had.
        try "log-level = info\nwake-rule = tcp/445\nlease-maximum = forever\n".write(
            to: config, atomically: true, encoding: .utf8)
        _ = try self.proxy.run(["kill", "-HUP", "\(daemon.pid)"])
        // The outcome is read from `status` (which also shows the daemon still answering), not from the log.
        var reload: DaemonStatus.Reload?
        #expect(
            try waitUntil(timeout: 5) {
                reload = try self.json(["status"]).status?.lastReload
                return reload != nil
            }, "no reload in the status: \(daemon.output)")
        #expect(
            reload?.succeeded == false && reload?.message.contains("line 3") == true, "\(String(describing: reload))")
        #expect(try self.ctl(["status"]).stdout.contains("refused, the running configuration kept"))
        // A good edit is applied.
        try "log-level = debug\nwake-rule = -tcp/445\n".write(to: config, atomically: true, encoding: .utf8)
        _ = try self.proxy.run(["kill", "-HUP", "\(daemon.pid)"])
        #expect(
            try waitUntil(timeout: 5) { try self.json(["status"]).status?.lastReload?.succeeded == true },
            "the good edit was not taken: \(daemon.output)")
        // A bad file at start: one sentence with the line, non-zero exit.
        let broken = self.lab.directory.appendingPathComponent("broken.conf")
        try "interface = eth0\nspeed = fast\n".write(to: broken, atomically: true, encoding: .utf8)
        let refused = try self.proxy.run([
            Daemon.executable.path, "--config", broken.path, "--state-directory", self.state.path + "-x",
        ])
        #expect(refused.status != 0 && refused.stderr.contains("line 2: unknown setting \"speed\""), "\(refused)")
    }
}
