import Foundation
import SleepProxyControl
import SleepProxyCore
import SleepProxyTestSupport
import SleepProxyWire
import Testing

/// The status page as a person sees it (docs/status-page.md): a daemon in the lab holds a host whose names and
/// TXT carry markup and script; Debian's Chromium, inside the proxy's namespace, loads the overview and the host
/// page, and the test reads Chromium's own view (its DOM after scripts ran, its console, a screenshot): the
/// host is in the table with its state, nothing from the wire became markup, and after a client connects the
/// wake and its reason are on the timeline. The JSON API is read as a dashboard would.
@Suite("Status page in a real browser", .lab(.namespaces, serialized: true))
final class StatusPageLabTests: ThreeHostSuite {
    let setup: ThreeHostLab
    var client: LabHost { self.setup.third }

    /// The host's names and TXT as a hostile registrant would send them.
    static let hostLabel = "<script>alert(1)</script>"
    static let instanceLabel = "<img src=x onerror=alert(2)> & \"Web\""
    static let txt = "path=<script>alert(3)</script>"

    /// Screenshots land here, beside the build's test output, for a person to look at.
    static let screenshots = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent(".build/status-page")

    init() throws {
        self.setup = try ThreeHostLab(thirdName: "client")
    }

    func register() throws {
        let registration = SleepRegistration(
            hostName: try DNSName(labels: [Self.hostLabel, "local"]),
            addresses: [IPAddress("192.0.2.2")!, IPAddress("2001:db8::2")!],
            services: [
                SleepRegistration.Service(
                    instance: try DNSName(labels: [Self.instanceLabel, "_http", "_tcp", "local"]), port: 8080,
                    txt: try TXTRecord(strings: [Array(Self.txt.utf8)]))
            ],
            owner: OwnerOption(sequence: 0, primaryMAC: ThreeHostLab.sleeperMAC), lease: 7200)
        let message = registration.messages(id: 0x7300, maximumSize: .max)[0]
        let replies = try UDPClient.exchange(
            in: self.sleeper.host, to: "192.0.2.1", port: 5599, from: "192.0.2.2",
            payloads: [message.encoded(options: .appleUpdate)])
        #expect(replies.first??.prefix(2) == [0x73, 0x00], "registration not accepted")
    }

    /// What the daemon's HTTP server answers at `path`, fetched inside the proxy's namespace.
    func fetch(_ path: String) throws -> (status: Int, body: String) {
        let result = try self.proxy.run([
            "/usr/bin/python3", "-c",
            """
            import sys, urllib.request, urllib.error
            try:
                r = urllib.request.urlopen('http://127.0.0.1:9580' + sys.argv[1], timeout=5)
                print(r.status); sys.stdout.write(r.read().decode())
            except urllib.error.HTTPError as e:
                print(e.code); sys.stdout.write(e.read().decode())
            """, path,
        ])
        let lines = result.stdout.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
        return (Int(lines.first ?? "") ?? 0, lines.count > 1 ? String(lines[1]) : "")
    }

    static let chromium =
        ["/usr/bin/chromium", "/usr/bin/chromium-browser"].first {
            FileManager.default.isExecutableFile(atPath: $0)
        } ?? "/usr/bin/chromium"

