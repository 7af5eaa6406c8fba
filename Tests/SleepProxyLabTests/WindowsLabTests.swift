import Foundation
import NIOCore
import SleepProxyControl
import SleepProxyTestSupport
import SleepProxyWire
import Testing

/// A sleeping PC found the ways Windows clients look for it (docs/windows.md), asserted on the clients' own view:
/// Samba's nmbd as the PC WINPC (with smbd's share and an LLMNR responder) is adopted; while it is awake the proxy
/// learns its names from its own frames; asleep, `nmblookup` finds it by name and by node status, an LLMNR
/// querier resolves it, `smbclient //WINPC` (NetBIOS name resolution, as shipped but broadcast only) wakes it and
/// lists the share, and nmap in Home Assistant's profile wakes nothing.
@Suite("A sleeping Windows PC found by name", .lab(.namespaces, .fileServers, .windowsNames, .nmap))
final class WindowsLabTests: ThreeHostSuite {
    let setup: ThreeHostLab
    var client: LabHost { self.setup.third }
    static let mac = ThreeHostLab.sleeperMAC.description

    init() throws {
        self.setup = try ThreeHostLab(thirdName: "client")
    }

    /// The client's smb.conf: every path private to the lab, names resolved by broadcast only (no DNS lookup
    /// leaves the namespace).
    func clientConfig() throws -> String {
        let root = self.lab.directory.appendingPathComponent("samba-client")
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        let config = root.appendingPathComponent("smb.conf")
        try """
        [global]
        workgroup = WORKGROUP
        name resolve order = bcast
        \(try FileServers.privateSambaPaths(under: root))
        """.write(to: config, atomically: true, encoding: .utf8)
        return config.path
    }

    /// An LLMNR question for `name` A over 224.0.0.252 from the client, as Windows asks it (sent twice, a second
    /// apart); the answer's source and address, or nil.
    func llmnr(_ name: String) throws -> (source: String, address: String, milliseconds: String)? {
        let script = """
            import socket, struct, sys, time
            name = sys.argv[1].encode()
            query = struct.pack('>HHHHHH', 0x1234, 0, 1, 0, 0, 0) + bytes([len(name)]) + name + b'\\x00\\x00\\x01\\x00\\x01'
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 1)
            s.settimeout(1.0)
            for attempt in range(2):
                started = time.monotonic()
                s.sendto(query, ('224.0.0.252', 5355))
                try:
                    data, peer = s.recvfrom(1500)
                except socket.timeout:
                    continue
                print(peer[0], socket.inet_ntoa(data[-4:]), '%.1f' % ((time.monotonic() - started) * 1000))
                break
            """
        let result = try self.client.run(["/usr/bin/python3", "-c", script, name], timeout: .seconds(10))
        let words = result.stdout.split(separator: " ")
        guard words.count >= 3 else { return nil }
        return (String(words[0]), String(words[1]), String(words[2]).trimmingCharacters(in: .whitespacesAndNewlines))
    }

    /// One question as a raw datagram from the client (broadcast allowed), and how long the first answer took in
    /// milliseconds, or nil when none came within a second.
    func exchange(_ payload: [UInt8], to address: String, port: Int) throws -> Double? {
        try self.exchange(payload, to: address, port: port, answer: false)?.milliseconds
    }

    /// The same, with the answer's text.
    func exchange(_ payload: [UInt8], to address: String, port: Int, answer: Bool) throws -> (
        milliseconds: Double, answer: String
    )? {
        let script = """
            import socket, sys, time
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            s.settimeout(2.0)
            started = time.monotonic()
            s.sendto(bytes.fromhex(sys.argv[1]), (sys.argv[2], int(sys.argv[3])))
            try:
                data, _ = s.recvfrom(65535)
                print('%.3f' % ((time.monotonic() - started) * 1000))
                print(data.decode('utf-8', 'replace').replace('\\n', ' '))
            except socket.timeout:
                print('none')
            """
        let hex = payload.map { String(format: "%02x", $0) }.joined()
        let result = try self.client.run(
            ["/usr/bin/python3", "-c", script, hex, address, "\(port)"], timeout: .seconds(10))
        let lines = result.stdout.split(separator: "\n", maxSplits: 1)
        guard let first = lines.first, let milliseconds = Double(first) else { return nil }
        return (milliseconds, lines.count > 1 ? String(lines[1]) : "")
    }

