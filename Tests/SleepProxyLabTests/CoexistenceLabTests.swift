import Foundation
import SleepProxyControl
import SleepProxyTestSupport
import SleepProxyWire
import Testing

/// Hosts that behave like real ones (docs/coexistence.md): an avahi-daemon host registers while it is
/// still awake, with our client and in awein/SleepProxyClient's form, sleeps keeping its IPv6 link-local address,
/// resumes by restarting avahi-daemon (no Owner option ever), re-registers with a service fewer, and lets a lease
/// run out while awake. Every check that matters reads avahi's own log and what third-party queriers resolve.
// Not serialized: each test builds its own lab (anonymous namespaces, avahi with a private /run), and their long
// waits are idle, so they run side by side.
@Suite("Coexistence with real hosts in the lab", .lab(.namespaces, .avahi, .dnspython))
final class CoexistenceLabTests: ThreeHostSuite {
    let setup: ThreeHostLab
    var querier: LabHost { self.setup.third }

    init() throws {
        self.setup = try ThreeHostLab(thirdName: "querier")
    }

    static let client = Daemon.sibling("sleepproxy-client")
    static let ctl = Daemon.sibling("sleepproxyctl")
    var clientState: String { self.lab.directory.appendingPathComponent("client-state").path }
    var common: [String] { ["--interface", "eth0", "--host-name", "sleeper", "--state-directory", self.clientState] }

    /// awein/SleepProxyClient's registration, built by dnspython as it builds it: a zone section (`.`), no
    /// cache-flush bits, TTL 120 on address records, the link-local AAAA, an extra TXT string, Owner sequence 0.
    static let aweinStyle = """
        import socket, struct, sys
        import dns.update, dns.edns, dns.message, dns.rcode
        u = dns.update.UpdateMessage('.')
        u.add('sleeper.local.', 120, 'A', '192.0.2.2')
        u.add('sleeper.local.', 120, 'AAAA', '2001:db8::2')
        u.add('sleeper.local.', 120, 'AAAA', 'fe80::53:50ff:fe00:2')
        u.add('2.2.0.192.in-addr.arpa.', 120, 'PTR', 'sleeper.local.')
        u.add('_services._dns-sd._udp.local.', 4500, 'PTR', '_http._tcp.local.')
        instance = 'My' + chr(92) + ' Web' + chr(92) + ' Server._http._tcp.local.'
        u.add('_http._tcp.local.', 4500, 'PTR', instance)
        u.add(instance, 120, 'SRV', '0 0 8080 sleeper.local.')
        u.add(instance, 4500, 'TXT', '"path=/index.html" "version=1.0" "awein=1"')
        mac = bytes.fromhex('025350000002')
        options = [dns.edns.GenericOption(2, struct.pack('!I', 7200)), dns.edns.GenericOption(4, b'\\x00\\x00' + mac)]
        u.use_edns(edns=0, payload=1440, options=options)
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(('192.0.2.2', 0)); s.settimeout(3)
        s.sendto(u.to_wire(), ('192.0.2.1', 5599))
        print(dns.rcode.to_text(dns.message.from_wire(s.recv(2000)).rcode()))
        """

    /// What avahi-daemon logged that shows the proxy fought it: a conflict, a collision, or a new name.
    static func fights(_ log: String) -> [String] {
        log.split(separator: "\n").map(String.init).filter { line in
            let lower = line.lowercased()
            return lower.contains("conflict") || lower.contains("collision") || lower.contains("sleeper-2")
                || lower.contains("#2")
        }
    }

    func ctl(_ arguments: [String]) throws -> ControlResponse {
        let result = try self.proxy.run(
            [Self.ctl] + arguments + ["--socket", self.state.appendingPathComponent("control.sock").path, "--json"])
        let line = result.stdout.split(separator: "\n").first.map { Array($0.utf8) } ?? []
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return try decoder.decode(ControlResponse.self, from: Data(line))
    }

