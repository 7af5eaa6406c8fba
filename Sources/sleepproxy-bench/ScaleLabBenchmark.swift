import CSleepProxyLinux
import Foundation
import SleepProxyCore
import SleepProxyIO
import SleepProxySystem
import SleepProxyTestSupport
import SleepProxyWire

#if canImport(Glibc)
    import Glibc
#endif

/// The registration storm against the real daemon (docs/scale.md): N simulated Macs (24 records each: five services,
/// one IPv4 and one fe80 address) register Apple-format from their own 169.254/16 addresses, 20 in flight, while
/// a third host asks legacy SRV queries for hosts that registered earlier; then the daemon is restarted and the
/// time to its first answer is taken. The hosts' side answers no ARP (arp_ignore=8), so each host looks asleep to
/// the takeover once registered, and the proxy's side has a static neighbour entry for each address, IPv4 and fe80.
enum ScaleLabBenchmark {
    static let inFlight = 20
    static let retryAfter: UInt64 = 1_000_000_000
    static let tries = 3
    /// Queries go to hosts that registered at least this long ago: the proxy speaks for a host only once it is
    /// shown asleep (its address probed, about 4 s; docs/coexistence.md).
    static let queryAge: UInt64 = 8_000_000_000
    static let queryInterval: useconds_t = 10_000

    struct Figures {
        var hosts: Int
        /// Registered (and asleep) before the storm: the hosts the first queries ask about.
        var warm: Int
        var seconds: Double
        var acknowledged: Int
        var givenUp: Int
        var rtts: [Double]
        var queryRTTs: [Double]
        var queriesMissed: Int
        var restartToFirstAnswer: Double?
        /// Just started (half a second after the control socket appeared), and settled: idle after the daemon
        /// handed its start-up code back (`EngineRunner.startupCodeReleaseDelay`).
        var rssStarted: Int
        var rssIdle: Int
        var rssHeld: Int
        var rssRestarted: Int
        /// Once the restarted daemon's start-up is over, as for the idle figure.
        var rssRestartedSettled: Int
        /// The highest RSS of the daemon that took the registrations live, and of the one that restored them
        /// (VmHWM): a box with a memory limit must survive both (docs/memory.md).
        var peakLive: Int
        var peakRestored: Int
        var cpuSeconds: Double
    }

    static func run(daemon: URL) throws {
        guard labCanRun("Scale storm", daemon: daemon) else { return }
        let sizes =
            ProcessInfo.processInfo.environment["BENCH_SCALE_SIZES"].map {
                $0.split(separator: ",").compactMap { Int($0) }
            } ?? [100, 1_000, 10_000]
        print(
            "Scale storm in a lab: hosts of 24 records register from their own addresses, \(inFlight) in flight, legacy SRV queries alongside (daemon: \(daemon.path))"
        )
        var cpuPerRegistration: [Int: Double] = [:]
        for size in sizes {
            let figures = try self.storm(daemon: daemon, hosts: size)
            cpuPerRegistration[size] = figures.cpuSeconds / Double(max(1, figures.acknowledged))
            self.report(figures)
        }
        if let small = cpuPerRegistration[100], let large = cpuPerRegistration[10_000] {
            let ratio = large / small
            print(
                String(
                    format: "  daemon CPU per registration at 10,000 hosts / at 100: %.2f×  target ≤ 1.5×: %@", ratio,
                    ratio <= 1.5 ? "met" : "NOT MET"))
        }
    }

