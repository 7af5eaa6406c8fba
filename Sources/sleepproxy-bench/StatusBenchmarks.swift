import CSleepProxyLinux
import Foundation
import SleepProxyControl
import SleepProxyStatusPage
import SleepProxyTestSupport

/// The status page (docs/status-page.md): rendering alone, and the pages as a browser gets them from a daemon
/// holding 10,000 hosts (targets: the overview under 50 ms, a host's page under 5 ms).
enum StatusBenchmarks {
    static let now = Date()
    static let time = LocalTime(offsetSeconds: 0, zone: "UTC")

    static func summary(_ index: Int) -> HostSummary {
        HostSummary(
            name: "host-\(index).local.", mac: String(format: "02:53:50:00:%02x:%02x", index >> 8 & 0xFF, index & 0xFF),
            interface: "eth0", addresses: ["169.254.\(index >> 8).\(index & 0xFF)", "fe80::\(index)"],
            services: ["_smb._tcp:445", "_ssh._tcp:22", "_http._tcp:80"], leaseSeconds: 7000, state: .asleep,
            lastWake: nil,
            addressStates: [.init(address: "169.254.\(index >> 8).\(index & 0xFF)", state: .answering)])
    }

    /// A host's busiest possible day: `HistoryBook.recordsPerHost` records, a third of them wakes.
    static func busyDay() -> HostHistory {
        var book = HistoryBook()
        for index in 0..<HistoryBook.recordsPerHost {
            let time = now.addingTimeInterval(-86_000 + Double(index) * 170)
            if index % 3 == 0 {
                book.append(
                    HistoryRecord(
                        WakeLogEntry(
                            kind: index % 2 == 0 ? .wake : .declined, time: time, mac: "m", interface: "eth0",
                            hostName: "h",
                            trigger: .init(type: .connection, transport: "tcp", client: "192.0.2.9", port: 445),
                            seconds: nil, attempts: nil, rule: "resolved-first", summary: "s")))
            } else {
                let state: PresenceState = index % 3 == 1 ? .asleep : .handedBack
                book.append(HistoryRecord(time: time, mac: "m", hostName: "h", state: state, note: "n"))
            }
        }
        return book.history(of: "m", from: now.addingTimeInterval(-86_400), to: now)!
    }

    static func run() throws {
        print("Status page rendering (one core):")
        let status = DaemonStatus(
            version: "bench", startedAt: now, uptimeSeconds: 1, interfaces: ["eth0"], advertisedName: "10-34-10-70.0 p",
            hosts: 10_000, records: 240_000, registrationsAccepted: 10_000, refusals: [:], queriesAnswered: 0, wakes: 0,
            magicPackets: 0, hostsByState: [.asleep: 10_000], lastDay: .init(wakes: 3, declined: 9, wakesByReason: [:]))
        let page = (0..<StatusRoute.HostQuery.rowsPerPage).map(Self.summary)
        let overview = measure("overview page of 100 rows (of 10,000 hosts)", iterations: 200, target: 1_000) {
            StatusPage.overview(
                status: status, hosts: page, total: 10_000, query: .init(), now: now, time: time
            ).utf8.count
        }
        let day = Self.busyDay()
        let detail = HostDetail(
            summary: Self.summary(1), sequence: 1, wakeMAC: "02:53:50:00:00:01", hasPassword: false,
            registeredSecondsAgo: 100,
            records: (0..<24).map { .init(name: "r\($0).local.", type: "TXT", ttl: 4500, unique: true, data: "k=v") },
            wakeHistory: [], history: day)
        let host = measure("host page, 24 records, a full day (500 records)", iterations: 200, target: 200) {
            StatusPage.host(detail: detail, history: day, status: nil, time: time).utf8.count
        }
        print(
            String(
                format:
                    "  rendering: overview %.3f ms, busiest host page %.3f ms (the lab figures below add the engine and HTTP)",
                1000 / overview, 1000 / host))
        // What the history costs a proxy holding 10,000 hosts: each registered and fell asleep.
        let heapBefore = csp_heap_bytes_in_use()
        var held = HistoryBook()
        for host in 0..<10_000 {
            let mac = String(format: "02:53:50:00:%02x:%02x", host >> 8 & 0xFF, host & 0xFF)
            held.append(
                HistoryRecord(
                    time: now, mac: mac, hostName: "host-\(host).local.", state: .starting, note: "registered"))
            held.append(
                HistoryRecord(
                    time: now, mac: mac, hostName: "host-\(host).local.", state: .asleep,
                    note: "169.254.\(host >> 8).\(host & 0xFF) did not answer its probes"))
        }
        let heapAfter = csp_heap_bytes_in_use()
        print(
            "  history of 10,000 hosts (registered, asleep): \(format(Double(heapAfter - heapBefore) / 1024)) KiB of heap, \(held.count) records"
        )
        var book = HistoryBook()
        var index = 0
        _ = measure("history record kept (book full at 20,000)", iterations: 50_000, target: 100_000) {
            index += 1
            book.append(HistoryRecord(time: now, mac: "m\(index % 10_000)", hostName: nil, state: .asleep, note: nil))
            return book.count
        }
    }

