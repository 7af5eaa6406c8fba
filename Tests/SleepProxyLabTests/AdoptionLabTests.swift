import Foundation
import SleepProxyControl
import SleepProxyTestSupport
import SleepProxyWire
import Testing

/// Adoption against real software (docs/adoption.md): an avahi-daemon host with a real Samba share and web
/// server, which never registers, is adopted by its MAC; it sleeps as a Linux host does (its responder frozen,
/// its addresses gone) and is resolved by python-zeroconf, avahi-browse and dig, ignored by nmap, woken by
/// smbclient and curl, and handed back; and the same host with a NIC that keeps answering ARP is never fought.
@Suite("Adopted hosts against real software", .lab(.namespaces, .avahi, .nmap, .fileServers))
final class AdoptionLabTests: ThreeHostSuite {
    let setup: ThreeHostLab
    var querier: LabHost { self.setup.third }

    init() throws {
        self.setup = try ThreeHostLab(thirdName: "querier")
    }

    static let mac = ThreeHostLab.sleeperMAC.description

    /// avahi-daemon on the sleeper, publishing the two real servers.
    func startAvahi() throws -> AvahiDaemon {
        let avahi = try AvahiDaemon(in: self.sleeper.host, hostName: "sleeper", directory: self.lab.directory)
        try avahi.publish(name: "Sleeper Files", type: "_smb._tcp", port: 445, logName: "publish-smb")
        try avahi.publish(
            name: "Sleeper Web", type: "_http._tcp", port: FileServers.httpPort, txt: ["path=/hello.txt"],
            logName: "publish-web")
        return avahi
    }

    /// Suspends the host as Linux does: the responder frozen mid-flight, the addresses gone, the link up.
    func suspend(_ avahi: AvahiDaemon) throws {
        _ = try Command.run(["kill", "-STOP", "\(avahi.process.pid)"])
        try self.sleeper.sleep()
    }

    /// Resumes it: the addresses back and announced, avahi-daemon started afresh (a frozen one would answer the
    /// questions queued while it slept, which a real host does not).
    func resume(_ avahi: inout AvahiDaemon) throws {
        avahi.process.stop(signal: SIGKILL)
        avahi.stop()
        try self.sleeper.wake()
        avahi = try self.startAvahi()
    }

    @Test func anAdoptedHostIsKeptPresentAsleepWokenByPeopleOnlyAndHandedBack() throws {
        let servers = try FileServers(in: self.sleeper.host, directory: self.lab.directory)
        defer { servers.stop() }
        var avahi = try self.startAvahi()
        defer { avahi.stop() }
        let watcher = try AvahiDaemon(in: self.querier, hostName: "querier", directory: self.lab.directory)
        defer { watcher.stop() }
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state, extra: ["--adopt", Self.mac])
        defer { daemon.stop() }

