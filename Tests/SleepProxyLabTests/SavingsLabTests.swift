import Foundation
import SleepProxyControl
import SleepProxyCore
import SleepProxyTestSupport
import SleepProxyWire
import Testing

/// What the proxy saves, as a person reads it (docs/savings.md): two hosts sleep and wake on a schedule the test
/// keeps with its own clock; `sleepproxyctl savings` and the Prometheus counters give their hours and energy within
/// a second's worth, with each host's figure or the default; the ledger survives a restart, and the time the daemon
/// was stopped counts for nobody.
@Suite("What the proxy saves", .lab(.namespaces))
final class SavingsLabTests: ThreeHostSuite {
    let setup: ThreeHostLab
    var client: LabHost { self.setup.third }
    /// A second sleeper with no figure of its own (the default prices it).
    let den: SleepingHost
    static let denMAC = MACAddress("02:53:50:00:00:03")!

    init() throws {
        let setup = try ThreeHostLab(thirdName: "client")
        self.setup = setup
        self.den = try SleepingHost(
            lab: setup.lab, name: "den", mac: Self.denMAC, ipv4: ["192.0.2.3/24"], ipv6: ["2001:db8::3/64"],
            servicePort: 8080)
    }

    func register(_ host: SleepingHost, mac: MACAddress, name: DNSName, address: String, id: UInt16) throws {
        let message = SampleRegistration.message(
            id: id, mac: mac, host: name, addresses: [IPAddress(address)!], services: [("Web._http._tcp", 8080)])
        let replies = try UDPClient.exchange(
            in: host.host, to: "192.0.2.1", port: 5599, from: address,
            payloads: [message.encoded(options: .appleUpdate)])
        #expect(replies.first??.prefix(2) == [UInt8(id >> 8), UInt8(id & 0xFF)], "\(name) not accepted")
    }

    func savings(month: String? = nil) throws -> SavingsReport {
        let socket = self.state.appendingPathComponent("control.sock").path
        let result = try self.proxy.run(
            [Daemon.sibling("sleepproxyctl"), "savings", "--socket", socket, "--json"]
                + (month.map { ["--month", $0] } ?? []))
        let line = try #require(result.stdout.split(separator: "\n").first, "\(result.stderr)")
        return try #require(try ControlProtocol.decode(ControlResponse.self, from: Array(line.utf8)).savings)
    }

    /// The time the test first saw `name` in `state` (bounded; polled every 50 ms).
    func seen(_ name: String, in states: Set<PresenceState>) -> Date? {
        var at: Date? = nil
        waitUntil(timeout: 20, interval: 0.05) {
            guard let state = Daemon.hosts(proxy: self.proxy, stateDirectory: self.state)[name]?.state,
                states.contains(state)
            else { return false }
            at = Date()
            return true
        }
        return at
    }

    /// A host sleeps this long in the schedule (a scenario, not a wait for readiness).
    static let napMicroseconds: useconds_t = 4_000_000

