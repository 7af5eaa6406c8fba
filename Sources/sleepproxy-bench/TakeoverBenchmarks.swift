import CSleepProxyLinux
import Foundation
import NIOCore
import SleepProxyCore
import SleepProxyTestSupport
import SleepProxyWire

#if canImport(Glibc)
    import Glibc
#endif

/// The packet side measured in the lab (issue 5 §9): ARP request → the proxy's reply, SYN → magic packet, and a
/// client's connect() to a host that wakes half a second after the first magic packet. Times are taken in the
/// client's namespace from one capture thread: what a client on the LAN would see.
enum TakeoverBenchmarks {
    static let hostCount = 100
    static let proxyMAC = MACAddress("02:53:50:00:00:01")!
    static let querierMAC = MACAddress("02:53:50:00:00:20")!

    static func address(_ n: Int) -> IPv4Address { IPv4Address(192, 0, 2, UInt8(100 + n)) }
    static func mac(_ n: Int) -> MACAddress { MACAddress(rawValue: 0x0253_5000_3000 + UInt64(n)) }

    static func percentile(_ values: [Double], _ p: Double) -> Double {
        let sorted = values.sorted()
        return sorted.isEmpty ? .nan : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
    }

    static func runLab(daemon: URL) throws {
        guard Command.canBuildNetworks else {
            print("Takeover benchmark: skipped (needs root, iproute2 and util-linux)")
            return
        }
        guard FileManager.default.isExecutableFile(atPath: daemon.path) else {
            print("Takeover benchmark: skipped (\(daemon.path) not built; run swift build -c release)")
            return
        }
        print("Address takeover and wake in a lab: \(hostCount) sleeping hosts")
        let lab = try LabNetwork()
        defer { lab.close() }
        let server = try lab.addHost("server", mac: proxyMAC, ipv4: ["192.0.2.1/24"], ipv6: ["2001:db8::1/64"])
        let sleepers = try lab.addHost("sleepers", mac: MACAddress("02:53:50:00:00:02")!, ipv4: ["192.0.2.2/24"])
        let querier = try lab.addHost("querier", mac: querierMAC, ipv4: ["192.0.2.20/24"])
        let process = try server.spawn(
            [
                daemon.path, "--interface", "eth0", "--state-directory",
                lab.directory.appendingPathComponent("state").path, "--control-socket",
                lab.directory.appendingPathComponent("control.sock").path, "--log-level", "warning",
            ], logName: "bench-takeover")
        defer { process.stop() }
        usleep(500_000)

        // Each host registers from its own address, then "sleeps" (the address leaves). The hosts share one
        // namespace and so one MAC, which the proxy would rightly take for a third machine claiming their
        // addresses; static neighbour entries keep both kernels from sending ARP for them meanwhile.
        for n in 0..<hostCount { try sleepers.addAddress("\(address(n))/24") }
        try sleepers.namespace.check([
            "ip", "neigh", "replace", "192.0.2.1", "lladdr", proxyMAC.description, "dev", "eth0", "nud", "permanent",
        ])
        let neighbours = lab.directory.appendingPathComponent("neighbours")
        try (0..<hostCount).map { "neigh replace \(address($0)) lladdr 02:53:50:00:00:02 dev eth0 nud permanent\n" }
            .joined().write(to: neighbours, atomically: true, encoding: .utf8)
        try server.namespace.check(["ip", "-batch", neighbours.path])
        try sleepers.namespace.inside { () throws in
            for n in 0..<hostCount {
                let payload = SampleRegistration.message(
                    id: UInt16(n), mac: mac(n), host: try DNSName(parsing: "sleeper\(n).local."),
                    addresses: [.v4(address(n))], services: [("Web \(n)._http._tcp", 8080)]
                ).encoded(options: .appleUpdate)
                let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
                defer { close(fd) }
                var local = sockaddr_in()
                local.sin_family = sa_family_t(AF_INET)
                local.sin_addr.s_addr = address(n).rawValue.bigEndian
                var proxy = sockaddr_in()
                proxy.sin_family = sa_family_t(AF_INET)
                proxy.sin_port = UInt16(5599).bigEndian
                proxy.sin_addr.s_addr = IPv4Address(192, 0, 2, 1).rawValue.bigEndian
                var timeout = timeval(tv_sec: 2, tv_usec: 0)
                setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                _ = withUnsafePointer(to: &local) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                    }
                }
                _ = payload.withUnsafeBytes { raw in
                    withUnsafePointer(to: &proxy) {
                        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                            sendto(fd, raw.baseAddress, raw.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                        }
                    }
                }
                var reply = [UInt8](repeating: 0, count: 512)
                guard recv(fd, &reply, reply.count, 0) >= 4, reply[3] == 0 else {
                    throw CommandError("sleeper \(n) was not registered")
                }
            }
        }
        for n in 0..<hostCount { try sleepers.removeAddress("\(address(n))/24") }
        usleep(6_000_000)  // probes (1 + 3 s) and the first announcements

        let capture = try FrameCapture(in: querier.namespace)
        defer { capture.stop() }
        // ARP: one request at a time, each answered before the next.
        var arpLatencies: [Double] = []
        let rounds = 10
        for round in 0..<rounds {
            for n in 0..<hostCount {
                let request = TestFrames.arpRequest(
                    from: querierMAC, senderIP: IPv4Address(192, 0, 2, 20), for: address(n))
                let before = capture.count
                try querier.namespace.sendFrame(request)
                let deadline = Date(timeIntervalSinceNow: 1)
                var sentAt: Date? = nil
                var repliedAt: Date? = nil
                while repliedAt == nil, Date() < deadline {
                    for frame in capture.captured(from: before) {
                        guard let ethernet = try? EthernetFrame(decoding: ByteBuffer(bytes: frame.bytes)),
                            ethernet.etherType == .arp,
                            let arp = try? ARPPacket(decoding: ethernet.payload)
                        else { continue }
                        if frame.packetType == 4, arp.operation == .request, arp.targetIP == address(n) {
                            sentAt = frame.at
                        }
                        if frame.packetType != 4, arp.operation == .reply, arp.senderIP == address(n),
                            arp.senderMAC == proxyMAC
                        {
                            repliedAt = frame.at
                        }
                    }
                    if repliedAt == nil { usleep(1000) }
                }
                if let sentAt, let repliedAt { arpLatencies.append(repliedAt.timeIntervalSince(sentAt) * 1000) }
            }
            _ = round
        }
        print(
            String(
                format:
                    "  ARP request → proxy's reply: %d of %d answered, p50 %.3f ms, p99 %.3f ms  target p99 ≤ 1 ms: %@",
                arpLatencies.count, rounds * hostCount, percentile(arpLatencies, 0.5), percentile(arpLatencies, 0.99),
                percentile(arpLatencies, 0.99) <= 1 ? "met" : "NOT MET"))

        // SYN → magic packet: one SYN per sleeping host.
        var wakeLatencies: [Double] = []
        for n in 0..<hostCount {
            let before = capture.count
            try querier.namespace.sendFrame(
                TestFrames.tcp(
                    from: querierMAC, to: proxyMAC, source: IPAddress("192.0.2.20")!, destination: .v4(address(n)),
                    sourcePort: UInt16(40000 + n), port: 8080))
            let deadline = Date(timeIntervalSinceNow: 3)
            var sentAt: Date? = nil
            var magicAt: Date? = nil
            while magicAt == nil, Date() < deadline {
                for frame in capture.captured(from: before) {
                    guard let ethernet = try? EthernetFrame(decoding: ByteBuffer(bytes: frame.bytes)) else { continue }
                    if frame.packetType == 4, ethernet.etherType == .ipv4 { sentAt = frame.at }
                    if frame.packetType != 4, ethernet.etherType == .wakeOnLAN,
                        MagicPacket.search(in: Array(ethernet.payload.readableBytesView)) == mac(n)
                    {
                        magicAt = frame.at
                        break
                    }
                }
                if magicAt == nil { usleep(2000) }
            }
            if let sentAt, let magicAt { wakeLatencies.append(magicAt.timeIntervalSince(sentAt) * 1000) }
        }
        print(
            String(
                format: "  SYN → magic packet on the wire: %d of %d, p50 %.3f ms, p99 %.3f ms  target p99 ≤ 1 ms: %@",
                wakeLatencies.count, hostCount, percentile(wakeLatencies, 0.5), percentile(wakeLatencies, 0.99),
                percentile(wakeLatencies, 0.99) <= 1 ? "met" : "NOT MET"))
        if ProcessInfo.processInfo.environment["BENCH_DEBUG"] != nil { print(process.output) }
        try self.connectBenchmark(lab: lab, server: server, querier: querier)
    }

    /// connect() from a client to a sleeping host that wakes 0.5 s after the first magic packet.
    static func connectBenchmark(lab: LabNetwork, server: LabHost, querier: LabHost) throws {
        let sleeperMAC = MACAddress("02:53:50:00:00:05")!
        let sleeper = try SleepingHost(
            lab: lab, name: "sleeper", mac: sleeperMAC, ipv4: ["192.0.2.5/24"], servicePort: 8080)
        defer { sleeper.close() }
        let script = """
            import socket, sys, time
            s = socket.socket(); s.settimeout(5); start = time.monotonic()
            s.connect(('192.0.2.5', 8080)); print('connected %.4f' % (time.monotonic() - start), flush=True)
            """
        var totals: [Double] = []
        for round in 0..<3 {
            let message = SampleRegistration.message(
                id: 0x7000 + UInt16(round), mac: sleeperMAC, sequence: UInt8(round), host: "bench-sleeper.local.",
                addresses: [IPAddress("192.0.2.5")!], services: [("Web._http._tcp", 8080)])
            let payload = message.encoded(options: .appleUpdate).map { String(format: "%02x", $0) }.joined()
            let sender =
                "import socket,binascii,sys; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(('192.0.2.5',0)); s.settimeout(2); s.sendto(binascii.unhexlify(sys.argv[1]),('192.0.2.1',5599)); print(len(s.recv(512)))"
            let registered = try sleeper.host.run(["/usr/bin/python3", "-c", sender, payload])
            guard registered.succeeded else { throw CommandError("the bench sleeper did not register: \(registered)") }
            // The client knows the sleeper's MAC from before it slept.
            _ = try querier.run([
                "/usr/bin/python3", "-c", "import socket; socket.create_connection(('192.0.2.5', 8080), 2).close()",
            ])
            try sleeper.sleep()
            usleep(5_500_000)
            let before = sleeper.magicPackets.count
            let client = try querier.spawn(["/usr/bin/python3", "-c", script], logName: "connect-bench-\(round)")
            defer { client.stop() }
            let packets = sleeper.waitForMagicPackets(before + 1, timeout: 5)
            guard let first = packets.dropFirst(before).first else {
                throw CommandError("no magic packet in round \(round)")
            }
            let wait = 0.5 - Date().timeIntervalSince(first.frame.at)
            if wait > 0 { usleep(UInt32(wait * 1_000_000)) }
            try sleeper.wake()
            guard client.waitForOutput("connected", timeout: 5) else {
                throw CommandError("connect did not complete in round \(round): \(client.output)")
            }
            let line = client.output.split(separator: "\n").first { $0.hasPrefix("connected") } ?? ""
            if let seconds = Double(line.split(separator: " ").last ?? "") { totals.append(seconds) }
        }
        print(
            String(
                format:
                    "  connect() to a host that wakes 0.5 s after the first magic packet: %@ s (worst %.3f s)  target ≤ 0.6 s: %@",
                totals.map { String(format: "%.3f", $0) }.joined(separator: ", "), totals.max() ?? .nan,
                (totals.max() ?? 99) <= 0.6 ? "met" : "NOT MET"))
    }
}
