import Foundation
import SleepProxyCore
import SleepProxyTestSupport
import SleepProxyWire
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// sleepproxyd in one lab host, a sleeping client in another, real sockets between them.
@Suite("Registration over real sockets", .lab(.namespaces, serialized: true))
final class RegistrationSocketTests {
    let lab: LabNetwork
    let proxy: LabHost
    let sleeper: LabHost
    let state: URL

    init() throws {
        self.lab = try LabNetwork()
        self.proxy = try self.lab.addHost("proxy", mac: MACAddress("02:53:50:00:00:01")!, ipv4: ["192.0.2.1/24"])
        self.sleeper = try self.lab.addHost("sleeper", mac: MACAddress("02:53:50:00:00:02")!, ipv4: ["192.0.2.2/24"])
        self.state = self.lab.directory.appendingPathComponent("state")
    }

    deinit { self.lab.close() }

    static func vector() throws -> [UInt8] {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent(
            "../SleepProxyWireTests/Fixtures/apple-posix-registration.bin")
        return Array(try Data(contentsOf: url))
    }

    /// docs/protocol.md §3.6 reply for a 7200 s lease, with `id`.
    static func expectedReply(id: UInt16) -> [UInt8] {
        [
            UInt8(id >> 8), UInt8(id & 0xFF), 0xA8, 0x00, 0, 0, 0, 0, 0, 0, 0, 1,
            0x00, 0x00, 0x29, 0x05, 0xA0, 0x00, 0x00, 0x11, 0x94, 0x00, 0x08, 0x00, 0x02, 0x00, 0x04, 0x00, 0x00, 0x1C,
            0x20,
        ]
    }

    @Test func appleVectorFrom5353AndFromAnEphemeralPortOverIPv4() throws {
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        defer { daemon.stop() }
        // The registration sockets hold a burst of a few hundred UPDATEs (the kernel reports twice the size set).
        let sockets = try self.proxy.run(["ss", "-uamnH", "sport = :5599"])
        let buffers = sockets.stdout.split(separator: ",").compactMap {
            $0.hasPrefix("rb") ? Int($0.dropFirst(2)) : nil
        }
        #expect(buffers.count == 2 && buffers.allSatisfy { $0 >= 2 << 20 }, "\(sockets.stdout)")
        var second = try Self.vector()
        second[0] = 0x42
        second[1] = 0x43
        let fromMDNSPort = try UDPClient.exchange(
            in: self.sleeper, to: "192.0.2.1", port: 5599, from: "192.0.2.2", sourcePort: 5353,
            payloads: [try Self.vector()])
        #expect(fromMDNSPort == [Self.expectedReply(id: 0xDC65)])
        let fromEphemeral = try UDPClient.exchange(
            in: self.sleeper, to: "192.0.2.1", port: 5599, from: "192.0.2.2", payloads: [second])
        #expect(fromEphemeral == [Self.expectedReply(id: 0x4243)])
        #expect(Daemon.waitForHosts(proxy: self.proxy, stateDirectory: self.state) { $0["vm.local."] != nil })
    }

    @Test func appleVectorOverIPv6LinkLocal() throws {
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        defer { daemon.stop() }
        // The vector claims fe80::53:50ff:fe00:2, the sleeper's own link-local address, and is sent from it.
        let replies = try UDPClient.exchange(
            in: self.sleeper, to: self.proxy.linkLocal.description, port: 5599,
            from: self.sleeper.linkLocal.description, sourcePort: 5353, payloads: [try Self.vector()])
        #expect(replies == [Self.expectedReply(id: 0xDC65)])
    }

    @Test func aRegistrationLargerThanAnMTUIsReadWhole() throws {
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        defer { daemon.stop() }
        // 30 services: about 4 KB, more than NIO's default 2048-byte datagram buffer.
        let services = (0..<30).map { ("Service \($0) with a long descriptive name._http._tcp", UInt16(8000 + $0)) }
        let message = SampleRegistration.message(
            id: 0x77, mac: self.sleeper.mac, addresses: [IPAddress("192.0.2.2")!], services: services)
        let bytes = message.encoded(options: .appleUpdate)
        #expect(bytes.count > 3000)
        let replies = try UDPClient.exchange(
            in: self.sleeper, to: "192.0.2.1", port: 5599, from: "192.0.2.2", payloads: [bytes])
        #expect(replies.first??.prefix(4) == [0x00, 0x77, 0xA8, 0x00])
        // Identical records (30 × "_services._dns-sd._udp PTR _http._tcp") are stored once.
        let distinct = Set(message.updates.map { "\($0.name)|\($0.rdata)" }).count
        #expect(distinct == message.updates.count - 29)
        #expect(Daemon.status(proxy: self.proxy, stateDirectory: self.state)?.records == distinct)
    }