    @Test func aPersonSeesTheHostItsStateAndWhatWokeIt() throws {
        try #require(
            FileManager.default.isExecutableFile(atPath: Self.chromium),
            "Debian's chromium is needed (scripts/test installs it)")
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        defer { daemon.stop() }
        try self.register()
        try self.sleeper.sleep()
        let mac = ThreeHostLab.sleeperMAC.description
        #expect(
            Daemon.waitForHosts(proxy: self.proxy, stateDirectory: self.state) { $0.values.first?.state == .asleep },
            "the host never went asleep: \(daemon.output)")

        // The filters the table uses, through sleepproxyctl: by state and by text.
        let socket = self.state.appendingPathComponent("control.sock").path
        for (arguments, expected) in [
            (["--state", "asleep"], 1), (["--state", "awake"], 0), (["--search", "192.0.2.2"], 1),
            (["--search", "192.0.2.9"], 0),
        ] {
            let listed = try self.proxy.run(
                [Daemon.sibling("sleepproxyctl"), "hosts", "--json", "--socket", socket] + arguments)
            let response = try? ControlProtocol.decode(ControlResponse.self, from: Array(listed.stdout.utf8.dropLast()))
            #expect(response?.hosts?.count == expected && response?.total == expected, "\(arguments): \(listed)")
        }

        // The raw page: every string from the wire is text, never markup.
        let raw = try self.fetch("/")
        #expect(raw.status == 200)
        for hostile in [Self.hostLabel, "<img src=x", "<script>alert(3)"] {
            #expect(!raw.body.contains(hostile), "\(hostile) reached the page as markup")
        }
        #expect(raw.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;.local"), "the host's name is shown as text")

        // Chromium's view of the overview: the host's row, asleep, and no console message at all (a script the
        // CSP refused, a missing file and an error in our script would each write one).
        let overview = try self.browse("/", screenshot: "overview.png")
        #expect(overview.console.isEmpty, "console: \(overview.console)")
        let row = overview.dom.components(separatedBy: "<tr>").first {
            $0.contains("/host/\(mac.replacingOccurrences(of: ":", with: "%3A"))")
        }
        #expect(row?.contains("badge asleep") == true, "no asleep row for the host in: \(overview.dom.prefix(4000))")
        #expect(
            row?.contains("&lt;script&gt;alert(1)&lt;/script&gt;") == true, "the name is text in the DOM: \(row ?? "")")
        #expect(!overview.dom.contains("<img src=\"x\""), "an img element was made from the instance name")
        // On a phone's screen: the same page, with nothing but the essentials in the table.
        let phone = try self.browse("/", screenshot: "overview-phone.png", window: "390,844")
        #expect(phone.console.isEmpty, "console: \(phone.console)")

        // A client connects: the proxy wakes the host (the SYN is retransmitted after the gate's hold).
        let connection = try self.client.spawn(
            ["/usr/bin/python3", "-c", TakeoverLabTests.connectScript, "192.0.2.2", "8080", "20"],
            logName: "connect-client")
        defer { connection.stop() }
        #expect(!self.sleeper.waitForMagicPackets(1, timeout: 10).isEmpty, "no wake: \(daemon.output)")
        try self.sleeper.wake()
        #expect(connection.waitForOutput("connected", timeout: 15), "\(connection.output)")

        // The host's page in Chromium: the host page has the wake on the timeline, with its reason and source,
        // and the TXT string as text.
        let encodedMAC = mac.replacingOccurrences(of: ":", with: "%3A")
        let page = try self.browse("/host/\(encodedMAC)", screenshot: "host.png")
        #expect(page.console.isEmpty, "console: \(page.console)")
        let wakeMarker = page.dom.components(separatedBy: "<circle class=\"wake\"").dropFirst().first
        #expect(
            wakeMarker?.contains("wake: connection from 192.0.2.20 to tcp port 8080") == true,
            "\(page.dom.suffix(6000))")
        #expect(page.dom.contains("class=\"band asleep\""), "the asleep band is drawn")
        #expect(!page.dom.contains("<script>alert"), "script from the wire in the host page")

        // The API a dashboard reads: the same types as sleepproxyctl --json, with the wake in the host's history.
        let api = try self.fetch("/api/v1/hosts/\(encodedMAC)")
        let history =
            try ControlProtocol.decode(ControlResponse.self, from: Array(api.body.utf8)).host?.history
            ?? ControlProtocol.decode(
                ControlResponse.self, from: Array(try self.fetch("/api/v1/history/\(encodedMAC)").body.utf8)
            ).history
        #expect(
            history?.decisions.contains { $0.kind == .wake && $0.trigger.client == "192.0.2.20" } == true, "\(api.body)"
        )
        #expect(history?.records.contains { $0.state == .asleep } == true)
        let status = try ControlProtocol.decode(
            ControlResponse.self, from: Array(try self.fetch("/api/v1/status").body.utf8))
        #expect((status.status?.lastDay?.wakes ?? 0) >= 1)
        #expect(try self.fetch("/api/v1/hosts?offset=-1").status == 400)
        // The machines on the link, in Chromium: the client that asked for the sleeper's address is listed.
        let machines = try self.browse("/neighbours", screenshot: "neighbours.png")
        #expect(machines.console.isEmpty, "console: \(machines.console)")
        #expect(
            machines.dom.contains("192.0.2.20") && machines.dom.contains("machines on the link"),
            "\(machines.dom.suffix(3000))")
        // Once the proxy no longer holds it, the overview still leads to its day.
        let forgot = try self.proxy.run([
            Daemon.sibling("sleepproxyctl"), "forget", ThreeHostLab.sleeperMAC.description, "--socket", socket,
        ])
        #expect(forgot.succeeded, "\(forgot)")
        let after = try self.fetch("/")
        #expect(after.body.contains("Not held now") && after.body.contains("/host/\(encodedMAC)"), "\(after.body)")
        #expect(try self.fetch("/host/\(encodedMAC)").body.contains("does not hold this host now"))
        #expect(try self.fetch("/host/02%3A00%3A00%3A00%3A00%3A99").status == 404)
    }

    /// The history behind the timeline survives a restart: the host page after a restart still shows the asleep
    /// band it had before.
    @Test func theDayIsKeptAcrossARestart() throws {
        var daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        try self.register()
        try self.sleeper.sleep()
        #expect(
            Daemon.waitForHosts(proxy: self.proxy, stateDirectory: self.state) { $0.values.first?.state == .asleep },
            "the host never went asleep: \(daemon.output)")
        daemon.stop()
        let file = self.state.appendingPathComponent("history.jsonl")
        let written = (try? String(contentsOf: file, encoding: .utf8)) ?? ""
        #expect(written.contains("\"state\":\"asleep\""), "history.jsonl: \(written)")
        daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state, logName: "sleepproxyd-2")
        defer { daemon.stop() }
        let encodedMAC = ThreeHostLab.sleeperMAC.description.replacingOccurrences(of: ":", with: "%3A")
        // The file is read by the history writer once the daemon answers: ask (bounded) until it was.
        var api = (status: 0, body: "")
        var history: HostHistory? = nil
        try waitUntil(timeout: 10) {
            api = try self.fetch("/api/v1/history/\(encodedMAC)")
            history = try? ControlProtocol.decode(ControlResponse.self, from: Array(api.body.utf8)).history
            return history?.records.contains(where: { $0.state == .starting }) == true
        }
        #expect(history?.records.first { $0.state == .starting }?.note == "registered", "\(api.body)")
        #expect(history?.records.contains { $0.state == .asleep } == true, "\(api.body)")
        // sleepproxyctl reads the same day.
        let socket = self.state.appendingPathComponent("control.sock").path
        let text = try self.proxy.run([
            Daemon.sibling("sleepproxyctl"), "history", ThreeHostLab.sleeperMAC.description, "--socket", socket,
        ])
        #expect(text.succeeded && text.stdout.contains("asleep: "), "\(text)")
    }
}

