import ArgumentParser
import FoundationEssentials
import SleepProxyControl

#if canImport(Glibc)
    import Glibc
#endif

@main
struct SleepProxyCtl: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sleepproxyctl",
        abstract: "Inspect and steer a running sleepproxyd: proxied hosts, their records, and why they woke.",
        discussion: """
            --socket and --json may come before the command or after it.

            Exit status: 0 done; 1 the daemon is not running, refused the request, or failed it (the sentence \
            on stderr says which); 64 a usage error.
            """,
        version: "\(SleepProxyVersion.current) (control protocol \(ControlProtocol.version))",
        subcommands: [
            Status.self, Hosts.self, Host.self, History.self, Wake.self, Forget.self, Events.self, ReleaseAll.self,
        ]
    )

    // Declared here too, so that `--socket PATH` and `--json` are accepted before the subcommand as well as after
    // it (`sleepproxyctl --socket PATH hosts`), as with systemctl, ip and the avahi tools; the subcommand reads
    // whichever was given.
    @OptionGroup var connection: Connection
}

struct Connection: ParsableArguments {
    @Option(name: .long, help: "The daemon's control socket.")
    var socket: String = "/run/sleep-proxy/control.sock"

    @Flag(name: .long, help: "Print the daemon's JSON response (one object per line; schema in README).")
    var json = false
}

// MARK: - Commands

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Interfaces, hosts, records, uptime, version, refusals by reason.")
    @OptionGroup var connection: Connection

    func run() throws {
        let response = try Client.ask(ControlRequest(command: .status), connection)
        guard !connection.json, let status = response.status else { return }
        print("sleepproxyd \(status.version), up \(HumanDuration.format(status.uptimeSeconds))")
        print("advertised as: \(status.advertisedName ?? "-")")
        print("interfaces:    \(status.interfaces.isEmpty ? "none" : status.interfaces.joined(separator: ", "))")
        if let byState = status.hostsByState {
            // Only the states some host is in: "2 asleep, 1 awake".
            let parts = [HostSummary.State.asleep, .waking, .starting, .awake, .standby].compactMap { state in
                byState[state].flatMap { $0 > 0 ? "\($0) \(state.rawValue)" : nil }
            }
            print(
                "hosts:         \(status.hosts) held (\(parts.isEmpty ? "none" : parts.joined(separator: ", "))), \(status.records) records"
            )
        } else {
            print("hosts:         \(status.hosts) sleeping, \(status.records) records")
        }
        print("registrations: \(status.registrationsAccepted) accepted")
        print("answers:       \(status.queriesAnswered) queries answered")
        if let upnp = status.upnp {
            print(
                "UPnP:          \(upnp.hosts) hosts with \(upnp.entries) devices and services; \(upnp.responses) search responses, \(upnp.announcements) announcements sent for sleeping hosts"
            )
        }
        print("wakes:         \(status.wakes) (\(status.magicPackets) magic packet bursts)")
        if let others = status.otherProxies {
            // docs/coexistence.md: lower metrics win a client's choice, and decide which proxy keeps a shared host.
            print("other proxies: \(others.isEmpty ? "none heard" : "")")
            for other in others.sorted(by: { $0.label < $1.label }) {
                print(
                    "  \(other.label)  \(other.address)\(other.mac.map { " \($0)" } ?? "") on \(other.interface), heard \(HumanDuration.format(other.heardSecondsAgo)) ago"
                )
            }
        }
        if status.refusals.isEmpty {
            print("refusals:      none")
        } else {
            print("refusals:")
            for (reason, count) in status.refusals.sorted(by: { $0.key < $1.key }) { print("  \(reason): \(count)") }
        }
    }
}

struct Hosts: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "The sleeping hosts: name, MAC, addresses, services, lease left, state, last wake.")
    @OptionGroup var connection: Connection
    @Option(name: .long, help: "Only hosts in this state (starting, asleep, awake, waking, standby).")
    var state: HostSummary.State?
    @Option(name: .long, help: "Only hosts whose name, MAC or an address contains this text.") var search: String?

    func run() throws {
        let response = try Client.ask(
            ControlRequest(command: .hosts, state: self.state, search: self.search), connection)
        guard !connection.json else { return }
        let hosts = response.hosts ?? []
        guard !hosts.isEmpty else {
            print("no sleeping hosts")
            return
        }
        let rows = hosts.map { host in
            [
                host.name ?? "?", host.mac, host.addresses.joined(separator: " "), host.services.joined(separator: " "),
                HumanDuration.format(host.leaseSeconds), host.state.rawValue,
                host.lastWake.map { "\(Client.ago($0.time)) (\(Client.reason($0)))" } ?? "-",
            ]
        }
        Client.table(["NAME", "MAC", "ADDRESSES", "SERVICES", "LEASE", "STATE", "LAST WAKE"], rows)
    }
}

