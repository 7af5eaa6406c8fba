import Foundation
import NIOCore
import SleepProxyControl
import SleepProxyCore
import SleepProxyIO
import SleepProxyTestSupport
import SleepProxyWire
import Testing

/// What reaches a sleeping host on a real LAN, in the lab (docs/waking.md): Debian's nmap in Home Assistant's
/// profile, raw and as a connect scan, a ping sweep with ARP, pings and SMB-style probes must put no magic
/// packet on the sleeper's wire; a Bonjour app (python-zeroconf) that resolves and connects, and Windows opening
/// 445 and 139 at once, must wake it. Every verdict is read where it happens: the magic packets the sleeper's own
/// interface received, what the app's connect() returned, and the daemon's wake log.
@Suite("Wakes only for people, against real scanners", .lab(.namespaces, .nmap, serialized: true))
final class WakeNoiseLabTests: ThreeHostSuite {
    static let laptopMAC = MACAddress("02:53:50:00:00:30")!

    let setup: ThreeHostLab
    /// The machine that runs the scanners (Home Assistant's box).
    var scanner: LabHost { self.setup.third }
    /// A machine whose single-host SMB probe (Pi.Alert style) touches two ports: no scan, but no person either.
    let laptop: LabHost
    /// A person's machine.
    let phone: LabHost

    init() throws {
        let setup = try ThreeHostLab(thirdName: "scanner")
        self.setup = setup
        self.laptop = try setup.lab.addHost(
            "laptop", mac: Self.laptopMAC, ipv4: ["192.0.2.30/24"], ipv6: ["2001:db8::30/64"])
        self.phone = try setup.lab.addHost(
            "phone", mac: MACAddress("02:53:50:00:00:40")!, ipv4: ["192.0.2.40/24"], ipv6: ["2001:db8::40/64"])
    }