    static func report(_ f: Figures) {
        let rate = Double(f.acknowledged) / f.seconds
        let big = f.hosts >= 10_000
        func verdict(_ met: Bool) -> String { big ? (met ? "met" : "NOT MET") : "-" }
        print("  \(format(Double(f.hosts))) hosts:")
        print(
            String(
                format:
                    "    %d registered first, then %d acknowledged in %.2f s: %.0f registrations/s (target at 10,000: ≥ 1,000: %@); %d given up after %d tries (target 0: %@)",
                f.warm, f.acknowledged, f.seconds, rate, verdict(rate >= 1_000), f.givenUp, tries,
                verdict(f.givenUp == 0)))
        let p99 = percentile(f.rtts, 0.99)
        print(
            String(
                format: "    round trip p50 %.2f ms, p99 %.2f ms (target ≤ 20 ms: %@)", percentile(f.rtts, 0.5), p99,
                verdict(p99 <= 20)))
        let queryP99 = percentile(f.queryRTTs, 0.99)
        print(
            String(
                format:
                    "    legacy SRV queries from the storm's start to the end of its takeover: %d answered, %d missed, p50 %.2f ms, p99 %.2f ms (target p99 ≤ 2 ms, none missed: %@)",
                f.queryRTTs.count, f.queriesMissed, percentile(f.queryRTTs, 0.5), queryP99,
                verdict(queryP99 <= 2 && f.queriesMissed == 0)))
        if let restart = f.restartToFirstAnswer {
            print(
                String(
                    format: "    restart to first answer for a restored host: %.2f s (target ≤ 1 s: %@)", restart,
                    verdict(restart <= 1)))
        } else {
            print("    restart to first answer: no answer within 30 s")
        }
        let perHost = Double(f.rssHeld - f.rssIdle) / Double(f.hosts)
        // The targets in decimal megabytes, the stricter reading (15 MB = 14,648 KiB, 100 MB = 97,656 KiB).
        print(
            "    RSS idle \(format(Double(f.rssIdle) / 1024)) KiB (target ≤ 15 MB: \(f.rssIdle <= 15_000_000 ? "met" : "NOT MET")); just started \(format(Double(f.rssStarted) / 1024)) KiB"
        )
        print(
            "    RSS holding \(format(Double(f.hosts))) hosts \(format(Double(f.rssHeld) / 1024)) KiB (\(format(perHost)) bytes per host, \(format(perHost / 24)) per record\(f.hosts == 10_000 ? "; target ≤ 100 MB: \(verdict(f.rssHeld <= 100_000_000))" : "")), after a restart \(format(Double(f.rssRestarted) / 1024)) KiB at its first answer, \(format(Double(f.rssRestartedSettled) / 1024)) KiB settled\(f.hosts == 10_000 ? " (\(verdict(f.rssRestartedSettled <= 100_000_000)))" : "")"
        )
        print(
            "    peak RSS registering live \(format(Double(f.peakLive) / 1024)) KiB, restoring after the restart \(format(Double(f.peakRestored) / 1024)) KiB (target: restoring ≤ live: \(verdict(f.peakRestored <= f.peakLive)))"
        )
        print(
            String(
                format: "    daemon CPU %.2f s: %.0f µs per registration", f.cpuSeconds,
                f.cpuSeconds / Double(max(1, f.acknowledged)) * 1e6))
    }

