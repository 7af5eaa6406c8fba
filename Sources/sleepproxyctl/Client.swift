import ArgumentParser
import FoundationEssentials
import SleepProxyControl

#if canImport(Glibc)
    import Glibc
#endif

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
        case .netbiosConflict: return "NetBIOS name \(trigger.name ?? "?") registered by \(trigger.from ?? "?")"
        case .addressRequest: return "\(trigger.client ?? "?") asked for \(trigger.address ?? "?") after resolving it"
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