    /// A registration of the sleeper's with a Lease but no Owner option: malformed, so answered with FORMERR.
    func withoutOwner(id: UInt16) -> DNSMessage {
        var message = SampleRegistration.message(id: id, mac: self.sleeper.mac, addresses: [IPAddress("192.0.2.2")!])
        message.additionals = [
            .opt(EDNSHeader(udpPayloadSize: 1440), options: [.updateLease(UpdateLeaseOption(lease: 7200))])
        ]
        return message
    }

    @Test func malformedGetsFormErrAndRefusedGetsSilence() throws {
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        defer { daemon.stop() }
        let noOwner = self.withoutOwner(id: 7)
        // Claims 192.0.2.77 but is sent from 192.0.2.2: refused by policy, so no reply.
        let stranger = SampleRegistration.message(id: 8, mac: self.sleeper.mac, addresses: [IPAddress("192.0.2.77")!])
        let replies = try UDPClient.exchange(
            in: self.sleeper, to: "192.0.2.1", port: 5599, from: "192.0.2.2", timeout: 1,
            payloads: [noOwner.encoded(), stranger.encoded()])
        #expect(replies == [[0, 7, 0xA8, 0x01, 0, 0, 0, 0, 0, 0, 0, 0], nil])
        let refusals = Daemon.status(proxy: self.proxy, stateDirectory: self.state)?.refusals ?? [:]
        #expect(refusals["sourceNotClaimed"] == 1 && refusals["malformed-missingOwner"] == 1, "\(refusals)")
    }

    /// A flood of refused registrations (a storm against a full proxy, a misconfigured client in a loop) is
    /// counted in full but logged within a budget: at most `LineBudget.linesPerWindow` lines and one saying the
    /// rest are counted, not a line per datagram.
    @Test func aFloodOfRefusalsIsCountedInFullAndLoggedWithinItsBudget() throws {
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        defer { daemon.stop() }
        let stranger = SampleRegistration.message(id: 9, mac: self.sleeper.mac, addresses: [IPAddress("192.0.2.77")!])
        let hex = stranger.encoded().map { String(format: "%02x", $0) }.joined()
        let flood =
            "import socket,sys; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); [s.sendto(bytes.fromhex(sys.argv[1]), ('192.0.2.1', 5599)) for _ in range(60)]"
        #expect(try self.sleeper.run(["/usr/bin/python3", "-c", flood, hex]).succeeded)
        var refusals = 0
        waitUntil(timeout: 10, interval: 0.2) {
            // The first 32 are refused for their claim, the rest by the per-source rate limit.
            refusals = Daemon.status(proxy: self.proxy, stateDirectory: self.state)?.refusals.values.reduce(0, +) ?? 0
            return refusals >= 60
        }
        #expect(refusals == 60)
        for reason in ["sourceNotClaimed", "rateLimited"] {
            let lines = daemon.output.split(separator: "\n").filter { $0.contains("refused (\(reason))") }
            #expect(lines.count >= 1 && lines.count <= LineBudget.linesPerWindow + 1, "\(reason): \(lines.count) lines")
        }
    }