    /// Pages and API answers timed from the proxy's own namespace, keep-alive, 100 of each, while a daemon holds
    /// 10,000 hosts of 24 records (the scale storm's lab).
    static func runLab(daemon: URL) throws {
        guard labCanRun("Status page at 10,000 hosts", daemon: daemon) else { return }
        print("Status page at 10,000 hosts (a daemon in a lab; GET over loopback, keep-alive, 100 requests each):")
        let figures = try ScaleLabBenchmark.storm(daemon: daemon, hosts: 10_000) { proxy in
            let result = try proxy.run(["/usr/bin/python3", "-c", Self.client], timeout: .seconds(120))
            guard result.succeeded else {
                print("  the page client failed: \(result)")
                return
            }
            for line in result.stdout.split(separator: "\n") {
                let fields = line.split(separator: " ").map(String.init)
                guard fields.count >= 3,
                    let values = fields.dropFirst(2).first.map({ $0.split(separator: ",").compactMap { Double($0) } })
                else { continue }
                let (label, bytes) = (fields[0], fields[1])
                let p50 = percentile(values, 0.5), p99 = percentile(values, 0.99)
                let target: Double? = label.hasPrefix("/host/") ? 5 : (label.hasPrefix("/?") || label == "/") ? 50 : nil
                let verdict =
                    target.map { p99 <= $0 ? "target p99 ≤ \(Int($0)) ms: met" : "target p99 ≤ \(Int($0)) ms: NOT MET" }
                    ?? ""
                print(
                    String(
                        format: "  %@ (%@ bytes): p50 %.2f ms, p99 %.2f ms, max %.2f ms  %@", label, bytes, p50, p99,
                        values.max() ?? .nan, verdict))
            }
        }
        print("  the same storm, with the history on:")
        ScaleLabBenchmark.report(figures)
    }

    /// Fetches one host's MAC from the API, then times each path; prints "PATH BYTES ms,ms,...".
    static let client = """
        import http.client, json, time
        c = http.client.HTTPConnection('127.0.0.1', 9580, timeout=30)
        def get(path):
            c.request('GET', path); r = c.getresponse(); body = r.read()
            if r.status != 200: raise SystemExit(f'{path}: HTTP {r.status}')
            return body
        mac = json.loads(get('/api/v1/hosts?offset=5000&limit=1'))['hosts'][0]['mac']
        paths = ['/', '/?state=asleep&page=50', '/?q=169.254.30', '/host/' + mac.replace(':', '%3A'),
                 '/api/v1/hosts/' + mac.replace(':', '%3A'), '/api/v1/status', '/api/v1/hosts?limit=1000', '/metrics']
        for path in paths:
            get(path)
            times = []
            for _ in range(100):
                t = time.perf_counter(); body = get(path); times.append((time.perf_counter() - t) * 1000)
            print(path.replace(' ', '%20'), len(body), ','.join(f'{x:.3f}' for x in times))
        """
}