    /// The host's state as `sleepproxyctl hosts` reports it, polled (bounded) until it is `expected`.
    func waitForState(_ expected: PresenceState, timeout: TimeInterval = 12) throws -> PresenceState? {
        Daemon.waitForHost(
            "sleeper.local.", in: expected, proxy: self.proxy, stateDirectory: self.state, timeout: timeout)
    }

    /// Starts avahi-daemon on the sleeper as `sleeper` with two services (the second one optional).
    func startAvahi(files: Bool = true) throws -> AvahiDaemon {
        let avahi = try AvahiDaemon(in: self.sleeper.host, hostName: "sleeper", directory: self.lab.directory)
        try avahi.publish(
            name: "My Web Server", type: "_http._tcp", port: 8080, txt: ["path=/index.html", "version=1.0"],
            logName: "publish-web")
        if files { try avahi.publish(name: "Sleeper Files", type: "_smb._tcp", port: 445, logName: "publish-files") }
        return avahi
    }

    @Test func anAvahiHostIsNeverFoughtWhateverRegisteredItAndIsTakenOverOnTheAddressItLetsGo() throws {
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state, extra: ["--proxy-name", "Lab Proxy"])
        defer { daemon.stop() }
        let watcher = try AvahiDaemon(in: self.querier, hostName: "querier", directory: self.lab.directory)
        defer { watcher.stop() }
        var avahi = try self.startAvahi()
        defer { avahi.stop() }

