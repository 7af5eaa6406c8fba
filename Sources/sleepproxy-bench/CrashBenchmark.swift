import Foundation
import SleepProxyControl
import SleepProxySystem
import SleepProxyTestSupport
import SleepProxyWire

#if canImport(Glibc)
    import Glibc
#endif

/// `kill -9` at 100 random moments (docs/state.md, "After a crash"): each round the daemon starts on the same state
/// directory, every host registered so far renews and 20 new ones register (20 in flight), a NAS it adopts speaks
/// mDNS and SSDP (adoption learning, `upnp.json`), the NAS is adopted or unadopted (`adopted.json`), and the daemon
/// is killed 0-600 ms in: in the middle of registrations and their syncs, journal compactions (the renewals grow
/// the journal past its bound every few rounds), history lines and settles, and state writes. Reported:
/// registrations acknowledged and how many of them the restarted daemon did not hold, adoptions acknowledged and
/// not kept, starts that failed, state files refused or torn tails skipped at start, and the time from the
/// restart to the first answer for a host that was asleep when the daemon died.
enum CrashBenchmark {
    static let rounds = 100
    static let newHostsPerRound = 20
    static let mostHosts = 400
    static let nasMAC = MACAddress("02:53:50:00:0a:01")!

    static let ssdpScript = """
        import socket, sys
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton('169.254.10.1'))
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 2)
        for nt in ('upnp:rootdevice', 'urn:schemas-upnp-org:device:MediaServer:1'):
            s.sendto(('NOTIFY * HTTP/1.1\\r\\nHOST: 239.255.255.250:1900\\r\\nCACHE-CONTROL: max-age=1810\\r\\n'
                'LOCATION: http://169.254.10.1:8200/rootDesc.xml\\r\\nNT: %s\\r\\nNTS: ssdp:alive\\r\\n'
                'SERVER: Linux/6.1 DLNADOC/1.50 UPnP/1.0 MiniDLNA/1.3.3\\r\\n'
                'USN: uuid:4d696e69-444c-164e-9d41-b827eb5c%s::%s\\r\\n\\r\\n' % (nt, sys.argv[1], nt)).encode(),
                ('239.255.255.250', 1900))
        """

    /// The NAS's own announcement: its name and address, and a web interface.
    static let nasAnnouncement: DNSMessage = {
        let name = try! DNSName(parsing: "nas.local.")
        let instance = try! DNSName(parsing: "NAS._http._tcp.local.")
        return DNSMessage(
            flags: DNSHeaderFlags(response: true, authoritative: true),
            answers: [
                DNSResourceRecord(
                    name: name, cacheFlush: true, ttl: 120, rdata: .a(ARecord(address: IPv4Address(169, 254, 10, 1)))),
                DNSResourceRecord(
                    name: try! DNSName(parsing: "_http._tcp.local."), ttl: 4500,
                    rdata: .ptr(PTRRecord(target: instance))),
                DNSResourceRecord(
                    name: instance, cacheFlush: true, ttl: 120,
                    rdata: .srv(SRVRecord(priority: 0, weight: 0, port: 5000, target: name))),
            ])
    }()

    struct Tally {
        var acknowledgements = 0
        var acknowledged = Set<Int>()
        var lost = Set<Int>()
        var adoptionsAcknowledged = 0
        var adoptionsLost = 0
        var failedStarts = 0
        var refusedFiles = 0
        var tornTails = 0
        var compactions = 0
        var upnpKept = 0
        var firstAnswers: [Double] = []
        var noAnswer = 0
    }