    /// ARP frames on the PC's link that give 192.0.2.2 with another MAC than its own: the proxy standing in for it.
    static func claimsByOthers(_ sleeper: SleepingHost) -> [CapturedFrame] {
        sleeper.capturedFrames.filter { frame in
            guard let ethernet = try? EthernetFrame(decoding: ByteBuffer(bytes: frame.bytes)),
                ethernet.etherType == .arp,
                let arp = try? ARPPacket(decoding: ethernet.payload)
            else { return false }
            return arp.senderIP == IPv4Address(192, 0, 2, 2) && arp.senderMAC != sleeper.host.mac
        }
    }

    @Test func aSleepingPCIsFoundByNetBIOSAndLLMNRAndSmbclientByNameWakesItOnly() throws {
        let servers = try FileServers(in: self.sleeper.host, directory: self.lab.directory)
        defer { servers.stop() }
        let daemon = try Daemon.start(
            in: self.proxy, stateDirectory: self.state, extra: ["--adopt", Self.mac, "--wake-rule", "tcp/445"])
        defer { daemon.stop() }
        // The PC starts (its names registered by broadcast), and the proxy asks it the rest. nmbd answers once its
        // names are registered: asked until it does (node status, as the proxy's checks ask it).
        let names = try WindowsNameServers(
            in: self.sleeper.host, name: "winpc", address: "192.0.2.2", directory: self.lab.directory)
        defer { names.stop() }
        let config = try self.clientConfig()
        let ready = try waitUntil(timeout: 30, interval: 0.5) {
            try self.client.run(
                ["/usr/bin/nmblookup", "-s", config, "-A", "192.0.2.2"], timeout: .seconds(15)
            ).stdout.contains("<20>")
        }
        #expect(ready, "nmbd never answered\n\(names.nmbd.output)")
        let learned = try self.waitForAdopted("awake", timeout: 40) {
            ($0.netbiosNames ?? []).contains("WINPC<20>") && $0.llmnrName == "winpc" && $0.wsdEndpoint != nil
        }
        #expect(
            (learned?.netbiosNames ?? []).contains("WORKGROUP<00> (group)") && learned?.llmnrName == "winpc",
            "\(String(describing: learned))\n\(daemon.output)")