    /// A datagram from UDP source port 0 (any machine on the link can send one through a raw socket) gets an
    /// answer the kernel refuses to send (EINVAL). Written through NIO, that refusal closes the socket for good
    /// (docs/linux.md §1.10): the proxy would take no registration, and answer no mDNS question, until restarted.
    /// It must drop that one reply and go on.
    @Test func aDatagramFromPortZeroLeavesTheSocketsServing() throws {
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        defer { daemon.stop() }
        let noOwner = self.withoutOwner(id: 9)
        // A registration (its reply a FORMERR) and a legacy mDNS question for the proxy's own service, each from
        // port 0.
        var question = DNSMessage(id: 0x0A0B)
        question.questions = [DNSQuestion(name: try DNSName(parsing: "_sleep-proxy._udp.local."), type: .ptr)]
        // Ready: the proxy answers for its own service once it has probed its name.
        let readyDeadline = Date(timeIntervalSinceNow: 10)
        var ready = false
        while !ready, Date() < readyDeadline {
            let answers = try UDPClient.exchange(
                in: self.sleeper, to: "192.0.2.1", port: 5353, from: "192.0.2.2", timeout: 1,
                payloads: [question.encoded()])
            ready = answers.first??.prefix(2) == [0x0A, 0x0B]
        }
        #expect(ready, "the proxy never answered a legacy question")
        for (port, payload) in [(5599, noOwner.encoded()), (5353, question.encoded())] {
            let sent = try self.sleeper.run([
                "/usr/bin/python3", "-c", Self.fromPortZeroScript, "192.0.2.2", "192.0.2.1", "\(port)",
                payload.map { String(format: "%02x", $0) }.joined(),
            ])
            #expect(sent.stdout.contains("sent"), "\(sent)")
        }
        // Still taking registrations, and still answering questions.
        let replies = try UDPClient.exchange(
            in: self.sleeper, to: "192.0.2.1", port: 5599, from: "192.0.2.2", timeout: 2,
            payloads: [noOwner.encoded()])
        #expect(replies == [[0, 9, 0xA8, 0x01, 0, 0, 0, 0, 0, 0, 0, 0]], "\(daemon.output.suffix(2000))")
        let answers = try UDPClient.exchange(
            in: self.sleeper, to: "192.0.2.1", port: 5353, from: "192.0.2.2", timeout: 2,
            payloads: [question.encoded()])
        #expect(answers.first??.prefix(2) == [0x0A, 0x0B], "no answer to a legacy question after the port-0 one")
        #expect(daemon.isRunning)
    }

    /// Sends one UDP datagram with source port 0 through a raw socket: source, destination, port, payload (hex).
    static let fromPortZeroScript = """
        import socket, struct, sys
        payload = bytes.fromhex(sys.argv[4])
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_UDP)
        s.bind((sys.argv[1], 0))
        # Checksum 0: none, which IPv4 allows.
        s.sendto(struct.pack('!HHHH', 0, int(sys.argv[3]), 8 + len(payload), 0) + payload, (sys.argv[2], 0))
        print('sent', flush=True)
        """