    static func runLab(daemon: URL) throws {
        guard labCanRun("crash benchmark", daemon: daemon) else { return }
        print(
            "Crashes: kill -9 at \(Self.rounds) random moments of registrations, compactions, history and state writes")
        let lab = try LabNetwork()
        defer { lab.close() }
        let proxy = try lab.addHost("proxy", mac: MACAddress("02:53:50:00:00:01")!, ipv4: ["169.254.0.1/16"])
        let clients = try lab.addHost("clients", mac: MACAddress("02:53:50:00:00:02")!, ipv4: ["169.254.0.2/16"])
        let querier = try lab.addHost("querier", mac: MACAddress("02:53:50:00:00:03")!, ipv4: ["169.254.250.1/16"])
        let nas = try lab.addHost("nas", mac: Self.nasMAC, ipv4: ["169.254.10.1/16"])
        // The registrants are asleep: their addresses stay on the namespace for sending, but never answer ARP.
        try clients.namespace.check(["sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=8"])
        try clients.namespace.check(["sysctl", "-qw", "net.ipv4.conf.eth0.arp_ignore=8"])
        let batch = lab.directory.appendingPathComponent("addresses")
        try (0..<Self.mostHosts).map { "address add \(ScaleBenchmarks.address($0))/16 dev eth0\n" }.joined()
            .write(to: batch, atomically: true, encoding: .utf8)
        try clients.namespace.check(["ip", "-batch", batch.path], timeout: .seconds(120))
        let neighbours = lab.directory.appendingPathComponent("neighbours")
        try (0..<Self.mostHosts).map {
            "neigh replace \(ScaleBenchmarks.address($0)) lladdr \(clients.mac) dev eth0 nud permanent\n"
        }.joined().write(to: neighbours, atomically: true, encoding: .utf8)
        try proxy.namespace.check(["ip", "-batch", neighbours.path], timeout: .seconds(120))

        let state = lab.directory.appendingPathComponent("state")
        // Memory, as /run is under systemd: the live record and the history's recent lines outlive the kill.
        let runtime = URL(fileURLWithPath: "/dev/shm/sleepproxy-crash-\(getpid())")
        defer { try? FileManager.default.removeItem(at: runtime) }
        let socket = lab.directory.appendingPathComponent("control.sock")
        let arguments = [
            daemon.path, "--interface", "eth0", "--state-directory", state.path, "--control-socket", socket.path,
            "--runtime-directory", runtime.path, "--log-level", "warning", "--max-hosts", "1000",
        ]
        let ctl = daemon.deletingLastPathComponent().appendingPathComponent("sleepproxyctl").path
        var random = SystemRandomNumberGenerator()
        var tally = Tally()
        var adopted = false
        var asleepAtKill: [Int] = []
        var asleepBefore = Set<Int>()
        var journalSize = 0
        for round in 0..<Self.rounds {
            try? FileManager.default.removeItem(at: socket)
            let started = monotonicNanoseconds()
            let process = try proxy.spawn(arguments, logName: "crash-\(round)")
            defer { process.stop(signal: SIGKILL) }
            do {
                try ScaleLabBenchmark.waitForControlSocket(socket)
            } catch {
                tally.failedStarts += 1
                print("    round \(round): the daemon did not start: \(process.output.suffix(300))")
                continue
            }
            if let host = asleepAtKill.randomElement(using: &random) {
                if let seconds = try ScaleLabBenchmark.firstAnswer(in: querier, host: host, since: started, timeout: 5)
                {
                    tally.firstAnswers.append(seconds)
                } else {
                    tally.noAnswer += 1
                }
            }
            if round > 0 {
                tally.lost.formUnion(tally.acknowledged.subtracting(try Self.held(proxy, ctl, socket, state: nil)))
                let list = try proxy.run([ctl, "adopted", "--socket", socket.path], timeout: .seconds(30)).stdout
                if list.lowercased().contains(Self.nasMAC.description) != adopted { tally.adoptionsLost += 1 }
                let output = process.output
                tally.refusedFiles += output.components(separatedBy: "ignoring").count - 1
                tally.tornTails += output.components(separatedBy: "torn").count - 1
            }
            if FileManager.default.fileExists(atPath: state.appendingPathComponent("upnp.json").path) {
                tally.upnpKept += 1
            }
            let size = regularFileSize(state.appendingPathComponent("registrations.journal"))
            if size < journalSize { tally.compactions += 1 }
            journalSize = size
            // What is asleep now is asleep when the daemon dies: no host here ever wakes. The first answer is
            // measured for a host asleep for more than a second by then (asleep at the last round's look too): the
            // live record takes a new one within a second.
            let asleep = try Self.held(proxy, ctl, socket, state: "asleep")
            asleepAtKill = Array(asleep.intersection(asleepBefore))
            asleepBefore = asleep
            if ProcessInfo.processInfo.environment["BENCH_CRASH_TRACE"] != nil {
                print("    round \(round): \(asleep.count) asleep, \(asleepAtKill.count) asleep for over a second")
            }
            // Hosts asleep do not renew here: a renewal is a host awake for a moment, which the proxy probes again
            // before it speaks for it (and the registrants share one MAC, so the proxy, answering for their
            // addresses, would keep its replies to itself). The others renew up to three times a round, which grows
            // the journal past its bound every few rounds.
            let count = min(Self.mostHosts, (round + 1) * Self.newHostsPerRound)
            let renewing = (0..<count).filter { !asleep.contains($0) }
            let storm = RoundStorm(hosts: renewing + renewing + renewing, round: round, clients: clients)
            // Adopted in three rounds of four; the change (an `adopted.json` write) comes before the NAS speaks.
            if (round % 4 != 3) != adopted {
                let change = try proxy.run(
                    [ctl, adopted ? "unadopt" : "adopt", Self.nasMAC.description, "--socket", socket.path],
                    timeout: .seconds(10))
                if change.succeeded {
                    adopted.toggle()
                    tally.adoptionsAcknowledged += 1
                }
            }
            _ = try RawMDNS.exchange(
                in: nas, packets: [Self.nasAnnouncement], to: .v4(.mdnsGroup), sourcePort: 5353,
                listen: .milliseconds(1))
            _ = try nas.spawn(
                ["/usr/bin/python3", "-c", Self.ssdpScript, String(format: "%04x", round)], logName: "ssdp")
            // Mostly in the middle of the storm; about one round in seven long enough for the new hosts' probes to end, so
            // that there are hosts asleep when the daemon dies.
            let delay =
                Int.random(in: 0..<100, using: &random) < 15
                ? 5_000_000 + Int.random(in: 0..<2_000_000, using: &random)
                : Int.random(in: 0..<600_000, using: &random)
            usleep(UInt32(delay))
            if ProcessInfo.processInfo.environment["BENCH_CRASH_TRACE"] != nil {
                let live = (try? String(contentsOf: runtime.appendingPathComponent("spoken-for.json"), encoding: .utf8))
                print(
                    "    round \(round): killed after \(delay / 1000) ms, the live record names \(live.map { $0.components(separatedBy: "\"mac\"").count - 1 } ?? -1) hosts"
                )
            }
            kill(process.pid, SIGKILL)
            storm.stop()
            let acked = storm.wait()
            tally.acknowledgements += acked.count
            tally.acknowledged.formUnion(acked)
        }
        Self.report(tally)
    }

    static func report(_ tally: Tally) {
        print(
            "    \(Self.rounds) kills; registrations acknowledged \(tally.acknowledgements) (\(tally.acknowledged.count) hosts); adoption changes acknowledged \(tally.adoptionsAcknowledged)"
        )
        print(
            "    acknowledged but not held after a restart: \(tally.lost.count) registrations, \(tally.adoptionsLost) adoptions (target 0: \(tally.lost.isEmpty && tally.adoptionsLost == 0 ? "met" : "NOT MET"))"
        )
        print(
            "    starts that failed: \(tally.failedStarts); state files refused: \(tally.refusedFiles); torn journal tails skipped: \(tally.tornTails) (target: every start reads every file)"
        )
        print(
            "    journal compactions between kills: \(tally.compactions); upnp.json present at \(tally.upnpKept) starts"
        )
        let sorted = tally.firstAnswers.sorted()
        if let worst = sorted.last {
            print(
                String(
                    format:
                        "    restart to the first answer for a host asleep for over a second at the kill: p50 %.2f s, p99 %.2f s, max %.2f s over %d restarts, %d unanswered in 5 s (target ≤ 1 s: %@)",
                    sorted[sorted.count / 2], sorted[min(sorted.count - 1, sorted.count * 99 / 100)], worst,
                    sorted.count, tally.noAnswer, worst <= 1 && tally.noAnswer == 0 ? "met" : "NOT MET"))
        }
    }

    static func regularFileSize(_ url: URL) -> Int {
        (try? FileManager.default.attributesOfItem(atPath: url.path)[.size] as? Int) ?? 0
    }

    /// The hosts held (in `state`, if given), by their number.
    static func held(_ proxy: LabHost, _ ctl: String, _ socket: URL, state: String?) throws -> Set<Int> {
        let filter = state.map { ["--state", $0] } ?? []
        let result = try proxy.run(
            [ctl, "hosts", "--socket", socket.path, "--json"] + filter, timeout: .seconds(30))
        guard let line = result.stdout.split(separator: "\n").first,
            let response = try? ControlProtocol.decode(ControlResponse.self, from: Array(line.utf8)),
            let hosts = response.hosts
        else { throw CommandError("sleepproxyctl hosts: \(result.stdout.prefix(200)) \(result.stderr)") }
        return Set(hosts.compactMap { $0.name.flatMap { Int($0.dropFirst(4).prefix { $0.isNumber }) } })
    }
}