struct Host: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "One host: its records with TTLs, owner data, wake history.")
    @OptionGroup var connection: Connection
    @Argument(help: "Host name (mac-mini or mac-mini.local) or MAC address.") var target: String

    func run() throws {
        let response = try Client.ask(ControlRequest(command: .host, target: self.target), connection)
        guard !connection.json, let host = response.host else { return }
        Client.printDetail(host)
    }
}

struct Wake: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Wake a sleeping host now (magic packets until it answers).")
    @OptionGroup var connection: Connection
    @Argument(help: "Host name or MAC address.") var target: String

    func run() throws {
        let response = try Client.ask(ControlRequest(command: .wake, target: self.target), connection)
        guard !connection.json, let host = response.host else { return }
        print(
            "waking \(host.summary.name ?? host.summary.mac) (\(host.wakeMAC)): magic packets every 2 s until it answers"
        )
    }
}

struct Forget: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Stop proxying a host: drop its records and release its addresses (it is not woken).")
    @OptionGroup var connection: Connection
    @Argument(help: "Host name or MAC address.") var target: String
    @Flag(name: .long, help: "Send goodbyes so that browsers drop its services at once (as on lease expiry).")
    var goodbyes = false

    func run() throws {
        let response = try Client.ask(
            ControlRequest(command: .forget, target: self.target, goodbyes: self.goodbyes), connection)
        guard !connection.json, let host = response.hosts?.first else { return }
        print("forgot \(host.name ?? host.mac)\(self.goodbyes ? " (goodbyes sent)" : "")")
    }
}

struct ReleaseAll: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "release-all",
        abstract:
            "Decommissioning: wake every sleeping host and stop proxying it (each re-registers with another proxy).")
    @OptionGroup var connection: Connection
    @Flag(name: .long, help: "Really do it.") var yes = false
    @Flag(
        name: .long,
        help:
            "Hand each host to the best other sleep proxy on its link first (with the host's own Owner option, as Apple's proxy does); wake only those none took."
    )
    var transfer = false

    func validate() throws {
        guard self.yes else { throw ValidationError("this wakes every sleeping host; add --yes to confirm") }
    }

    func run() throws {
        let response = try Client.ask(ControlRequest(command: .releaseAll, transfer: self.transfer), connection)
        guard !connection.json else { return }
        if let transferred = response.transferred {
            let hosts = response.hosts ?? []
            let taken = hosts.filter { transferred[$0.mac] != nil }
            let woken = hosts.filter { transferred[$0.mac] == nil }
            for host in taken { print("transferred \(host.name ?? host.mac) to \(transferred[host.mac]!)") }
            for host in woken { print("woke \(host.name ?? host.mac) (no other proxy took it)") }
            print(
                "\(taken.count) transferred, \(woken.count) woken and released; you can stop sleepproxyd now")
            return
        }
        let hosts = response.hosts ?? []
        print(
            "released \(hosts.count) host\(hosts.count == 1 ? "" : "s")\(hosts.isEmpty ? "" : ": " + hosts.map { $0.name ?? $0.mac }.joined(separator: ", ")); you can stop sleepproxyd now"
        )
    }
}

struct Events: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "The wake log: wakes and their reasons, outcomes, ignored connections.")
    @OptionGroup var connection: Connection
    @Option(name: .long, help: "Only this host (name or MAC).") var host: String?
    @Option(name: .long, help: "Only events in the last DURATION (90s, 15m, 2h, 7d).") var since: String?
    @Flag(name: .long, help: "Keep printing new events as they happen.") var follow = false

    func validate() throws {
        if let since, HumanDuration.parse(since) == nil {
            throw ValidationError("--since takes a duration such as 90s, 15m, 2h or 7d, not \"\(since)\"")
        }
    }

    func run() throws {
        let start = self.since.flatMap(HumanDuration.parse).map { Date(timeIntervalSinceNow: -$0) }
        let request = ControlRequest(command: .events, target: self.host, since: start, follow: self.follow)
        try Client.ask(request, connection, stream: self.follow) { response in
            guard !connection.json else { return }
            // Written straight to the descriptor: with --follow each line must show at once, even into a pipe.
            for event in response.events ?? [] {
                Client.writeOut(Array((Client.eventLine(event) + "\n").utf8))
            }
        }
    }
}