    /// The sleeper registers a web server on 8080 (which its listener serves), SSH and SMB, then sleeps; the
    /// proxy is waited for until it answers for it.
    func registerAndSleep(extraServices: [(String, UInt16)] = []) throws {
        let message = SampleRegistration.message(
            id: 0x7100, mac: ThreeHostLab.sleeperMAC, host: "sleeper.local.",
            addresses: [IPAddress("192.0.2.2")!, IPAddress("2001:db8::2")!],
            services: [("Web._http._tcp", 8080), ("Shell._ssh._tcp", 22), ("Files._smb._tcp", 445)] + extraServices)
        let replies = try UDPClient.exchange(
            in: self.sleeper.host, to: "192.0.2.1", port: 5599, from: "192.0.2.2",
            payloads: [message.encoded(options: .appleUpdate)])
        #expect(replies.first??.prefix(2) == [0x71, 0x00], "registration not accepted")
        try self.sleeper.sleep()
        #expect(
            Daemon.waitForHost("sleeper.local.", in: .asleep, proxy: self.proxy, stateDirectory: self.state) == .asleep)
    }

    func wakeLog() -> [WakeLogEntry] {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        let data = (try? Data(contentsOf: self.state.appendingPathComponent(WakeLog.fileName))) ?? Data()
        return data.split(separator: 0x0A).compactMap { try? decoder.decode(WakeLogEntry.self, from: Data($0)) }
    }

    /// Runs nmap to completion (it bounds itself with --host-timeout; the command is bounded too).
    func nmap(_ arguments: [String], from host: LabHost) throws -> String {
        let result = try host.run(["/usr/bin/nmap", "-n", "--host-timeout", "5s"] + arguments, timeout: .seconds(60))
        return result.stdout
    }

    /// A Bonjour app: browse for the web service, resolve it (python-zeroconf asks for its SRV, TXT and
    /// address), connect to what it resolved, print how long connect() took and what the server said.
    static let appScript = """
        import socket, sys, time
        from zeroconf import Zeroconf, ServiceBrowser, IPVersion
        zc = Zeroconf(ip_version=IPVersion.V4Only)
        found = []
        class Listener:
            def add_service(self, zc, type_, name): found.append(name)
            def update_service(self, zc, type_, name): pass
            def remove_service(self, zc, type_, name): pass
        ServiceBrowser(zc, '_http._tcp.local.', Listener())
        deadline = time.time() + 8
        while time.time() < deadline and not found: time.sleep(0.05)
        info = zc.get_service_info('_http._tcp.local.', found[0], timeout=3000) if found else None
        if info is None:
            print('unresolved', found, flush=True); zc.close(); sys.exit(0)
        address = info.parsed_addresses()[0]
        print('resolved %s %s:%d' % (found[0], address, info.port), flush=True)
        s = socket.socket(); s.settimeout(20)
        start = time.monotonic()
        try:
            s.connect((address, info.port))
            print('connected %.3f %s' % (time.monotonic() - start, s.recv(64).decode().strip()), flush=True)
        except Exception as e:
            print('failed %.3f %s' % (time.monotonic() - start, e), flush=True)
        zc.close()
        """

    @Test func scansSweepsAndPingsWakeNobodyAndAnAppThatResolvesDoes() throws {
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        defer { daemon.stop() }
        try self.registerAndSleep()

        // Home Assistant's nmap device tracker, raw (it runs as root), then as a connect scan (nmap without root),
        // then an ARP/ping sweep of the subnet's first addresses, plain pings, and an SMB-style probe of 139 and
        // 445. nmap sees the host up (the proxy answers its ARP) and its ports filtered.
        let raw = try self.nmap(["-sS", "-F", "-T4", "--min-rate", "10", "192.0.2.2"], from: self.scanner)
        #expect(raw.contains("Host is up"), "nmap did not scan the sleeper: \(raw)")
        _ = try self.nmap(["-sT", "-F", "-T4", "--min-rate", "10", "192.0.2.2"], from: self.scanner)
        _ = try self.nmap(["-sn", "192.0.2.0/28"], from: self.scanner)
        // Pings get no answer (the proxy does not answer ICMP for a sleeper): exit 1, but ping must have run.
        let pings = try self.scanner.run(
            ["ping", "-c", "3", "-i", "0.2", "-W", "1", "192.0.2.2"], timeout: .seconds(10))
        #expect(pings.stdout.contains("3 packets transmitted"), "\(pings)")
        _ = try self.nmap(["-sS", "-p", "139,445", "-T4", "192.0.2.2"], from: self.laptop)
        // The SMB probe's SYNs are held for a retransmission that nmap never sends; the daemon's verdict on them,
        // in its wake log, is the last one due.
        waitUntil(timeout: 10, interval: 0.2) { self.wakeLog().contains(where: { $0.rule == "probe-shape" }) }
        #expect(self.sleeper.magicPackets.isEmpty, "woken by noise: \(self.sleeper.magicPackets.count) magic packets")
        let log = self.wakeLog()
        #expect(!log.contains { $0.kind == .wake }, "\(log.map(\.summary))")
        let scans = log.filter { $0.kind == .declined && $0.rule == "scanner" && $0.scanPorts != nil }
        #expect(
            scans.contains { $0.trigger.client == "192.0.2.20" }, "the scanner was not named: \(log.map(\.summary))")
        #expect(log.contains { $0.kind == .declined && $0.rule == "probe-shape" && $0.trigger.client == "192.0.2.30" })
        // One line per scanner, not one per packet: nmap sent some 400 SYNs.
        #expect(log.count < 20, "\(log.count) wake-log lines for a few scans")
        // What a user reads: the host's page and the event list name the scanner and the rule.
        let socket = self.state.appendingPathComponent("control.sock").path
        let ctl = Daemon.sibling("sleepproxyctl")
        let host = try self.proxy.run([ctl, "host", "sleeper", "--socket", socket]).stdout
        #expect(host.contains("not woken: tcp/") && host.contains("from 192.0.2.20, scanner ("), "\(host)")
        let events = try self.proxy.run([ctl, "events", "--socket", socket]).stdout
        #expect(events.contains("from 192.0.2.30, probe-shape"), "\(events)")

        // A person on the phone opens the web server from a Bonjour app: browse, resolve, connect. The proxy
        // answered the resolve, so the SYN wakes after the 300 ms hold; the sleeper resumes half a second after the first
        // magic packet and the app's connect() completes.
        let app = try self.phone.spawn(["/usr/bin/python3", "-c", Self.appScript], logName: "bonjour-app")
        defer { app.stop() }
        let packets = self.sleeper.waitForMagicPackets(1, timeout: 15)
        #expect(
            !packets.isEmpty,
            "the app's connection did not wake the sleeper: \(app.output)\n\(daemon.output.suffix(4000))")
        usleep(Scenario.resumeAfterMagicPacket)
        try self.sleeper.wake()
        #expect(app.waitForOutput("connected", timeout: 10), "\(app.output)")
        #expect(app.output.contains("awake"), "\(app.output)")
        var wake: WakeLogEntry?
        waitUntil(timeout: 5) {
            wake = self.wakeLog().first { $0.kind == .wake }
            return wake != nil
        }
        #expect(wake?.rule == "resolved-first" && wake?.trigger.client == "192.0.2.40", "\(String(describing: wake))")
        // And the metrics count what was declined, by rule.
        let metrics = try self.proxy.run([
            "/usr/bin/python3", "-c",
            "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9580/metrics', timeout=5).read().decode())",
        ]).stdout
        #expect(metrics.contains("sleepproxy_wakes_declined_total{reason=\"scanner\"}"), "\(metrics.prefix(400))")
    }

    /// Home Assistant does both: its zeroconf integration browses and resolves what the link publishes (through
    /// the proxy, for a sleeper), and its nmap tracker then scans every address. The resolve must not vouch for
    /// the scan: the first SYN used to wake the sleeper at once, before the scan showed itself.
    @Test func aScannerThatResolvedTheSleeperFirstWakesNobody() throws {
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        defer { daemon.stop() }
        try self.registerAndSleep()
        // The app's script up to its resolve: it leaves before it connects.
        let resolve = Self.appScript.replacingOccurrences(
            of: "s = socket.socket(); s.settimeout(20)", with: "zc.close(); sys.exit(0)")
        let zeroconf = try self.scanner.spawn(["/usr/bin/python3", "-c", resolve], logName: "zeroconf-resolve")
        defer { zeroconf.stop() }
        #expect(zeroconf.waitForOutput("resolved", timeout: 15), "\(zeroconf.output)")
        let raw = try self.nmap(["-sS", "-F", "-T4", "--min-rate", "10", "192.0.2.2"], from: self.scanner)
        #expect(raw.contains("Host is up"), "nmap did not scan the sleeper: \(raw)")
        waitUntil(timeout: 10, interval: 0.2) {
            self.wakeLog().contains { $0.rule == "scanner" && $0.trigger.client == "192.0.2.20" }
        }
        #expect(self.sleeper.magicPackets.isEmpty, "woken by a scan: \(self.sleeper.magicPackets.count) magic packets")
        let log = self.wakeLog()
        #expect(!log.contains { $0.kind == .wake }, "\(log.map(\.summary))")
    }

    /// pyatv and Home Assistant scan by asking each device's own address on port 5353. For a sleeping host the
    /// proxy answers from that address (dig, like pyatv, drops an answer from any other) and wakes nothing.
    @Test func aQuestionToTheSleepersOwnAddressIsAnsweredAndWakesNothing() throws {
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        defer { daemon.stop() }
        try self.registerAndSleep()
        for (server, name, type) in [
            ("192.0.2.2", "Web._http._tcp.local.", "SRV"), ("2001:db8::2", "sleeper.local.", "A"),
        ] {
            let answers = try Queriers.dig(in: self.phone, server: server, name: name, type: type)
            #expect(answers.contains { $0.type == type }, "no answer from \(server) for \(name) \(type)")
        }
        // pyatv's first question to each address: the host's service types only, never the proxy's own sleep
        // proxy service (which made pyatv and Home Assistant take the sleeper for a sleep proxy).
        for server in ["192.0.2.2", "2001:db8::2"] {
            let types = try Queriers.dig(
                in: self.phone, server: server, name: "_services._dns-sd._udp.local.", type: "PTR"
            )
            .map(\.data)
            #expect(types.contains("_http._tcp.local.") && !types.contains { $0.contains("_sleep-proxy") }, "\(types)")
        }
        #expect(self.sleeper.magicPackets.isEmpty)
        #expect(self.wakeLog().isEmpty, "\(self.wakeLog().map(\.summary))")
    }

    /// Windows Explorer opens 445 and 139 at the same moment: two ports of one host is a person, and it wakes.
    @Test func windowsOpeningSMBOnTwoPortsAtOnceWakes() throws {
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        defer { daemon.stop() }
        try self.registerAndSleep(extraServices: [("NetBIOS._netbios-ssn._tcp", 139)])
        let script = """
            import socket, select, time
            socks = []
            for port in (445, 139):
                s = socket.socket(); s.setblocking(False)
                try: s.connect(('192.0.2.2', port))
                except BlockingIOError: pass
                socks.append(s)
            time.sleep(3)
            print('done', flush=True)
            """
        let windows = try self.phone.spawn(["/usr/bin/python3", "-c", script], logName: "windows-smb")
        defer { windows.stop() }
        #expect(!self.sleeper.waitForMagicPackets(1, timeout: 5).isEmpty, "Windows' SMB connection did not wake")
        // The magic packet leaves before the wake log line is written (frames first): wait for the line.
        var wake: WakeLogEntry?
        waitUntil(timeout: 5) {
            wake = self.wakeLog().first { $0.kind == .wake }
            return wake != nil
        }
        #expect(wake?.rule == "no-scan-seen", "\(String(describing: wake))")
    }

    /// Nagios' check_tcp, as a monitoring box polls a port: the kernel's connect() with a 4 s timeout, so each poll
    /// retransmits its SYN after a second as a person's machine does. The first poll wakes the host; the next ones,
    /// without a resolve, are declined, retransmissions included (docs/waking.md §6).
    @Test func aPortMonitorWakesTheHostOnceAndItsNextPollsNot() throws {
        let checkTCP = "/usr/lib/nagios/plugins/check_tcp"
        try #require(FileManager.default.isExecutableFile(atPath: checkTCP), "monitoring-plugins-basic (scripts/test)")
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        defer { daemon.stop() }
        try self.registerAndSleep()
        for _ in 1...3 {
            let poll = try self.laptop.run(
                [checkTCP, "-H", "192.0.2.2", "-p", "445", "-t", "4"], timeout: .seconds(15))
            #expect(poll.stdout.contains("CRITICAL") || poll.stdout.contains("timed out"), "\(poll)")
        }
        #expect(!self.sleeper.waitForMagicPackets(1, timeout: 5).isEmpty, "the first poll woke the host")
        var log: [WakeLogEntry] = []
        waitUntil(timeout: 5) {
            log = self.wakeLog()
            return log.contains { $0.kind == .declined && $0.rule == "monitor-budget" }
        }
        let wakes = log.filter { $0.kind == .wake }
        #expect(wakes.count == 1 && wakes.first?.trigger.client == "192.0.2.30", "\(log.map(\.summary))")
        #expect(
            log.contains { $0.kind == .declined && $0.rule == "monitor-budget" && $0.trigger.client == "192.0.2.30" },
            "\(log.map(\.summary))")
    }
}