    /// One storm of `hosts` registrations against a fresh daemon in a fresh lab.
    /// `probe`, when given, runs while the daemon holds every host (before the restart), in the proxy's namespace.
    static func storm(daemon: URL, hosts: Int, probe: ((LabHost) throws -> Void)? = nil) throws -> Figures {
        let lab = try LabNetwork()
        defer { lab.close() }
        let proxy = try lab.addHost("proxy", mac: MACAddress("02:53:50:00:00:01")!, ipv4: ["169.254.0.1/16"])
        let clients = try lab.addHost("clients", mac: MACAddress("02:53:50:00:00:02")!, ipv4: ["169.254.0.2/16"])
        let querier = try lab.addHost("querier", mac: MACAddress("02:53:50:00:00:03")!, ipv4: ["169.254.250.1/16"])
        // The simulated hosts' addresses; their side never answers ARP, so the takeover finds them asleep.
        try clients.namespace.check([
            "sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=8", "net.ipv4.conf.eth0.arp_ignore=8",
        ])
        let addresses = lab.directory.appendingPathComponent("addresses")
        try (0..<hosts).map { "address add \(ScaleBenchmarks.address($0))/16 dev eth0\n" }.joined().write(
            to: addresses, atomically: true, encoding: .utf8)
        try clients.namespace.check(["ip", "-batch", addresses.path], timeout: .seconds(300))
        let neighbours = lab.directory.appendingPathComponent("neighbours")
        // Both of each host's addresses: a real host registers while awake and answers for both, and the proxy
        // sends to the fe80 one too (the SSDP search at registration). Unresolved, those searches would wait in
        // the kernel's neighbour queues, filling the sending socket's buffer for the whole storm.
        try (0..<hosts).map {
            "neigh replace \(ScaleBenchmarks.address($0)) lladdr \(clients.mac) dev eth0 nud permanent\n"
                + "neigh replace \(ScaleBenchmarks.linkLocal($0)) lladdr \(clients.mac) dev eth0 nud permanent\n"
        }.joined().write(to: neighbours, atomically: true, encoding: .utf8)
        try proxy.namespace.check(["ip", "-batch", neighbours.path], timeout: .seconds(300))

        let state = lab.directory.appendingPathComponent("state")
        let arguments = [
            daemon.path, "--interface", "eth0", "--state-directory", state.path, "--control-socket",
            lab.directory.appendingPathComponent("control.sock").path, "--log-level", "warning", "--max-hosts", "10000",
            "--max-records", "250000",
        ]
        var process = try proxy.spawn(arguments, logName: "scale")
        defer { process.stop() }
        try self.waitForControlSocket(lab.directory.appendingPathComponent("control.sock"))
        usleep(500_000)
        let rssStarted = Self.rss(process.pid)
        // Idle means settled: start-up over and its code handed back (docs/memory.md).
        usleep(useconds_t(EngineRunner.startupCodeReleaseDelay.components.seconds) * 1_000_000 + 2_500_000)
        let rssIdle = Self.rss(process.pid)
        let cpuBefore = Self.cpuSeconds(process.pid)

        // A few hosts register first and fall asleep, so that there is someone to ask about while the storm runs.
        let acknowledgedAt = AcknowledgedTimes(count: hosts)
        let warm = max(20, hosts / 100)
        _ = try self.register(0..<warm, from: clients, acknowledged: acknowledgedAt)
        usleep(useconds_t(Self.queryAge / 1000))
        // The querier asks for hosts that registered long enough ago, from now until the storm's takeover and
        // announcements are over.
        let stop = StopFlag()
        let queries = QueryLoad(in: querier, acknowledged: acknowledgedAt, stop: stop)
        let start = monotonicNanoseconds()
        let (rtts, givenUp) = try self.register(warm..<hosts, from: clients, acknowledged: acknowledgedAt)
        let seconds = Double(monotonicNanoseconds() - start) / 1e9
        usleep(useconds_t(Self.queryAge / 1000 + 5_000_000))
        stop.set()
        let (queryRTTs, missed) = queries.wait()
        // What the daemon itself dropped (a full mailbox lane), and the answers it could not send from the engine
        // thread, from its metrics on the proxy's loopback.
        let metrics = try proxy.run([
            "/usr/bin/python3", "-c",
            "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9580/metrics', timeout=5).read().decode())",
        ])
        let dropped = metrics.stdout.split(separator: "\n").filter {
            $0.hasPrefix("sleepproxy_datagrams_dropped_total") || $0.hasPrefix("sleepproxy_frames_dropped")
                || $0.hasPrefix("sleepproxy_unicast_sends_deferred_total")
                || $0.hasPrefix("sleepproxy_unicast_sends_failed_total")
        }
        if !dropped.isEmpty { print("    daemon: " + dropped.joined(separator: ", ")) }
        let cpuSeconds = Self.cpuSeconds(process.pid) - cpuBefore
        let rssHeld = Self.rss(process.pid)
        let peakLive = Self.rss(process.pid, field: "VmHWM:")
        try probe?(proxy)

        // Restart: stop (every registration kept), start, and ask for a restored host until it is answered.
        process.stop()
        // A copy of the state directory as the restart finds it, to profile a restart on its own (docs/scale.md).
        if let keep = ProcessInfo.processInfo.environment["BENCH_SCALE_KEEP"] {
            _ = try? Command.run(["/bin/cp", "-a", state.path, keep])
        }
        let restartStart = monotonicNanoseconds()
        process = try proxy.spawn(arguments, logName: "scale-restarted")
        let restart = try Self.firstAnswer(in: querier, host: hosts / 2, since: restartStart, timeout: 30)
        let rssRestarted = Self.rss(process.pid)
        usleep(useconds_t(EngineRunner.startupCodeReleaseDelay.components.seconds) * 1_000_000 + 2_500_000)
        let rssRestartedSettled = Self.rss(process.pid)
        let peakRestored = Self.rss(process.pid, field: "VmHWM:")
        return Figures(
            hosts: hosts, warm: warm, seconds: seconds, acknowledged: rtts.count, givenUp: givenUp, rtts: rtts,
            queryRTTs: queryRTTs, queriesMissed: missed, restartToFirstAnswer: restart, rssStarted: rssStarted,
            rssIdle: rssIdle,
            rssHeld: rssHeld, rssRestarted: rssRestarted, rssRestartedSettled: rssRestartedSettled,
            peakLive: peakLive, peakRestored: peakRestored, cpuSeconds: cpuSeconds)
    }

