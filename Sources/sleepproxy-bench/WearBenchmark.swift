import Foundation
import SleepProxyControl
import SleepProxySystem
import SleepProxyTestSupport
import SleepProxyWire

#if canImport(Glibc)
    import Glibc
#endif

/// What a day of a home costs an SD card (docs/state.md, "SD-card wear"): 20 hosts that each go to sleep and wake
/// 10 times a day, woken by the proxy each time, and renew their leases every two hours while asleep (Apple's
/// clients do), played against the real daemon in the lab as fast as it answers, with its runtime directory in
/// memory as under systemd and the day's four history settles (`HistoryFile.settleInterval`) asked for with
/// `sleepproxyctl sync` at each quarter. Reported: the bytes the daemon caused to be written (`/proc/PID/io`
/// write_bytes: journal, history and state files together) and its syncs (`sleepproxy_journal_syncs_total`, plus
/// one per history settle). Logs are left out (the daemon logs errors only here); under systemd they go to
/// journald.
enum WearBenchmark {
    static let hosts = 20
    static let sleepsPerDay = 10
    static let renewalsPerDay = 12
    static let proxyMAC = MACAddress("02:53:50:00:00:01")!

    static func address(_ n: Int) -> IPv4Address { IPv4Address(192, 0, 2, UInt8(100 + n)) }
    static func mac(_ n: Int) -> MACAddress { MACAddress(rawValue: 0x0253_5000_4000 + UInt64(n)) }

    static func writtenBytes(_ pid: Int32) -> Int? {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/io", encoding: .utf8) else { return nil }
        for line in text.split(separator: "\n") where line.hasPrefix("write_bytes:") {
            return Int(line.split(separator: " ").last ?? "")
        }
        return nil
    }

    static let syncsScript = """
        import http.client
        c = http.client.HTTPConnection('127.0.0.1', 9580, timeout=10)
        c.request('GET', '/metrics')
        for line in c.getresponse().read().decode().splitlines():
            if line.startswith('sleepproxy_journal_syncs_total'):
                print(line.split()[-1])
        """