        // 1. Registered while awake, by our client and then in awein's form, and awake for 30 s while a third host
        // keeps browsing and resolving: the proxy says nothing for it, and avahi keeps its names.
        let register = try avahi.run([Self.client, "register"] + self.common)
        #expect(register.succeeded && register.stdout.contains("registered"), "\(register)")
        let awake = Date()
        var resolved: [String?] = []
        while Date().timeIntervalSince(awake) < 15 {
            resolved.append(try Queriers.avahiResolve(watcher, name: "sleeper.local"))
            _ = try Queriers.avahiBrowse(watcher, type: "_http._tcp")
        }
        let awein = try self.sleeper.host.run(["/usr/bin/python3", "-c", Self.aweinStyle])
        #expect(awein.stdout.contains("NOERROR"), "\(awein) \(daemon.output)")
        while Date().timeIntervalSince(awake) < 30 {
            resolved.append(try Queriers.avahiResolve(watcher, name: "sleeper.local"))
            _ = try Queriers.avahiBrowse(watcher, type: "_http._tcp")
        }
        #expect(
            Self.fights(avahi.process.output).isEmpty,
            "avahi-daemon was fought while awake: \(Self.fights(avahi.process.output))")
        #expect(avahi.process.output.contains("Host name is sleeper.local"), "\(avahi.process.output)")
        #expect(resolved.allSatisfy { $0 == "192.0.2.2" }, "\(resolved)")
        #expect(try self.waitForState(.starting, timeout: 1) == .starting, "an awake host is not asleep")
        // The proxy's own view: it probed the host's addresses and the host answered for them. An address being
        // probed again at the moment of asking shows `probing` for the few milliseconds its answer takes, so ask
        // again (bounded) rather than read one instant.
        var probed: HostDetail?
        let seen = try waitUntil(timeout: 5, interval: 0.2) {
            probed = try self.ctl(["host", "sleeper"]).host
            return probed?.addressStates?.contains { $0.state == .ownerSeen } == true
        }
        #expect(seen, "\(String(describing: probed))")

        // 2. It suspends keeping its IPv6 link-local address (the kernel still answers for it): IPv4 is claimed,
        // the services are answered by the proxy, and a connection wakes it.
        let register2 = try avahi.run([Self.client, "register"] + self.common)
        #expect(register2.succeeded, "\(register2)")
        _ = try Command.run(["kill", "-STOP", "\(avahi.process.pid)"])
        try self.sleeper.sleep(keepingLinkLocal: true)
        #expect(try self.waitForState(.asleep) == .asleep, "\(daemon.output)")
        // Asleep once one address is claimed; the other may have answered a probe while the host was still up
        // (it registered awake), so it is claimed a probe round later: wait for it (bounded).
        var states: [String: HostDetail.AddressState.Phase] = [:]
        try waitUntil(timeout: 15, interval: 0.2) {
            let detail = try #require(try self.ctl(["host", "sleeper"]).host)
            states = Dictionary(uniqueKeysWithValues: (detail.addressStates ?? []).map { ($0.address, $0.state) })
            return states["192.0.2.2"] == .answering
        }
        #expect(states["192.0.2.2"] == .answering, "\(states)")
        #expect(
            states["fe80::53:50ff:fe00:2"].map { $0 != .answering } ?? true,
            "the link-local address the host kept was claimed: \(states)")
        let found = try Queriers.zeroconf(in: self.querier, type: "_http._tcp.local.")
        #expect(
            found.contains { $0.name == "My Web Server" && $0.port == 8080 && $0.addresses.contains("192.0.2.2") },
            "not discoverable while asleep: \(found)")
        // The client waits as long as a browser would for its SYNs to be answered (30 s here, bounded); what is
        // checked is how soon after the host wakes the connection completes (the proxy replays the SYN), not how
        // long the test's own steps took before that.
        let connect = try self.querier.spawn(
            [
                "/usr/bin/python3", "-c",
                "import socket; s=socket.create_connection(('192.0.2.2', 8080), 30); print('connected', s.recv(16).decode().strip(), flush=True)",
            ], logName: "connect")
        defer { connect.stop() }
        #expect(!self.sleeper.waitForMagicPackets(1, timeout: 5).isEmpty, "no magic packet")

        // 3. It resumes by restarting avahi-daemon (a fresh process, no Owner option): the proxy lets go at its
        // first mDNS packet, avahi keeps its names, and a browser sees one instance of each service.
        avahi.process.stop(signal: SIGKILL)
        avahi.stop()
        try self.sleeper.wake()
        #expect(connect.waitForOutput("connected awake", timeout: 8), "\(connect.output)\n\(daemon.output)")
        avahi = try self.startAvahi()
        #expect(
            Daemon.waitForHosts(proxy: self.proxy, stateDirectory: self.state, timeout: 5) { $0.isEmpty },
            "not handed back: \(daemon.output)")
        // Handed back (it woke and spoke for itself), not let go for another reason: the status's recent hosts.
        let recent = Daemon.status(proxy: self.proxy, stateDirectory: self.state)?.recentHosts ?? []
        #expect(recent.contains { $0.name?.hasPrefix("sleeper.local") == true && $0.state == .handedBack }, "\(recent)")
        // `startAvahi` returned once avahi's probing was over and both services were established (its own log).
        #expect(
            Self.fights(avahi.process.output).isEmpty,
            "avahi-daemon was fought after resuming: \(Self.fights(avahi.process.output))")
        #expect(avahi.process.output.contains("Host name is sleeper.local"), "\(avahi.process.output)")
        let browsed = try Queriers.avahiBrowse(watcher, type: "_http._tcp") { found in
            found.contains { $0.name == "My Web Server" }
        }
        #expect(Set(browsed.map(\.name)) == ["My Web Server"], "\(browsed)")
        #expect(try self.ctl(["hosts"]).hosts?.isEmpty == true, "the proxy still holds the awake host")

        // 4. It sleeps again with one service fewer (same Owner sequence: avahi-based clients never bump it): the
        // removed service is gone from the proxy's answers.
        avahi.stop()
        avahi = try self.startAvahi(files: false)
        let register3 = try avahi.run([Self.client, "register"] + self.common)
        #expect(register3.succeeded, "\(register3)")
        _ = try Command.run(["kill", "-STOP", "\(avahi.process.pid)"])
        try self.sleeper.sleep()
        #expect(try self.waitForState(.asleep) == .asleep, "\(daemon.output)")
        let services = try #require(try self.ctl(["hosts"]).hosts?.first { $0.name == "sleeper.local." }?.services)
        #expect(!services.contains { $0.hasPrefix("_smb._tcp") }, "\(services)")
        let smb = try Queriers.zeroconf(in: self.querier, type: "_smb._tcp.local.", seconds: 3)
        #expect(smb.isEmpty, "the removed service is still answered: \(smb)")
        _ = try Command.run(["kill", "-CONT", "\(avahi.process.pid)"])
        try self.sleeper.wake()
        if ProcessInfo.processInfo.environment["SLEEPPROXY_LAB_VERBOSE"] != nil {
            print("=== sleepproxyd\n\(daemon.output)\n=== avahi-daemon (resumed)\n\(avahi.process.output)")
        }
    }

    @Test func aLeaseEndingOnAnAwakeHostSendsNoMagicPacket() throws {
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state, extra: ["--proxy-name", "Lab Proxy"])
        defer { daemon.stop() }
        let avahi = try self.startAvahi(files: false)
        defer { avahi.stop() }
        let register = try avahi.run([Self.client, "register", "--lease", "30"] + self.common)
        #expect(register.succeeded && register.stdout.contains("lease 30 s"), "\(register)")
        #expect(
            Daemon.waitForHosts(proxy: self.proxy, stateDirectory: self.state, timeout: 40) { $0.isEmpty },
            "\(daemon.output)")
        // The expiry's frames leave before the batch's answers, so by now any magic packet is out; the daemon's
        // wake log says the same from its side.
        let events = try #require(try self.ctl(["events"]).events)
        #expect(!events.contains { $0.kind == .wake }, "\(events)")
        #expect(self.sleeper.magicPackets.isEmpty, "magic packets for an awake host")
        // Its day, as the status page shows it: gone because its lease ended while it was awake.
        let day = try #require(try self.ctl(["history", "02:53:50:00:00:02"]).history)
        #expect(day.records.last.map { $0.state == .gone && $0.note == "awake at expiry" } == true, "\(day.records)")
        #expect(Self.fights(avahi.process.output).isEmpty, "\(Self.fights(avahi.process.output))")
    }

    /// `sleepproxyctl neighbours` lists a machine that never registered, with what its own avahi-daemon published:
    /// its MAC (from its ARP), its name and its services (from its answers to another machine's browse).
    @Test func neighboursListsAnAvahiHostWithItsNameAndServices() throws {
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        defer { daemon.stop() }
        let avahi = try self.startAvahi()
        defer { avahi.stop() }
        let watcher = try AvahiDaemon(in: self.querier, hostName: "querier", directory: self.lab.directory)
        defer { watcher.stop() }
        // Its kernel asks for the proxy machine's address (any unicast it sends does), which ties its address to
        // its MAC; then another machine browses, and its avahi answers.
        _ = try self.sleeper.host.run(["ping", "-c", "1", "-W", "1", "192.0.2.1"])
        var sleeper: NeighbourSummary?
        waitUntil(timeout: 20, interval: 0.5) {
            _ = try? Queriers.avahiBrowse(watcher, type: "_http._tcp") { !$0.isEmpty }
            sleeper = (try? self.ctl(["neighbours"]))?.neighbours?.first {
                $0.mac == ThreeHostLab.sleeperMAC.description
            }
            return sleeper?.services.contains("My Web Server._http._tcp.local.") == true
        }
        #expect(sleeper?.addresses.contains("192.0.2.2") == true, "\(String(describing: sleeper))")
        #expect(sleeper?.names.contains("sleeper.local.") == true, "\(String(describing: sleeper))")
        #expect(sleeper?.services.contains("My Web Server._http._tcp.local.") == true, "\(String(describing: sleeper))")
        #expect(sleeper?.registered == false)
        let listed = try self.proxy.run(
            [Self.ctl, "neighbours", "--socket", self.state.appendingPathComponent("control.sock").path])
        #expect(listed.stdout.contains("\(ThreeHostLab.sleeperMAC)  sleeper.local.  on eth0"), "\(listed.stdout)")
    }
}