        // 1. Awake: the proxy learns what the host publishes (it asks the link what it serves) and keeps asking
        // its name whenever it is quiet; it never answers for it, and avahi keeps its names.
        let learned = try self.waitForAdopted("awake") { $0.services.count == 2 && !$0.names.isEmpty }
        #expect(
            Set(learned?.services ?? []) == ["Sleeper Files._smb._tcp.local.", "Sleeper Web._http._tcp.local."],
            "\(String(describing: learned))\n\(daemon.output)")
        #expect(learned?.configured == true && learned?.names == ["sleeper.local."])
        let awakeSince = Date()
        var states: Set<String> = []
        while Date().timeIntervalSince(awakeSince) < 12 {
            states.insert(try self.adopted()?.state ?? "?")
            _ = try Queriers.avahiBrowse(watcher, type: "_smb._tcp")
        }
        #expect(states.isSubset(of: ["awake", "checking"]), "held while awake: \(states)")
        #expect(CoexistenceLabTests.fights(avahi.process.output).isEmpty, "\(avahi.process.output)")

        // 2. It sleeps: spoken for within seconds of its last word, as itself.
        try self.suspend(avahi)
        let slept = Date()
        let asleep = try self.waitForAdopted("asleep")
        #expect(asleep?.state == "asleep", "\(String(describing: asleep))\n\(daemon.output)")
        let tookOver = Date().timeIntervalSince(slept)
        let found = try Queriers.zeroconf(in: self.querier, type: "_smb._tcp.local.")
        #expect(
            found.contains { $0.name == "Sleeper Files" && $0.port == 445 && $0.addresses.contains("192.0.2.2") },
            "python-zeroconf did not resolve the sleeping host: \(found)")
        let browsed = try Queriers.avahiBrowse(watcher, type: "_http._tcp") { found in
            found.contains { $0.name == "Sleeper Web" }
        }
        #expect(
            browsed.contains { $0.name == "Sleeper Web" && $0.port == 80 && $0.txt == ["path=/hello.txt"] },
            "\(browsed)")
        let dug = try Queriers.dig(in: self.querier, server: "192.0.2.2", name: "sleeper.local", type: "A")
        #expect(dug.map(\.data) == ["192.0.2.2"], "\(dug)")

        // 3. A scan in Home Assistant's profile, from its own box, wakes nothing.
        let scanner = try self.lab.addHost(
            "scanner", mac: MACAddress("02:53:50:00:00:40")!, ipv4: ["192.0.2.40/24"], ipv6: ["2001:db8::40/64"])
        _ = try scanner.run(
            ["/usr/bin/nmap", "-n", "--host-timeout", "5s", "-sS", "-F", "-T4", "192.0.2.2"], timeout: .seconds(60))
        #expect(self.sleeper.magicPackets.isEmpty, "a scan woke the adopted host\n\(daemon.output)")

        // 4. smbclient wants the share: the host is woken, and the listing completes once it is up.
        let smb = try self.querier.spawn(
            ["/usr/bin/smbclient", "//192.0.2.2/share", "-N", "-t", "60", "-c", "ls"], logName: "smbclient")
        defer { smb.stop() }
        #expect(!self.sleeper.waitForMagicPackets(1, timeout: 10).isEmpty, "no magic packet\n\(daemon.output)")
        try self.resume(&avahi)
        #expect(smb.waitForOutput("hello.txt", timeout: 30), "\(smb.output)\n\(daemon.output)")
        let back = try self.waitForAdopted("awake")
        #expect(back?.state == "awake", "not handed back: \(String(describing: back))")
        #expect(CoexistenceLabTests.fights(avahi.process.output).isEmpty, "\(avahi.process.output)")

        // 5. It sleeps again and curl, on someone else's laptop, wakes it: adoption holds across sleeps. (From
        // the querier, whose smbclient tried ports 445 and 139 moments ago, a third port within 10 s would look
        // like a scan: docs/waking.md.)
        let laptop = try self.lab.addHost(
            "laptop", mac: MACAddress("02:53:50:00:00:50")!, ipv4: ["192.0.2.50/24"], ipv6: ["2001:db8::50/64"])
        let magicBefore = self.sleeper.magicPackets.count
        try self.suspend(avahi)
        #expect(try self.waitForAdopted("asleep")?.state == "asleep", "\(daemon.output)")
        let curl = try laptop.spawn(
            ["/usr/bin/curl", "-sS", "--max-time", "60", "http://192.0.2.2/hello.txt"], logName: "curl")
        defer { curl.stop() }
        #expect(
            !self.sleeper.waitForMagicPackets(magicBefore + 1, timeout: 10).dropFirst(magicBefore).isEmpty,
            "curl did not wake it\n\(daemon.output)")
        try self.resume(&avahi)
        #expect(curl.waitForOutput("awake", timeout: 30), "\(curl.output)")
        #expect(CoexistenceLabTests.fights(avahi.process.output).isEmpty, "\(avahi.process.output)")
        if ProcessInfo.processInfo.environment["SLEEPPROXY_LAB_VERBOSE"] != nil {
            print("adoption: answered for \(String(format: "%.2f", tookOver)) s after the host slept (poll 0.2 s)")
            print("=== sleepproxyd\n\(daemon.output)")
        }
    }

    @Test func aHostWhoseNICAnswersARPInSleepIsNotFoughtAndIsStillReached() throws {
        let servers = try FileServers(in: self.sleeper.host, directory: self.lab.directory)
        defer { servers.stop() }
        var avahi = try self.startAvahi()
        defer { avahi.stop() }
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state, extra: [])
        defer { daemon.stop() }
        // Adopted at run time this time, as a person would from `sleepproxyctl neighbours`.
        let adopt = try self.ctl(["adopt", Self.mac])
        #expect(adopt.ok, "\(String(describing: adopt.error))")
        #expect(try self.waitForAdopted("awake") { $0.services.count == 2 } != nil, "\(daemon.output)")

        // Asleep with ARP offload: the kernel still answers ARP, everything else in and out is dropped.
        _ = try Command.run(["kill", "-STOP", "\(avahi.process.pid)"])
        let rules = """
            table inet sleep {
                chain in { type filter hook input priority -300; policy drop; }
                chain out { type filter hook output priority -300; policy drop; }
            }
            """
        let file = self.lab.directory.appendingPathComponent("sleep.nft")
        try rules.write(to: file, atomically: true, encoding: .utf8)
        let drop = try self.sleeper.host.run(["/usr/sbin/nft", "-f", file.path])
        #expect(drop.succeeded, "\(drop)")
        let asleep = try self.waitForAdopted("asleep") { $0.nicAnswers }
        #expect(asleep?.nicAnswers == true, "\(String(describing: asleep))\n\(daemon.output)")
        // Never claimed over ARP: the only answers for 192.0.2.2 come from the host's own MAC.
        let arp = try self.querier.run(["/usr/bin/python3", "-c", Self.arpAnswers], timeout: .seconds(20))
        #expect(arp.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == Self.mac, "\(arp)")
        #expect(self.sleeper.magicPackets.isEmpty, "asking for the address without resolving the host woke it")

        // Found, and reached: a browser resolves it and connects. Its SYN goes to the host's MAC, out of the
        // proxy's sight; its ARP request just before is what wakes the host (docs/adoption.md §4). A client whose
        // neighbour cache still held the host's MAC would ask by unicast, which only the host's port sees.
        let found = try Queriers.zeroconf(in: self.querier, type: "_http._tcp.local.")
        #expect(found.contains { $0.name == "Sleeper Web" }, "not found while its NIC answers: \(found)")
        _ = try self.querier.run(["ip", "neigh", "flush", "dev", "eth0"])
        let curl = try self.querier.spawn(
            ["/usr/bin/curl", "-sS", "--max-time", "60", "http://192.0.2.2/hello.txt"], logName: "curl")
        defer { curl.stop() }
        #expect(!self.sleeper.waitForMagicPackets(1, timeout: 10).isEmpty, "not woken\n\(daemon.output)")
        _ = try self.sleeper.host.run(["/usr/sbin/nft", "delete", "table", "inet", "sleep"])
        avahi.process.stop(signal: SIGKILL)
        avahi.stop()
        avahi = try self.startAvahi()
        #expect(curl.waitForOutput("awake", timeout: 30), "\(curl.output)\n\(daemon.output)")
        #expect(try self.waitForAdopted("awake")?.state == "awake", "not handed back\n\(daemon.output)")

        // Adopted at run time: kept across a restart.
        daemon.stop()
        let again = try Daemon.start(in: self.proxy, stateDirectory: self.state, extra: [])
        defer { again.stop() }
        #expect(try self.adopted()?.configured == false)
    }

    @Test func aHostThatNeverWakesIsWithdrawnUntilItIsSeenAgain() throws {
        var avahi = try self.startAvahi()
        defer { avahi.stop() }
        let watcher = try AvahiDaemon(in: self.querier, hostName: "querier", directory: self.lab.directory)
        defer { watcher.stop() }
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state, extra: ["--adopt", Self.mac])
        defer { daemon.stop() }
        #expect(try self.waitForAdopted("awake") { $0.services.count == 2 } != nil, "\(daemon.output)")
        try self.suspend(avahi)
        #expect(try self.waitForAdopted("asleep")?.state == "asleep", "\(daemon.output)")
        let browsed = try Queriers.avahiBrowse(watcher, type: "_smb._tcp") {
            $0.contains { $0.name == "Sleeper Files" }
        }
        #expect(browsed.contains { $0.name == "Sleeper Files" }, "\(browsed)")

        // A laptop that left the house: it answers no wake. One unanswered wake keeps it; the second withdraws it.
        for round in 1...2 {
            // The next wake may start 10 s after the last gave up (`TakeoverRules.wakeHoldoff`).
            var woken = ControlResponse.failure("not asked")
            _ = try waitUntil(timeout: 15, interval: 0.5) {
                woken = try self.ctl(["wake", Self.mac])
                return woken.ok
            }
            #expect(woken.ok, "round \(round): \(String(describing: woken.error))\n\(daemon.output)")
            // Each wake runs 30 s (15 bursts 2 s apart).
            try waitUntil(timeout: 45, interval: 0.5) {
                (try self.ctl(["events", Self.mac]).events ?? []).filter { $0.kind == .noResponse }.count >= round
            }
            let expected = round == 1 ? "asleep" : "off or away"
            let state = try self.waitForAdopted(expected, timeout: 15)
            #expect(state?.state == expected, "round \(round): \(String(describing: state))\n\(daemon.output)")
        }
        // Withdrawn with goodbyes: browsers no longer list it.
        let gone = try Queriers.avahiBrowse(watcher, type: "_smb._tcp") { !$0.contains { $0.name == "Sleeper Files" } }
        #expect(!gone.contains { $0.name == "Sleeper Files" }, "still listed: \(gone)")
        #expect(try self.ctl(["hosts"]).hosts?.isEmpty == true)
        // Back home: seen again, and answered for again when it next sleeps.
        try self.resume(&avahi)
        #expect(try self.waitForAdopted("awake")?.state == "awake", "\(daemon.output)")
        try self.suspend(avahi)
        #expect(try self.waitForAdopted("asleep")?.state == "asleep", "\(daemon.output)")
        if ProcessInfo.processInfo.environment["SLEEPPROXY_LAB_VERBOSE"] != nil { print(daemon.output) }
    }

    /// Asks for 192.0.2.2 by ARP three times and prints every MAC that answered.
    static let arpAnswers = """
        import socket, struct, time
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0806))
        s.bind(('eth0', 0)); s.settimeout(0.5)
        mine = s.getsockname()[4]
        request = b'\\xff' * 6 + mine + b'\\x08\\x06' + struct.pack('!HHBBH', 1, 0x0800, 6, 4, 1) + mine \\
            + socket.inet_aton('192.0.2.20') + b'\\x00' * 6 + socket.inet_aton('192.0.2.2')
        answers = set()
        for _ in range(3):
            s.send(request)
            end = time.time() + 1
            while time.time() < end:
                try:
                    frame = s.recv(100)
                except socket.timeout:
                    continue
                if frame[20:22] == b'\\x00\\x02' and frame[28:32] == socket.inet_aton('192.0.2.2'):
                    answers.add(':'.join('%02x' % b for b in frame[22:28]))
        print(' '.join(sorted(answers)))
        """
}