    static func waitForControlSocket(_ path: URL) throws {
        let deadline = monotonicNanoseconds() + 20_000_000_000
        while !FileManager.default.fileExists(atPath: path.path) {
            guard monotonicNanoseconds() < deadline else { throw CommandError("the daemon did not start") }
            usleep(50_000)
        }
    }

    /// Resident set size in bytes (VmRSS), or its peak so far (VmHWM).
    static func rss(_ pid: Int32, field: String = "VmRSS:") -> Int {
        guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix(field) }),
            let kib = line.split(separator: " ").dropFirst().first.flatMap({ Int($0) })
        else { return 0 }
        return kib * 1024
    }

    /// User plus system CPU time of a process, in seconds.
    static func cpuSeconds(_ pid: Int32) -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return 0 }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return 0 }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// Registers every host, `inFlight` at a time, each from its own address, resending after a second up to
    /// `tries` times as Apple's client does; returns the round trips (ms) and how many were given up.
    static func register(_ range: Range<Int>, from clients: LabHost, acknowledged: AcknowledgedTimes) throws -> (
        [Double], Int
    ) {
        try clients.namespace.inside { () throws -> ([Double], Int) in
            var sockets = [Int32](repeating: -1, count: range.upperBound)
            defer { for fd in sockets where fd >= 0 { close(fd) } }
            for n in range {
                let fd = socket(AF_INET, PosixSocket.datagram | PosixSocket.nonBlocking, 0)
                guard fd >= 0 else { throw CommandError("socket: \(String(cString: strerror(errno)))") }
                sockets[n] = fd
                let address = PosixSocketAddress(ScaleBenchmarks.address(n), port: 0)
                let bound: Int32 = address.bind(fd) ? 0 : -1
                guard bound == 0 else { throw CommandError("bind: \(String(cString: strerror(errno)))") }
                var on: Int32 = 1
                setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, 4)
            }
            let proxyAddress = PosixSocketAddress(.v4(IPv4Address(169, 254, 0, 1)), port: 5599)
            func send(_ n: Int, _ bytes: [UInt8]) {
                proxyAddress.send(bytes, on: sockets[n])
            }
            struct Outstanding {
                var bytes: [UInt8]
                var firstSent: UInt64
                var lastSent: UInt64
                var tries: Int
            }
            var outstanding: [Int: Outstanding] = [:]
            var next = range.lowerBound
            var rtts: [Double] = []
            var givenUp = 0
            var buffer = [UInt8](repeating: 0, count: 2048)
            // Bounded: every host is either answered or given up after `tries` seconds.
            let deadline = monotonicNanoseconds() + UInt64(range.count) * 100_000_000 + 60_000_000_000
            while (next < range.upperBound || !outstanding.isEmpty) && monotonicNanoseconds() < deadline {
                while outstanding.count < inFlight && next < range.upperBound {
                    let bytes = ScaleBenchmarks.host(next, id: UInt16(truncatingIfNeeded: next)).message.encoded(
                        options: .appleUpdate)
                    let now = realtimeNanoseconds()
                    outstanding[next] = Outstanding(
                        bytes: bytes, firstSent: now, lastSent: monotonicNanoseconds(), tries: 1)
                    send(next, bytes)
                    next += 1
                }
                let keys = Array(outstanding.keys)
                var descriptors = keys.map { pollfd(fd: sockets[$0], events: Int16(POLLIN), revents: 0) }
                _ = poll(&descriptors, nfds_t(descriptors.count), 50)
                for (index, n) in keys.enumerated() where descriptors[index].revents & Int16(POLLIN) != 0 {
                    guard let arrival = receiveWithTimestamp(sockets[n], &buffer), let entry = outstanding[n] else {
                        continue
                    }
                    rtts.append(Double(arrival &- entry.firstSent) / 1e6)
                    acknowledged.set(n, at: monotonicNanoseconds())
                    outstanding[n] = nil
                }
                let now = monotonicNanoseconds()
                for n in outstanding.keys {
                    guard var entry = outstanding[n], now - entry.lastSent >= retryAfter else { continue }
                    if entry.tries >= tries {
                        givenUp += 1
                        outstanding[n] = nil
                        continue
                    }
                    entry.tries += 1
                    entry.lastSent = now
                    outstanding[n] = entry
                    send(n, entry.bytes)
                }
            }
            return (rtts, givenUp + outstanding.count)
        }
    }

    /// Legacy queries for one restored host, every 20 ms, until one is answered; seconds since `since`.
    static func firstAnswer(in querier: LabHost, host: Int, since: UInt64, timeout: Double) throws -> Double? {
        try querier.namespace.inside { () throws -> Double? in
            let fd = Self.querySocket()
            defer { close(fd) }
            let query = Self.query(host: host, id: 1)
            var buffer = [UInt8](repeating: 0, count: 9000)
            let deadline = since + UInt64(timeout * 1e9)
            while monotonicNanoseconds() < deadline {
                Self.sendQuery(fd, query)
                var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                if poll(&descriptor, 1, 20) > 0, recv(fd, &buffer, buffer.count, 0) > 0 {
                    return Double(monotonicNanoseconds() - since) / 1e9
                }
            }
            return nil
        }
    }

    static func querySocket() -> Int32 {
        let fd = socket(AF_INET, PosixSocket.datagram | PosixSocket.nonBlocking, 0)
        var on: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, 4)
        return fd
    }

    static func query(host: Int, id: UInt16) -> [UInt8] {
        DNSMessage(
            id: id, questions: [DNSQuestion(name: try! DNSName(parsing: "Host \(host)._svc0._tcp.local."), type: .srv)]
        ).encoded(options: .mdns)
    }

    /// A legacy unicast query (from an ephemeral port) straight to the proxy's address.
    static func sendQuery(_ fd: Int32, _ bytes: [UInt8]) {
        let proxy = PosixSocketAddress(.v4(IPv4Address(169, 254, 0, 1)), port: 5353)
        proxy.send(bytes, on: fd)
    }
}