/// One round's registrations on a thread of their own, 20 in flight, each sent once, until `stop` (the kill):
/// which hosts were acknowledged with NOERROR.
final class RoundStorm: @unchecked Sendable {
    // @unchecked: `acknowledged` is written by the round's thread before `done` is signalled, and read after;
    // `stopped` guards itself.
    private var acknowledged: [Int] = []
    private let done = DispatchSemaphore(value: 0)
    private let stopped = StopFlag()

    init(hosts: [Int], round: Int, clients: LabHost) {
        Thread.detachNewThread {
            self.acknowledged =
                (try? clients.namespace.inside { Self.register(hosts, round: round, stopped: self.stopped) }) ?? []
            self.done.signal()
        }
    }

    func stop() { self.stopped.set() }

    func wait() -> [Int] {
        self.done.wait()
        return self.acknowledged
    }

    static func register(_ hosts: [Int], round: Int, stopped: StopFlag) -> [Int] {
        let proxy = PosixSocketAddress(.v4(IPv4Address(169, 254, 0, 1)), port: 5599)
        var acknowledged: [Int] = []
        var outstanding: [Int32: (host: Int, id: UInt16, sent: UInt64)] = [:]
        var next = 0
        var buffer = [UInt8](repeating: 0, count: 2048)
        var stoppedAt: UInt64? = nil
        defer { for fd in outstanding.keys { close(fd) } }
        while next < hosts.count || !outstanding.isEmpty {
            if stoppedAt == nil, stopped.isSet { stoppedAt = monotonicNanoseconds() }
            // A reply already on its way when the daemon died is still read; nothing more is sent.
            if let stoppedAt, monotonicNanoseconds() - stoppedAt > 100_000_000 { break }
            while stoppedAt == nil, outstanding.count < 20, next < hosts.count {
                let fd = socket(AF_INET, PosixSocket.datagram | PosixSocket.nonBlocking, 0)
                guard fd >= 0, PosixSocketAddress(ScaleBenchmarks.address(hosts[next]), port: 0).bind(fd) else {
                    if fd >= 0 { close(fd) }
                    next += 1
                    continue
                }
                // A new message ID each round: a renewal, not a retransmission the proxy would answer from memory.
                let id = UInt16(truncatingIfNeeded: round &* 1_009 &+ next)
                proxy.send(ScaleBenchmarks.host(hosts[next], id: id).message.encoded(options: .appleUpdate), on: fd)
                outstanding[fd] = (hosts[next], id, monotonicNanoseconds())
                next += 1
            }
            if stoppedAt != nil, outstanding.isEmpty { break }
            var descriptors = outstanding.keys.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
            _ = poll(&descriptors, nfds_t(descriptors.count), 20)
            let now = monotonicNanoseconds()
            for descriptor in descriptors {
                guard let entry = outstanding[descriptor.fd] else { continue }
                if descriptor.revents & Int16(POLLIN) != 0 {
                    let count = recv(descriptor.fd, &buffer, buffer.count, 0)
                    if count >= 4, UInt16(buffer[0]) << 8 | UInt16(buffer[1]) == entry.id, buffer[3] & 0x0F == 0 {
                        acknowledged.append(entry.host)
                    }
                } else if now - entry.sent < 2_000_000_000 {
                    continue
                }
                close(descriptor.fd)
                outstanding[descriptor.fd] = nil
            }
        }
        return acknowledged
    }
}