/// `sleepproxy-bench status-sample DIR`: the host page of a sample day (a Mac asleep overnight, woken by an app in
/// the morning, Home Assistant's scans declined all day), written to DIR with its stylesheet for the README's
/// picture. Nothing is measured.
enum StatusSample {
    static func write(to directory: URL) throws {
        let time = LocalTime(offsetSeconds: 0, zone: "UTC")
        let now = Date(timeIntervalSince1970: 1_795_456_800)  // 2026-11-25 16:00 UTC
        let mac = "02:53:50:00:00:02"
        let name = "studio-mac.local."
        func at(_ hour: Double) -> Date { now.addingTimeInterval((hour - 16) * 3600 - 86_400 * (hour > 16 ? 1 : 0)) }
        var book = HistoryBook()
        func state(_ hour: Double, _ state: PresenceState, _ note: String) {
            book.append(HistoryRecord(time: at(hour), mac: mac, hostName: name, state: state, note: note))
        }
        func event(
            _ hour: Double, _ kind: WakeLogEntry.Kind, client: String? = nil, port: UInt16? = nil, rule: String? = nil,
            count: Int? = nil, seconds: Double? = nil
        ) {
            book.append(
                HistoryRecord(
                    WakeLogEntry(
                        kind: kind, time: at(hour), mac: mac, interface: "eth0", hostName: name,
                        trigger: .init(type: .connection, transport: "tcp", client: client, port: port),
                        seconds: seconds,
                        attempts: nil, rule: rule, count: count, summary: "")))
        }
        state(16.5, .awake, "answers itself")
        state(18.2, .handedBack, "mdns")
        state(23.1, .starting, "registered")
        state(23.1 + 0.002, .asleep, "no probe answer")
        for hour in stride(from: 0.5, to: 7, by: 2.0) {
            event(hour, .declined, client: "192.0.2.30", port: 445, rule: "scanner", count: 96)
        }
        state(2.9, .handedBack, "own-name-probe")
        state(2.95, .starting, "registered")
        state(2.96, .asleep, "no probe answer")
        event(7.7, .wake, client: "192.0.2.41", port: 445, rule: "resolved-first")
        event(7.7 + 0.0003, .awake, seconds: 1.2)
        state(7.7 + 0.0004, .handedBack, "owner-option")
        state(12.4, .starting, "registered")
        state(12.41, .asleep, "no probe answer")
        event(13.0, .declined, client: "192.0.2.30", port: 22, rule: "monitor-budget")
        event(14.1, .wake, client: "192.0.2.52", port: 548, rule: "retransmitted")
        event(14.1 + 0.0003, .awake, seconds: 0.9)
        state(14.1 + 0.0004, .handedBack, "owner-option")
        state(15.2, .starting, "registered")
        state(15.21, .asleep, "no probe answer")
        let history = book.history(of: mac, from: now.addingTimeInterval(-86_400), to: now)!
        let summary = HostSummary(
            name: name, mac: mac, interface: "eth0", addresses: ["192.0.2.2", "2001:db8::2"],
            services: ["_smb._tcp:445", "_afpovertcp._tcp:548", "_ssh._tcp:22"], leaseSeconds: 6500, state: .asleep,
            lastWake: history.decisions.last { $0.kind == .wake }, lastSeenAwake: "mDNS from 192.0.2.2",
            lastSeenAwakeSecondsAgo: 2900,
            addressStates: [
                .init(address: "192.0.2.2", state: .answering), .init(address: "2001:db8::2", state: .answering),
            ])
        let detail = HostDetail(
            summary: summary, sequence: 41, wakeMAC: mac, hasPassword: false, registeredSecondsAgo: 2900, records: [],
            wakeHistory: [], history: history)
        let page = StatusPage.host(detail: detail, history: history, status: nil, time: time)
        let statics = directory.appendingPathComponent("static")
        try FileManager.default.createDirectory(at: statics, withIntermediateDirectories: true)
        try page.write(to: directory.appendingPathComponent("host.html"), atomically: true, encoding: .utf8)
        for asset in StatusAssets.Asset.allCases {
            try asset.body.write(to: statics.appendingPathComponent(asset.rawValue), atomically: true, encoding: .utf8)
        }
        print("wrote \(directory.path)/host.html and static/")
    }
}