extension ThreeHostSuite {
    /// Chromium's DOM of `path` once its scripts ran, and every console line it logged; with `screenshot`, a
    /// picture of the page as well.
    func browse(_ path: String, screenshot: String? = nil, window: String = "1280,1000") throws -> (
        dom: String, console: [String]
    ) {
        let profile = self.lab.directory.appendingPathComponent("chromium-\(UUID().uuidString.prefix(8))").path
        var flags = [
            StatusPageLabTests.chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--user-data-dir=\(profile)", "--enable-logging=stderr", "--v=0", "--virtual-time-budget=3000",
        ]
        if let screenshot {
            try FileManager.default.createDirectory(
                at: StatusPageLabTests.screenshots, withIntermediateDirectories: true)
            let picture = try self.proxy.run(
                flags + [
                    "--window-size=\(window)", "--hide-scrollbars",
                    "--screenshot=\(StatusPageLabTests.screenshots.appendingPathComponent(screenshot).path)",
                    "http://127.0.0.1:9580\(path)",
                ], timeout: .seconds(60))
            #expect(picture.succeeded, "chromium --screenshot: \(picture)")
        }
        flags.append(contentsOf: ["--dump-dom", "http://127.0.0.1:9580\(path)"])
        let result = try self.proxy.run(flags, timeout: .seconds(60))
        #expect(result.succeeded, "chromium --dump-dom: \(result.stderr.suffix(2000))")
        let console = result.stderr.split(separator: "\n").filter { $0.contains(":CONSOLE") }.map(String.init)
        return (result.stdout, console)
    }
}