    @Test func startupProblemsAreOneClearSentence() throws {
        let unknown = try self.proxy.run([
            Daemon.executable.path, "--interface", "wlan9", "--state-directory", self.state.path,
        ])
        #expect(unknown.status != 0)
        #expect(unknown.stderr.contains("unknown interface wlan9"))
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        defer { daemon.stop() }
        // A second daemon on the same state directory, or the same port, is refused with the reason.
        let sameState = try self.proxy.run(
            [Daemon.executable.path, "--interface", "eth0", "--state-directory", self.state.path], timeout: .seconds(15)
        )
        #expect(sameState.status != 0 && sameState.stderr.contains("in use by another sleepproxyd"), "\(sameState)")
        // Without CAP_NET_RAW (dropped from every set), a clear sentence about the capability and --no-takeover.
        let unprivileged = try self.proxy.run(
            [
                "setpriv", "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-net_raw", "--",
                Daemon.executable.path, "--interface", "eth0", "--state-directory", self.state.path + "-3",
                "--control-socket", self.state.path + "-3/control.sock",
            ], timeout: .seconds(15))
        #expect(
            unprivileged.status != 0 && unprivileged.stderr.contains("CAP_NET_RAW")
                && unprivileged.stderr.contains("--no-takeover"), "\(unprivileged)")
        let samePort = try self.proxy.run(
            [
                Daemon.executable.path, "--interface", "eth0", "--state-directory", self.state.path + "-2",
                "--control-socket", self.state.path + "-2/control.sock",
            ], timeout: .seconds(15))
        #expect(samePort.status != 0 && samePort.stderr.contains("another program already uses it"), "\(samePort)")
    }

    /// A proxy machine that forwards (a router, or Docker's ip_forward) would send ICMP redirects to clients of
    /// sleeping hosts: the daemon says so at start, in its status (where `sleepproxyctl status` and the page show
    /// it) with the sysctls that stop them, and is quiet once they are set.
    @Test func forwardingThatWouldSendRedirectsIsReportedAtStart() throws {
        try self.proxy.namespace.check([
            "sysctl", "-qw", "net.ipv4.conf.all.forwarding=1", "net.ipv6.conf.eth0.forwarding=1",
        ])
        // Ready means its start-up checks are over: they run before it opens its control socket.
        let warned = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        let all = Daemon.status(proxy: self.proxy, stateDirectory: self.state)?.warnings ?? []
        #expect(
            all.contains { $0.contains("net.ipv4.conf.all.send_redirects=0 net.ipv4.conf.eth0.send_redirects=0") },
            "\(all)")
        #expect(all.contains { $0.hasPrefix("IPv6 forwarding is on for eth0") }, "\(all)")
        #expect(all.count == 2, "\(all)")
        let printed = try self.proxy.run([
            Daemon.sibling("sleepproxyctl"), "status", "--socket",
            self.state.appendingPathComponent("control.sock").path,
        ])
        #expect(printed.stdout.contains("warning:       IPv6 forwarding is on for eth0"), "\(printed)")
        warned.stop()
        // send_redirects off for `all` but not for eth0 still redirects (the kernel ORs them); both off is quiet.
        try self.proxy.namespace.check([
            "sysctl", "-qw", "net.ipv4.conf.all.send_redirects=0", "net.ipv6.conf.eth0.forwarding=0",
        ])
        let half = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        let one = Daemon.status(proxy: self.proxy, stateDirectory: self.state)?.warnings ?? []
        #expect(one.count == 1 && one[0].hasPrefix("IPv4 forwarding is on for eth0"), "\(one)")
        half.stop()
        try self.proxy.namespace.check(["sysctl", "-qw", "net.ipv4.conf.eth0.send_redirects=0"])
        let quiet = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        defer { quiet.stop() }
        let none = Daemon.status(proxy: self.proxy, stateDirectory: self.state)?.warnings
        #expect(none == [], "\(String(describing: none))")
    }

    /// The state directory is a 64 KiB tmpfs (in a mount namespace of the daemon's own), so the journal fills
    /// up: a registration that cannot be made durable must not be acknowledged, and the proxy keeps serving what
    /// is on disk instead of what it could not write.
    @Test func aRegistrationThatCannotBeWrittenIsNotAcknowledged() throws {
        let state = self.lab.directory.appendingPathComponent("small-state")
        try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true)
        // The control socket lives outside the tmpfs, which only the daemon's mount namespace sees.
        let control = self.lab.directory.appendingPathComponent("full-disk-control")
        try FileManager.default.createDirectory(at: control, withIntermediateDirectories: true)
        let script =
            "mount -t tmpfs -o size=64k sleepproxy-test \(state.path) && exec \(Daemon.executable.path) --interface eth0 --state-directory \(state.path) --control-socket \(control.path)/control.sock --log-level info"
        let daemon = try self.proxy.spawn(
            ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script], logName: "full-disk")
        defer { daemon.stop() }
        #expect(Daemon.answers(in: self.proxy, stateDirectory: control, timeout: 15), "\(daemon.output)")
        #expect(Daemon.status(proxy: self.proxy, stateDirectory: control)?.warnings == [])
        // Large registrations (about 4 KB each, 30 services) from one host: each renewal appends a whole host.
        let services = (0..<30).map { ("Service \($0) with a long descriptive name._http._tcp", UInt16(8000 + $0)) }
        var replies: [[UInt8]?] = []
        for round in 0..<6 {
            let payloads = (0..<4).map { n in
                SampleRegistration.message(
                    id: UInt16(round * 4 + n), mac: self.sleeper.mac, addresses: [IPAddress("192.0.2.2")!],
                    services: services
                ).encoded(options: .appleUpdate)
            }
            replies += try UDPClient.exchange(
                in: self.sleeper, to: "192.0.2.1", port: 5599, from: "192.0.2.2", timeout: 1, payloads: payloads)
        }
        let answered = replies.filter { $0 != nil }.count
        #expect(answered > 0 && answered < replies.count, "\(answered) of \(replies.count) answered")
        // Once unanswered, never answered again while the disk stays full (no reply ever comes before durability).
        if let firstSilence = replies.firstIndex(where: { $0 == nil }) {
            #expect(replies[firstSilence...].allSatisfy { $0 == nil })
        }
        // What the operator sees: the state directory named as the problem, and the one host that is on disk.
        let status = Daemon.status(proxy: self.proxy, stateDirectory: control)
        #expect(
            status?.warnings?.contains { $0.contains("\(state.path) cannot be written") } == true,
            "\(String(describing: status?.warnings))")
        #expect(status?.hosts == 1, "\(String(describing: status))")
        // The log stays bounded however often the clients retry: one error for the full disk, not one a batch
        // (docs/scale.md, logging).
        let errors = daemon.output.split(separator: "\n").filter {
            $0.contains(" error ") && $0.contains("registrations.journal")
        }
        #expect(errors.count == 1, "\(errors)")

        // Room again (the administrator grew the file system): the next registration is written and acknowledged,
        // and the warning is gone. The spawned process is the daemon itself (every wrapper execs), in the mount
        // namespace that holds the tmpfs.
        let exe = try FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(daemon.pid)/exe")
        try #require(exe.hasSuffix("/sleepproxyd"), "\(exe)")
        _ = try Command.run(
            ["nsenter", "-t", "\(daemon.pid)", "-m", "--", "mount", "-o", "remount,size=4m", state.path])
        let again = SampleRegistration.message(
            id: 100, mac: self.sleeper.mac, addresses: [IPAddress("192.0.2.2")!], services: services
        ).encoded(options: .appleUpdate)
        let acknowledged = try UDPClient.exchange(
            in: self.sleeper, to: "192.0.2.1", port: 5599, from: "192.0.2.2", timeout: 2, payloads: [again])
        #expect(acknowledged.first??.isEmpty == false, "not acknowledged with room on the disk")
        #expect(Daemon.status(proxy: self.proxy, stateDirectory: control)?.warnings == [])
        #expect(daemon.output.contains("can be written again"), "\(daemon.output)")
    }

    /// Registrations stream in from 60 hosts; the daemon is killed with SIGKILL in the middle. Every registration
    /// that was acknowledged before the kill must be served again after a restart, with its remaining lease.
    @Test func sigkillLosesNothingAcknowledged() throws {
        let hosts = 60
        for n in 0..<hosts { try self.sleeper.addAddress("192.0.2.\(100 + n)/24") }
        let payloads = (0..<hosts).map { n in
            SampleRegistration.message(
                id: UInt16(n), mac: MACAddress(rawValue: 0x0253_5000_0100 + UInt64(n)), lease: 7200,
                host: try! DNSName(parsing: "host\(n).local."), addresses: [IPAddress("192.0.2.\(100 + n)")!]
            ).encoded(options: .appleUpdate)
        }
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        // One client process per host, each sending from its own address, all started at once.
        let script = self.lab.directory.appendingPathComponent("burst.sh")
        var lines = ["#!/bin/sh"]
        for (n, payload) in payloads.enumerated() {
            let hex = payload.map { String(format: "%02x", $0) }.joined()
            lines.append(
                "(sleep 0.0$((\(n) % 10)); /usr/bin/python3 -c \"$CLIENT\" 192.0.2.1 5599 192.0.2.\(100 + n) 0 2 \(hex) | sed 's/^/\(n) /') &"
            )
        }
        lines.append("wait")
        try lines.joined(separator: "\n").write(to: script, atomically: true, encoding: .utf8)
        let clients = try self.sleeper.spawn(
            ["env", "CLIENT=\(UDPClient.script)", "/bin/sh", script.path], logName: "burst")
        // Kill the daemon once some, but not all, have been acknowledged.
        waitUntil(timeout: 20, interval: 0.002) { clients.output.split(separator: "\n").count >= 5 }
        kill(daemon.pid, SIGKILL)
        let killedAt = Date()
        clients.stop(signal: 0, timeout: 15)
        waitUntil(timeout: max(0, 15 - Date().timeIntervalSince(killedAt)), interval: 0.02) { !clients.isRunning }
        let acknowledged = Set(
            clients.output.split(separator: "\n").compactMap { line -> Int? in
                let parts = line.split(separator: " ")
                return parts.count == 2 && parts[1] != "timeout" ? Int(parts[0]) : nil
            })
        #expect(!acknowledged.isEmpty)

        let restarted = try Daemon.start(in: self.proxy, stateDirectory: self.state, logName: "sleepproxyd-after-kill")
        defer { restarted.stop() }
        let restored = Dictionary(
            uniqueKeysWithValues: restarted.output.split(separator: "\n").compactMap { line -> (Int, Int)? in
                // "state: restored host7.local. (…), lease ends in 7198 s"
                guard let range = line.range(of: "state: restored host") else { return nil }
                let rest = line[range.upperBound...]
                guard let n = Int(rest.prefix { $0.isNumber }),
                    let lease = line.split(separator: " ").dropLast().last.flatMap({ Int($0) })
                else { return nil }
                return (n, lease)
            })
        for n in acknowledged {
            #expect(restored[n] != nil, "host \(n) was acknowledged but not restored")
            if let lease = restored[n] { #expect((7200 - 30)...7200 ~= lease, "host \(n) restored with \(lease) s") }
        }
        print("crash test: \(acknowledged.count) of \(hosts) acknowledged before SIGKILL, \(restored.count) restored")
    }
}