// MARK: - Talking to the daemon

enum Client {
    struct Failure: Error, CustomStringConvertible {
        var description: String
    }

    /// Sends one request and returns the first response (printed as JSON with --json). `stream` keeps reading and
    /// hands every response to `each` until the daemon closes the connection.
    @discardableResult
    static func ask(
        _ request: ControlRequest, _ connection: Connection, stream: Bool = false,
        each: ((ControlResponse) -> Void)? = nil
    ) throws -> ControlResponse {
        let fd = try self.connect(connection.socket)
        defer { close(fd) }
        let line = try ControlProtocol.frame(request)
        guard line.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }) == line.count else {
            throw Failure(description: "the daemon closed the connection")
        }
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        var first: ControlResponse? = nil
        while true {
            let count = recv(fd, &chunk, chunk.count, 0)
            if count <= 0 { break }
            buffer += chunk[0..<count]
            for line in try ControlProtocol.takeLines(from: &buffer) {
                let response = try ControlProtocol.decode(ControlResponse.self, from: line)
                guard response.ok else {
                    throw Failure(description: response.error ?? "the daemon refused the request")
                }
                if connection.json { Client.writeOut(line + [0x0A]) }
                each?(response)
                if first == nil { first = response }
                if !stream { return response }
            }
        }
        guard let first else { throw Failure(description: "the daemon closed the connection without answering") }
        return first
    }

    static func connect(_ path: String) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "cannot create a socket: \(String(cString: strerror(errno)))") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            throw Failure(description: "socket path too long: \(path)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, byte) in bytes.enumerated() { raw[i] = byte }
        }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        if result != 0 {
            let code = errno
            close(fd)
            switch code {
            case ENOENT, ECONNREFUSED:
                throw Failure(
                    description: "sleepproxyd is not running (nothing listens on \(path)); start it, or pass --socket")
            case EACCES, EPERM:
                throw Failure(
                    description:
                        "permission denied on \(path): run as root or as a member of the daemon's control group")
            default: throw Failure(description: "cannot connect to \(path): \(String(cString: strerror(code)))")
            }
        }
        return fd
    }

    static func ago(_ date: Date) -> String { "\(HumanDuration.format(Date().timeIntervalSince(date))) ago" }

    static func reason(_ event: WakeLogEntry) -> String {
        let trigger = event.trigger
        switch trigger.type {
        case .connection:
            return "\(trigger.transport ?? "?")/\(trigger.port.map(String.init) ?? "?") from \(trigger.client ?? "?")"
        case .addressConflict: return "address \(trigger.address ?? "?") claimed by \(trigger.from ?? "?")"
        case .mdnsConflict: return "mDNS conflict on \(trigger.name ?? "?")"
        case .leaseExpired, .administrator: return trigger.type.rawValue
        }
    }

    /// ISO 8601 in the machine's time zone ("2026-11-23T15:04:05+01:00", "Z" for UTC), from the C library:
    /// FoundationEssentials alone knows no time zone but UTC, and the full Foundation (with ICU's tables) is
    /// 40 MB of the binary for this one line.
    static func localTime(_ date: Date) -> String {
        // What the daemon sent is not trusted to be a sane date: converting an out-of-range one would trap.
        let since1970 = date.timeIntervalSince1970.rounded(.down)
        guard since1970.isFinite, abs(since1970) < 1e12 else { return "\(date)" }
        var seconds = time_t(since1970)
        var parts = tm()
        guard localtime_r(&seconds, &parts) != nil else { return "\(date)" }
        var buffer = [CChar](repeating: 0, count: 64)
        let count = strftime(&buffer, buffer.count, "%Y-%m-%dT%H:%M:%S", &parts)
        let stamp = String(decoding: buffer.prefix(count).map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let offset = parts.tm_gmtoff
        if offset == 0 { return stamp + "Z" }
        let minutes = abs(offset) / 60
        let sign = offset < 0 ? "-" : "+"
        let hours = minutes / 60 < 10 ? "0\(minutes / 60)" : "\(minutes / 60)"
        let rest = minutes % 60 < 10 ? "0\(minutes % 60)" : "\(minutes % 60)"
        return "\(stamp)\(sign)\(hours):\(rest)"
    }

    /// "12.3": one decimal, as printf's %.1f.
    static func tenths(_ value: Double) -> String {
        guard value.isFinite, abs(value) < 1e12 else { return "\(value)" }
        let tenths = Int((max(0, value) * 10).rounded())
        return "\(tenths / 10).\(tenths % 10)"
    }

    /// Bytes straight to standard output, unbuffered (each line of `events --follow` shows at once).
    static func writeOut(_ bytes: [UInt8]) {
        var written = 0
        while written < bytes.count {
            let count = bytes[written...].withUnsafeBytes { write(1, $0.baseAddress, $0.count) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { return }
            written += count
        }
    }

    static func eventLine(_ event: WakeLogEntry) -> String {
        let time = Self.localTime(event.time)
        let who = event.hostName ?? event.mac
        switch event.kind {
        case .wake: return "\(time)  \(who)  woken: \(self.reason(event))\(event.rule.map { " (\($0))" } ?? "")"
        case .awake: return "\(time)  \(who)  awake after \(Self.tenths(event.seconds ?? 0)) s"
        case .noResponse: return "\(time)  \(who)  no sign of waking after \(event.attempts ?? 0) magic packets"
        case .ignored:
            return "\(time)  \(who)  not woken: \(self.reason(event)) (no registered service)\(Self.times(event))"
        case .declined:
            var why = event.rule ?? "declined"
            if let ports = event.scanPorts, let hosts = event.scanHosts {
                why +=
                    " (\(ports) ports of one host, \(hosts) host\(hosts == 1 ? "" : "s"); ignored for \(HumanDuration.format(Double(event.quarantineSeconds ?? 0))) after its last packet)"
            }
            return "\(time)  \(who)  not woken: \(self.reason(event)), \(why)\(Self.times(event))"
        }
    }

    /// " ×12" when the daemon collapsed several declines into one line.
    static func times(_ event: WakeLogEntry) -> String {
        guard let count = event.count, count > 1 else { return "" }
        return " ×\(count)"
    }

    static func printDetail(_ host: HostDetail) {
        let summary = host.summary
        print("\(summary.name ?? "?")  \(summary.mac) on \(summary.interface)  \(summary.state.rawValue)")
        if let states = host.addressStates, !states.isEmpty {
            print("  addresses:  \(states.map { "\($0.address) (\($0.state.rawValue))" }.joined(separator: " "))")
        } else {
            print("  addresses:  \(summary.addresses.joined(separator: " "))")
        }
        if let seen = summary.lastSeenAwake {
            print("  last seen awake: \(seen), \(HumanDuration.format(summary.lastSeenAwakeSecondsAgo ?? 0)) ago")
        }
        print("  services:   \(summary.services.joined(separator: " "))")
        print(
            "  lease:      \(HumanDuration.format(summary.leaseSeconds)) left; registered \(HumanDuration.format(host.registeredSecondsAgo)) ago"
        )
        print(
            "  owner:      sequence \(host.sequence), wake MAC \(host.wakeMAC), \(host.hasPassword ? "SecureOn password" : "no password")"
        )
        print("  records:")
        self.table(
            ["NAME", "TYPE", "TTL", "DATA"],
            host.records.map { [$0.name, $0.type + ($0.unique ? "" : " (shared)"), "\($0.ttl)", $0.data] },
            indent: "    ")
        if let upnp = host.upnp {
            print("  UPnP (SSDP):")
            if upnp.isEmpty { print("    none heard") }
            for location in Array(Set(upnp.map(\.location))).sorted() {
                let server = upnp.first { $0.location == location }?.server.map { "  \($0)" } ?? ""
                print("    \(location)\(server)")
                self.table(
                    ["TYPE", "MAX-AGE", "HEARD"],
                    upnp.filter { $0.location == location }.map {
                        [$0.type, "\($0.maxAge) s", HumanDuration.format($0.heardSecondsAgo) + " ago"]
                    }, indent: "      ")
            }
        }
        print("  wake history:")
        if host.wakeHistory.isEmpty { print("    none") }
        for event in host.wakeHistory { print("    " + self.eventLine(event)) }
    }

    static func table(_ header: [String], _ rows: [[String]], indent: String = "") {
        var widths = header.map(\.count)
        for row in rows { for (i, cell) in row.enumerated() { widths[i] = max(widths[i], cell.count) } }
        func line(_ cells: [String]) -> String {
            indent
                + cells.enumerated().map { i, cell in
                    i == cells.count - 1 ? cell : cell + String(repeating: " ", count: max(0, widths[i] - cell.count))
                }.joined(separator: "  ")
        }
        print(line(header))
        for row in rows { print(line(row)) }
    }
}