        // Awake all along: nobody else claimed its address (the PC's own link shows every ARP broadcast)…
        #expect(Self.claimsByOthers(self.sleeper).isEmpty, "its address claimed while awake\n\(daemon.output)")
        // …and the daemon has no day for it (a host it never held has none), or one in which it never slept.
        let day = try self.ctl(["history", Self.mac]).history
        #expect(
            day.map { !$0.records.contains { $0.state == .asleep } } ?? true,
            "held while awake: \(String(describing: day))")

        // It falls asleep without a word: held within the idle check.
        names.stop()
        try self.sleeper.sleep()
        let asleep = try self.waitForAdopted("asleep", timeout: 40)
        #expect(asleep?.state == "asleep", "\(String(describing: asleep))\n\(daemon.output)")

        // nmblookup by name (its one broadcast query for WINPC<00>) and by node status.
        var started = Date()
        let byName = try self.client.run(["/usr/bin/nmblookup", "-s", config, "WINPC"], timeout: .seconds(20))
        print("windows lab: nmblookup WINPC answered in \(String(format: "%.3f", Date().timeIntervalSince(started))) s")
        #expect(byName.stdout.contains("192.0.2.2 WINPC<00>"), "\(byName)\n\(daemon.output)")
        started = Date()
        let status = try self.client.run(
            ["/usr/bin/nmblookup", "-s", config, "-A", "192.0.2.2"], timeout: .seconds(20))
        print("windows lab: nmblookup -A answered in \(String(format: "%.3f", Date().timeIntervalSince(started))) s")
        #expect(status.stdout.contains("WINPC") && status.stdout.contains("<20>"), "\(status)\n\(daemon.output)")
        #expect(status.stdout.contains("WORKGROUP") && status.stdout.contains("<GROUP>"), "\(status)")
        // LLMNR, as Windows 10 asks first.
        let resolved = try self.llmnr("WINPC")
        print("windows lab: LLMNR answered in \(resolved?.milliseconds ?? "-") ms")
        #expect(resolved?.source == "192.0.2.2" && resolved?.address == "192.0.2.2", "\(String(describing: resolved))")
        // The proxy's answer latencies, from the client's first packet (for docs/benchmarks.md).
        let latencies = [
            ("NetBIOS name query", try self.exchange(WindowsVectors.nameQuery, to: "192.0.2.255", port: 137)),
            ("NetBIOS node status", try self.exchange(WindowsVectors.nodeStatusQuery, to: "192.0.2.2", port: 137)),
            ("LLMNR A", try self.exchange(WindowsVectors.llmnrQuery, to: "224.0.0.252", port: 5355)),
        ]
        for (what, milliseconds) in latencies {
            #expect(milliseconds != nil, "\(what): no answer")
            print("windows lab: \(what) answered in \(milliseconds.map { String(format: "%.2f", $0) } ?? "-") ms")
        }
        // Explorer's Network view: a Probe for devices gets the PC's match, a Resolve its XAddrs, and the metadata
        // Get's connection is refused at once (no 10 s hang, no wake).
        let probe = try self.exchange(WindowsVectors.wsdProbe, to: "239.255.255.250", port: 3702, answer: true)
        #expect(probe?.answer.contains("ProbeMatches") == true, "\(String(describing: probe))\n\(daemon.output)")
        #expect(probe?.answer.contains(learned?.wsdEndpoint ?? "-") == true)
        print(
            "windows lab: WS-Discovery Probe answered in \(probe.map { String(format: "%.0f", $0.milliseconds) } ?? "-") ms"
        )
        let resolve = try self.exchange(
            Array(
                String(decoding: WindowsVectors.wsdResolve, as: UTF8.self).replacing(
                    "urn:uuid:6bd51d6a-0000-4000-8000-025749000002", with: learned?.wsdEndpoint ?? "-"
                ).utf8), to: "239.255.255.250", port: 3702, answer: true)
        #expect(resolve?.answer.contains("http://192.0.2.2:5357/") == true, "\(String(describing: resolve))")
        let refused = try self.client.run(
            [
                "/usr/bin/python3", "-c",
                "import socket, time; t = time.monotonic()\ntry:\n socket.create_connection(('192.0.2.2', 5357), 10)\nexcept ConnectionRefusedError:\n print('refused %.1f' % ((time.monotonic() - t) * 1000))",
            ], timeout: .seconds(15))
        #expect(refused.stdout.hasPrefix("refused"), "\(refused)")
        print("windows lab: metadata connection \(refused.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ms")
        // A dashboard sees the same: every kind of answer counted, the refusal too (the counts are published with
        // the batch that answered, so they are read until they show).
        let expected: [String: Double] = [
            #"sleepproxy_windows_answers_total{kind="netbios_name"}"#: 2,
            #"sleepproxy_windows_answers_total{kind="netbios_node_status"}"#: 2,
            #"sleepproxy_windows_answers_total{kind="llmnr"}"#: 2,
            #"sleepproxy_windows_answers_total{kind="wsd_match"}"#: 2,
            "sleepproxy_windows_metadata_refused_total": 1,
        ]
        var samples: [String: Double] = [:]
        let counted = try waitUntil(timeout: 10, interval: 0.2) {
            samples = try self.scrape()
            return expected.allSatisfy { (samples[$0.key] ?? 0) >= $0.value }
        }
        #expect(counted, "\(samples.filter { $0.key.hasPrefix("sleepproxy_windows") })")
        // Finding it woke nothing; nor does Home Assistant's nmap tracker (from another machine: a scanner's
        // source wakes nothing for 10 minutes, docs/waking.md).
        let scanner = try self.lab.addHost("scanner", mac: MACAddress("02:53:50:00:00:60")!, ipv4: ["192.0.2.60/24"])
        _ = try scanner.run(
            ["/usr/bin/nmap", "-n", "--host-timeout", "5s", "-sS", "-F", "-T4", "192.0.2.2"], timeout: .seconds(60))
        #expect(self.sleeper.magicPackets.isEmpty, "finding it or scanning it woke it\n\(daemon.output)")

        // smbclient //WINPC by name: resolved through the proxy, woken, the share listed once it is up.
        started = Date()
        let smb = try self.client.spawn(
            ["/usr/bin/smbclient", "-s", config, "//WINPC/share", "-N", "-t", "60", "-c", "ls"], logName: "smbclient")
        defer { smb.stop() }
        #expect(!self.sleeper.waitForMagicPackets(1, timeout: 10).isEmpty, "no magic packet\n\(daemon.output)")
        try self.sleeper.wake()
        #expect(smb.waitForOutput("hello.txt", timeout: 30), "\(smb.output)\n\(daemon.output)")
        let listed = Date().timeIntervalSince(started)
        print("windows lab: \\\\WINPC to the share listed in \(String(format: "%.2f", listed)) s")
        #expect(self.sleeper.magicPackets.count >= 1)
    }
}
