import CSleepProxyLinux
import Foundation
import NIOCore
import SleepProxyCore
import SleepProxySystem
import SleepProxyTestSupport
import SleepProxyWire

#if canImport(Glibc)
    import Glibc
#endif

/// The packet side measured in the lab (docs/benchmarks.md): ARP request → the proxy's reply, SYN → magic packet, and a
/// client's connect() to a host that wakes half a second after the first magic packet. Times are taken in the
/// client's namespace from one capture thread: what a client on the LAN would see.
enum TakeoverBenchmarks {
    static let hostCount = 100
    static let proxyMAC = MACAddress("02:53:50:00:00:01")!
    static let querierMAC = MACAddress("02:53:50:00:00:20")!

    static func address(_ n: Int) -> IPv4Address { IPv4Address(192, 0, 2, UInt8(100 + n)) }
    static func mac(_ n: Int) -> MACAddress { MACAddress(rawValue: 0x0253_5000_3000 + UInt64(n)) }

    static func runLab(daemon: URL) throws {
        guard labCanRun("Takeover benchmark", daemon: daemon) else { return }
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
                let fd = socket(AF_INET, PosixSocket.datagram, 0)
                defer { close(fd) }
                let proxy = PosixSocketAddress(.v4(IPv4Address(192, 0, 2, 1)), port: 5599)
                var timeout = timeval(tv_sec: 2, tv_usec: 0)
                setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                _ = PosixSocketAddress(.v4(address(n)), port: 0).bind(fd)
                proxy.send(payload, on: fd)
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

        // SYN → magic packet: one SYN per sleeping host, from a client that resolved the host's service through
        // the proxy first (an app's browse → resolve → connect: decided at once, docs/waking.md §3). One client
        // touching a hundred hosts would be a sweep, so fifty clients take two hosts each; each waits for the
        // proxy's answer to its resolve before it connects.
        var wakeLatencies: [Double] = []
        let clients = (0..<(hostCount + 1) / 2).map { (IPv4Address(192, 0, 2, UInt8(200 + $0)), mac(1000 + $0)) }
        try clients.map { "neigh replace \($0.0) lladdr \($0.1) dev eth0 nud permanent\n" }.joined()
            .write(to: neighbours, atomically: true, encoding: .utf8)
        try server.namespace.check(["ip", "-batch", neighbours.path])
        for n in 0..<hostCount {
            let (clientAddress, clientMAC) = clients[n / 2]
            let question = DNSMessage(
                id: UInt16(n),
                questions: [DNSQuestion(name: try DNSName(parsing: "Web \(n)._http._tcp.local."), type: .srv)])
            var before = capture.count
            try querier.namespace.sendFrame(
                TestFrames.udp(
                    from: clientMAC, to: proxyMAC, source: .v4(clientAddress), destination: IPAddress("192.0.2.1")!,
                    sourcePort: UInt16(30000 + n), port: 5353, payload: question.encoded(options: .mdns)))
            let answered = Date(timeIntervalSinceNow: 1)
            var heard = false
            while !heard, Date() < answered {
                heard = capture.captured(from: before).contains { frame in
                    guard let ethernet = try? EthernetFrame(decoding: ByteBuffer(bytes: frame.bytes)),
                        ethernet.destination == clientMAC, ethernet.etherType == .ipv4
                    else { return false }
                    return true
                }
                if !heard { usleep(500) }
            }
            before = capture.count
            try querier.namespace.sendFrame(
                TestFrames.tcp(
                    from: clientMAC, to: proxyMAC, source: .v4(clientAddress), destination: .v4(address(n)),
                    sourcePort: UInt16(40000 + n), port: 8080, window: 64240, options: TestFrames.kernelSYNOptions))
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
                format:
                    "  SYN after a resolve → magic packet on the wire: %d of %d, p50 %.3f ms, p99 %.3f ms  target p99 ≤ 1 ms: %@",
                wakeLatencies.count, hostCount, percentile(wakeLatencies, 0.5), percentile(wakeLatencies, 0.99),
                percentile(wakeLatencies, 0.99) <= 1 ? "met" : "NOT MET"))
        if ProcessInfo.processInfo.environment["BENCH_DEBUG"] != nil { print(process.output) }
        print("  connect() to a waking host: see sleepproxy-bench wake")
    }
}