    @Test func twoHostsOnAScheduleGiveTheirHoursAndEnergy() throws {
        var daemon = try Daemon.start(
            in: self.proxy, stateDirectory: self.state,
            extra: ["--host-power", "\(ThreeHostLab.sleeperMAC)@45/2", "--proxy-power", "3"])
        defer { daemon.stop() }
        try self.register(
            self.sleeper, mac: ThreeHostLab.sleeperMAC, name: "sleeper.local.", address: "192.0.2.2", id: 0x5A00)
        try self.register(self.den, mac: Self.denMAC, name: "den.local.", address: "192.0.2.3", id: 0x5A01)
        // Registered, not asleep yet: nothing saved.
        try self.sleeper.sleep()
        let sleeperAsleep = try #require(self.seen("sleeper.local.", in: [.asleep]))
        try self.den.sleep()
        let denAsleep = try #require(self.seen("den.local.", in: [.asleep]))

        // The sleeper naps, then someone connects: it is woken (counted asleep until it is back), and comes back.
        usleep(Self.napMicroseconds)
        let connection = try self.client.spawn(
            ["/usr/bin/python3", "-c", TakeoverLabTests.connectScript, "192.0.2.2", "8080", "20"], logName: "connect")
        defer { connection.stop() }
        #expect(!self.sleeper.waitForMagicPackets(1, timeout: 10).isEmpty, "no wake: \(daemon.output)")
        let wakeCalled = Date()
        try self.sleeper.wake()
        let sleeperBack = try #require(self.seen("sleeper.local.", in: [.handedBack, .awake]))
        #expect(connection.waitForOutput("connected", timeout: 10), "\(connection.output)")

        usleep(Self.napMicroseconds / 2)
        let asked = Date()
        let report = try self.savings()
        let sleeper = try #require(report.hosts.first { $0.mac == ThreeHostLab.sleeperMAC.description })
        let den = try #require(report.hosts.first { $0.mac == Self.denMAC.description })
        // Asleep from when the proxy took it over until it showed itself back: between what the test saw.
        let sleeperSlept = sleeper.figures.asleepSeconds
        #expect(sleeperSlept >= wakeCalled.timeIntervalSince(sleeperAsleep) - 1, "\(sleeperSlept)")
        #expect(sleeperSlept <= sleeperBack.timeIntervalSince(sleeperAsleep) + 1, "\(sleeperSlept)")
        #expect(abs(den.figures.asleepSeconds - asked.timeIntervalSince(denAsleep)) <= 1, "\(den.figures)")
        // Energy by each host's figure: the sleeper's own 45/2, the den the default 50/4.
        #expect(sleeper.power == "45/2" && !sleeper.powerIsDefault && den.power == "50/4" && den.powerIsDefault)
        #expect(abs(sleeper.figures.savedWattHours - sleeperSlept * 43 / 3600) < 1e-6)
        #expect(abs(den.figures.savedWattHours - den.figures.asleepSeconds * 46 / 3600) < 1e-6)
        #expect(sleeper.figures.wakes == 1 && den.figures.wakes == 0)
        #expect(abs(report.total.savedWattHours - sleeper.figures.savedWattHours - den.figures.savedWattHours) < 1e-6)
        // The proxy's own 3 W over the time it ran, taken off the net.
        let used = try #require(report.proxy.usedWattHours)
        #expect(abs(report.netWattHours - (report.total.savedWattHours - used)) < 1e-6)
        #expect(report.days.count == SavingsReport.chartDays && report.days.last?.savedWattHours ?? 0 > 0)

        // The counters agree with the answer (running totals since the start).
        let metrics = try self.proxy.run([
            "/usr/bin/python3", "-c",
            "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9580/metrics', timeout=5).read().decode())",
        ]).stdout
        let series = "sleepproxy_host_asleep_seconds_total{host=\"\(Self.denMAC)\"} "
        let counted = try #require(
            metrics.split(separator: "\n").first { $0.hasPrefix(series) }.flatMap {
                Double($0.dropFirst(series.count))
            },
            "\(metrics)")
        #expect(abs(counted - den.figures.asleepSeconds) <= 1)
        #expect(metrics.contains("sleepproxy_energy_saved_wh_total{host=\"\(ThreeHostLab.sleeperMAC)\"}"))