    static func syncs(_ server: LabHost) throws -> Int {
        let result = try server.run(["/usr/bin/python3", "-c", Self.syncsScript], timeout: .seconds(20))
        return Int(Double(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1)
    }

    static func runLab(daemon: URL) throws {
        guard labCanRun("SD-card wear benchmark", daemon: daemon) else { return }
        print(
            "SD-card wear: a day of \(Self.hosts) hosts, each asleep and woken \(Self.sleepsPerDay) times, renewing every 2 h"
        )
        let lab = try LabNetwork()
        defer { lab.close() }
        let server = try lab.addHost("server", mac: proxyMAC, ipv4: ["192.0.2.1/24"])
        let sleepers = try lab.addHost("sleepers", mac: MACAddress("02:53:50:00:00:02")!, ipv4: ["192.0.2.2/24"])
        // The state directory on a card of its own when this machine can make one: its counters include what
        // ext4 writes for the daemon's files, which /proc/PID/io leaves out.
        let card: CardImage?
        do {
            card = try CardImage.make(in: lab.directory)
        } catch {
            card = nil
            print("  the card's own counters: not measured (\(error))")
        }
        defer { card?.remove() }
        let state = (card?.mountPoint ?? lab.directory).appendingPathComponent("state")
        let socket = lab.directory.appendingPathComponent("control.sock").path
        // Memory, as /run is under systemd (`RuntimeDirectory=`): what is written there never reaches a card.
        let runtime = URL(fileURLWithPath: "/dev/shm/sleepproxy-wear-\(getpid())")
        defer { try? FileManager.default.removeItem(at: runtime) }
        let process = try server.spawn(
            [
                daemon.path, "--interface", "eth0", "--state-directory", state.path, "--control-socket", socket,
                "--runtime-directory", runtime.path, "--log-level", "error",
            ], logName: "bench-wear")
        defer { process.stop() }
        let ctl = daemon.deletingLastPathComponent().appendingPathComponent("sleepproxyctl").path
        guard
            try waitUntil(
                timeout: 20, interval: 0.1, { try server.run([ctl, "--socket", socket, "status"]).succeeded })
        else { throw CommandError("the daemon did not start: \(process.output)") }
        for n in 0..<Self.hosts { try sleepers.addAddress("\(address(n))/24") }
        // One namespace stands for 20 machines: static neighbour entries keep the proxy from taking the shared
        // MAC for a thief of their addresses (as the takeover benchmark does).
        try sleepers.namespace.check([
            "ip", "neigh", "replace", "192.0.2.1", "lladdr", proxyMAC.description, "dev", "eth0", "nud", "permanent",
        ])
        let neighbours = lab.directory.appendingPathComponent("neighbours")
        try (0..<Self.hosts).map { "neigh replace \(address($0)) lladdr 02:53:50:00:00:02 dev eth0 nud permanent\n" }
            .joined().write(to: neighbours, atomically: true, encoding: .utf8)
        try server.namespace.check(["ip", "-batch", neighbours.path])

        func register(_ n: Int, sequence: UInt8, id: UInt16) throws {
            let payload = SampleRegistration.message(
                id: id, mac: mac(n), sequence: sequence, host: try DNSName(parsing: "sleeper\(n).local."),
                addresses: [.v4(address(n))],
                services: [
                    ("Files \(n)._smb._tcp", 445), ("Web \(n)._http._tcp", 80), ("Dev \(n)._device-info._tcp", 0),
                ]
            ).encoded(options: .appleUpdate)
            try sleepers.namespace.inside { () throws in
                let fd = Glibc.socket(AF_INET, PosixSocket.datagram, 0)
                defer { close(fd) }
                var timeout = timeval(tv_sec: 2, tv_usec: 0)
                setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
                _ = PosixSocketAddress(.v4(address(n)), port: 0).bind(fd)
                PosixSocketAddress(.v4(IPv4Address(192, 0, 2, 1)), port: 5599).send(payload, on: fd)
                var reply = [UInt8](repeating: 0, count: 512)
                guard recv(fd, &reply, reply.count, 0) >= 4, reply[3] == 0 else {
                    throw CommandError("sleeper \(n) was not registered")
                }
            }
        }

        func handBack(_ n: Int, sequence: UInt8) throws {
            let announcement = DNSMessage(
                flags: DNSHeaderFlags(response: true, authoritative: true),
                answers: [
                    DNSResourceRecord(
                        name: try DNSName(parsing: "sleeper\(n).local."), cacheFlush: true, ttl: 120,
                        rdata: .a(ARecord(address: address(n))))
                ],
                additionals: [
                    .opt(
                        EDNSHeader(udpPayloadSize: 1440),
                        options: [.owner(OwnerOption(sequence: sequence, primaryMAC: mac(n)))])
                ])
            _ = try RawMDNS.exchange(
                in: sleepers, packets: [announcement], to: .v4(.mdnsGroup), sourcePort: 5353, listen: .milliseconds(1))
        }

        // A day's events come minutes apart, and the kernel writes dirty pages back after 30 s, so each event finds
        // the page it appends to clean and dirties it anew; played in seconds, the events would share pages and the
        // figure would flatter. The page cache is written back after every event to count as a day would.
        func settle() { Glibc.sync() }
        settle()
        let bytesBefore = Self.writtenBytes(process.pid) ?? 0
        let cardBefore = card?.written()
        let syncsBefore = try Self.syncs(server)
        let started = Date()
        var id: UInt16 = 1
        var settles = 0
        for cycle in 0..<Self.sleepsPerDay {
            let sequence = UInt8(cycle)
            for n in 0..<Self.hosts {
                id &+= 1
                try register(n, sequence: sequence, id: id)
                settle()
                // The renewals of this sleep: 12 a day over 10 sleeps.
                let renewals =
                    Self.renewalsPerDay / Self.sleepsPerDay + (cycle < Self.renewalsPerDay % Self.sleepsPerDay ? 1 : 0)
                for _ in 0..<renewals {
                    id &+= 1
                    try register(n, sequence: sequence, id: id)
                    settle()
                }
                _ = try server.run([ctl, "--socket", socket, "wake", "sleeper\(n)"])
                settle()
                try handBack(n, sequence: sequence &+ 1)
                settle()
            }
            // A quarter of the day has passed: the history settles, as it does every six hours.
            if (cycle + 1) * 4 / Self.sleepsPerDay > cycle * 4 / Self.sleepsPerDay {
                guard try server.run([ctl, "--socket", socket, "sync"]).succeeded else {
                    throw CommandError("sleepproxyctl sync failed: \(process.output)")
                }
                settles += 1
                settle()
            }
        }
        // What the day left for the history's thread and the kernel to write: the counters settle.
        _ = try waitUntil(timeout: 5, interval: 0.5) {
            try server.run([ctl, "--socket", socket, "hosts"]).stdout.contains("no host")
        }
        usleep(2_000_000)
        settle()
        let bytes = (Self.writtenBytes(process.pid) ?? 0) - bytesBefore
        let cardAfter = card?.written()
        // Each settle syncs the history and the savings ledger's append (docs/savings.md), one write each.
        let syncs = try Self.syncs(server) - syncsBefore + 2 * settles
        let seconds = Date().timeIntervalSince(started)
        print(
            String(
                format:
                    "  one day played in %.0f s: %.2f MB (%.2f MiB) written by the daemon, %d syncs (%d of them the history's and the savings' settles; targets: 2 MB, 500)",
                seconds, Double(bytes) / 1_000_000, Double(bytes) / 1_048_576, syncs, 2 * settles))
        if let cardBefore, let cardAfter {
            let cardBytes = cardAfter.bytes - cardBefore.bytes
            print(
                String(
                    format:
                        "  the card's own counters (ext4, noatime): %.2f MB in %d write requests, its journal and metadata included",
                    Double(cardBytes) / 1_000_000, cardAfter.requests - cardBefore.requests))
        }
        for (directory, file) in [
            (state, "registrations.journal"), (state, "history.jsonl"), (runtime, "history-recent.jsonl"),
            (runtime, "wake-events.jsonl"), (state, "savings.txt"), (runtime, "savings-recent.txt"),
        ] {
            let size =
                (try? FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent(file).path)[.size])
                as? Int ?? 0
            print("  \(directory == state ? "state" : "runtime")/\(file): \(size) bytes at the end of the day")
        }
    }
}