        // The overview in Chromium: the month's section with both hosts and thirty bars, the days with a saving
        // drawn, and nothing in the console (the page has no script of its own here).
        try #require(
            FileManager.default.isExecutableFile(atPath: StatusPageLabTests.chromium),
            "Debian's chromium is needed (scripts/test installs it)")
        let page = try self.browse("/", screenshot: "savings.png", window: "1280,1400")
        #expect(page.console.isEmpty, "console: \(page.console)")
        let section = page.dom.components(separatedBy: "<section class=\"savings\">").dropFirst().first ?? ""
        #expect(section.contains(">sleeper<") && section.contains(">den<"), "\(section.prefix(3000))")
        #expect(section.components(separatedBy: "<rect class=\"bar\"").count - 1 == SavingsReport.chartDays)
        let today = try #require(report.days.last?.date)
        #expect(section.contains("<title>\(today): "), "today's bar has its figures")

        // A restart: what was counted is kept, and the time stopped counts for nobody.
        daemon.stop()
        let stopped = Date()
        #expect(FileManager.default.fileExists(atPath: self.state.appendingPathComponent("savings.txt").path))
        usleep(Self.napMicroseconds / 2)
        daemon = try Daemon.start(
            in: self.proxy, stateDirectory: self.state,
            extra: ["--host-power", "\(ThreeHostLab.sleeperMAC)@45/2", "--proxy-power", "3"])
        let restarted = Date()
        let again = try self.savings()
        let denAgain = try #require(again.hosts.first { $0.mac == Self.denMAC.description })
        let sleeperAgain = try #require(again.hosts.first { $0.mac == ThreeHostLab.sleeperMAC.description })
        #expect(abs(sleeperAgain.figures.asleepSeconds - sleeperSlept) < 0.01, "the sleeper stayed awake")
        #expect(denAgain.figures.asleepSeconds >= den.figures.asleepSeconds, "nothing counted was lost")
        #expect(
            denAgain.figures.asleepSeconds
                <= den.figures.asleepSeconds + stopped.timeIntervalSince(asked) + Date().timeIntervalSince(restarted)
                + 1,
            "the time stopped is not counted: \(denAgain.figures.asleepSeconds)")
        #expect(sleeperAgain.figures.wakes == 1)
        #expect(try self.savings(month: "2001-01").hosts.isEmpty)
    }

    /// Today's local day number, as the daemon files days (the box's time zone).
    static var today: Int {
        let local = Date().timeIntervalSince1970 + Double(TimeZone.current.secondsFromGMT())
        return Int((local / 86_400).rounded(.down))
    }

    /// A month a home kept (its ledger as the daemon writes it): the report reads it back at start and prices it
    /// by the figures of the configuration; the page shows the month and the chart. The picture is the README's.
    @Test func aMonthKeptIsReadBackPricedAndDrawn() throws {
        let today = Self.today
        // The Mac mini sleeps 16 h a day, the NAS 10 h, the desktop 20 h with two declined wakes a day; the proxy
        // ran all day. Days of this month and the last 30 days, so the chart is full.
        var text = SavingsLedger.header + "\n"
        text += "proxy\n" + (0..<40).map { "\(today - 39 + $0) 0 86400000 0 0\n" }.joined()
        let hosts: [(mac: String, name: String, asleepHours: Int, declined: Int)] = [
            ("02:53:50:00:00:02", "mac-mini.local.", 16, 0), ("02:53:50:00:00:05", "nas.local.", 10, 1),
            ("02:53:50:00:00:06", "desktop.local.", 20, 2),
        ]
        for host in hosts {
            text += "host \(host.mac) \(host.name)\n"
            for offset in 0..<40 {
                // A weekend day every seventh sleeps less: the bars are not all one height.
                let hours = offset % 7 == 5 ? host.asleepHours / 2 : host.asleepHours
                text += "\(today - 39 + offset) \(hours * 3_600_000) \((24 - hours) * 3_600_000) 1 \(host.declined)\n"
            }
        }
        try FileManager.default.createDirectory(at: self.state, withIntermediateDirectories: true)
        try text.write(to: self.state.appendingPathComponent("savings.txt"), atomically: true, encoding: .utf8)
        let config = self.lab.directory.appendingPathComponent("sleepproxyd.conf")
        let figures = "host-power = 02:53:50:00:00:02@7/1\nhost-power = 02:53:50:00:00:05@30/5\n"
        try (figures + "host-power-default = 60/2\nproxy-power = 3\n").write(
            to: config, atomically: true, encoding: .utf8)
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state, extra: ["--config", config.path])
        defer { daemon.stop() }
        let report = try self.savings()
        let first = CivilDate(dayNumber: today).monthDays.lowerBound
        let days = today - first + 1
        let weekendDays = (0..<40).filter { today - 39 + $0 >= first && $0 % 7 == 5 }.count
        for host in hosts {
            let shown = try #require(report.hosts.first { $0.mac == host.mac }, "\(host.name)")
            let hours = Double(days * host.asleepHours - weekendDays * (host.asleepHours - host.asleepHours / 2))
            #expect(abs(shown.figures.asleepSeconds - hours * 3600) < 61, "\(host.name): \(shown.figures)")
            let (awake, asleep): (Double, Double) =
                host.mac.hasSuffix("02") ? (7, 1) : host.mac.hasSuffix("05") ? (30, 5) : (60, 2)
            #expect(abs(shown.figures.savedWattHours - shown.figures.asleepSeconds / 3600 * (awake - asleep)) < 1e-6)
            #expect(shown.figures.declinedWakes >= days * host.declined)
        }
        #expect(report.days.count == SavingsReport.chartDays && report.days.allSatisfy { $0.savedWattHours > 0 })
        let used = try #require(report.proxy.usedWattHours)
        #expect(abs(used - report.proxy.runningSeconds / 3600 * 3) < 1e-6)
        // As a person reads it: a line per host, the most saved first, then all hosts and the proxy's own use.
        let socket = self.state.appendingPathComponent("control.sock").path
        let table = try self.proxy.run([Daemon.sibling("sleepproxyctl"), "savings", "--socket", socket]).stdout
        print(table)
        let lines = table.split(separator: "\n").map(String.init)
        #expect(lines.count == 7 && lines[2].hasPrefix("  desktop") && lines[4].hasPrefix("  mac-mini"), "\(table)")
        #expect(lines[2].hasSuffix("60/2 (default)") && lines[5].hasPrefix("  all hosts"), "\(table)")
        #expect(lines[6].contains("at 3 W") && lines[6].contains("net saving"), "\(table)")
        let refused = try self.proxy.run([
            Daemon.sibling("sleepproxyctl"), "savings", "--month", "2026-13", "--socket", socket,
        ])
        #expect(!refused.succeeded && refused.stderr.contains("YYYY-MM"), "\(refused)")
        try #require(
            FileManager.default.isExecutableFile(atPath: StatusPageLabTests.chromium),
            "Debian's chromium is needed (scripts/test installs it)")
        let page = try self.browse("/", screenshot: "savings-month.png", window: "1100,900")
        #expect(page.console.isEmpty, "console: \(page.console)")
        #expect(page.dom.contains(">desktop<") && page.dom.contains("60/2 W (default)"))

        // A reload: a bad figure is refused with its line and every figure stays; a good edit reprices the month.
        func reload(_ text: String) throws -> DaemonStatus.Reload? {
            try text.write(to: config, atomically: true, encoding: .utf8)
            let before = Daemon.status(proxy: self.proxy, stateDirectory: self.state)?.lastReload
            _ = try self.proxy.run(["kill", "-HUP", "\(daemon.pid)"])
            var reload: DaemonStatus.Reload?
            waitUntil(timeout: 10) {
                reload = Daemon.status(proxy: self.proxy, stateDirectory: self.state)?.lastReload
                // Told apart from the last by its outcome too: the JSON's times are whole seconds.
                return reload != nil && reload != before
            }
            return reload
        }
        let badEdit = try reload(figures + "host-power-default = 40\nproxy-power = 3 W\n")
        #expect(
            badEdit?.succeeded == false && badEdit?.message.contains("line 4") == true, "\(String(describing: badEdit))"
        )
        let kept = try self.savings()
        #expect(kept.hosts == report.hosts && kept.defaultPower == "60/2" && kept.proxy.watts == 3, "nothing changed")
        let taken = try reload(figures + "host-power-default = 40/2\n")
        #expect(taken?.succeeded == true, "\(String(describing: taken))")
        let repriced = try self.savings()
        let desktop = try #require(repriced.hosts.first { $0.mac == "02:53:50:00:00:06" })
        #expect(
            desktop.power == "40/2"
                && abs(desktop.figures.savedWattHours - desktop.figures.asleepSeconds / 3600 * 38) < 1e-6)
        #expect(repriced.proxy.usedWattHours == nil, "proxy-power taken out")
    }

    /// A bad power figure is refused with its line, and the running configuration stays (docs/savings.md).
    @Test func badPowerLinesAreRefusedWithTheirLine() throws {
        let file = self.lab.directory.appendingPathComponent("sleep-proxy.conf")
        for (line, reason) in [
            ("host-power = 02:53:50:00:00:02@45/90", "asleep is above"),
            ("host-power = 02:53:50:00:00:02@lots", "not a power figure"),
            ("host-power = sleeper@45", "MAC"),
            ("host-power-default = 9000", "from 0 to"),
            ("proxy-power = -3", "not a power figure"),
        ] {
            try "interface = eth0\n\(line)\n".write(to: file, atomically: true, encoding: .utf8)
            let result = try Command.run(
                [Daemon.executable.path, "--check-config", "--config", file.path], timeout: .seconds(30))
            #expect(!result.succeeded, "\(line)")
            #expect(result.stderr.contains("line 2") && result.stderr.contains(reason), "\(line): \(result.stderr)")
        }
        try "host-power = 02:53:50:00:00:02@45/2\nhost-power-default = 30\nproxy-power = 3.5\n".write(
            to: file, atomically: true, encoding: .utf8)
        let good = try Command.run(
            [Daemon.executable.path, "--check-config", "--config", file.path], timeout: .seconds(30))
        #expect(good.succeeded, "\(good.stderr)")
    }
}
