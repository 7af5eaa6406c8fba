import Foundation
import SleepProxyIO
import SleepProxyTestSupport
import SleepProxyWire

#if canImport(Glibc)
    import Glibc
#endif

/// A busy LAN against the daemon holding 200 sleeping hosts (issue: years on a small box): 500 devices' ordinary
/// chatter (mDNS browses and announcements, SSDP NOTIFY and M-SEARCH, ARP and neighbour solicitations, each from
/// its own MAC at the rates real devices use), then one device asking for a sleeping host's SRV record 1,000
/// times a second, while another machine times its questions. Played by `scripts/lab/busy-lan` (seeded, the same
/// on every run); reported: the daemon's CPU in each phase, how often the stormed record went out on the link,
/// and the other machine's answer times. Twice: browses carrying known answers, and carrying none.
enum BusyLANBenchmark {
    static let sleepers = 200
    static let devices = 500
    static let phaseSeconds = 20

    static var script: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent("scripts/lab/busy-lan")
    }

    static func runLab(daemon: URL) throws {
        guard labCanRun("busy LAN benchmark", daemon: daemon) else { return }
        print(
            "Busy LAN: \(Self.devices) devices chattering, then a storm of 1,000 questions a second, at a proxy holding \(Self.sleepers) sleeping hosts"
        )
        let boxes: [BusyBox] =
            ProcessInfo.processInfo.environment["BENCH_BOXES"].map { names in
                BusyBox.allCases.filter { names.split(separator: ",").contains(Substring($0.name)) }
            } ?? BusyBox.allCases
        var idleStorm: [Bool: Double] = [:]
        for box in boxes {
            print("  \(box):")
            for knownAnswers in [true, false] {
                let result = try self.run(daemon: daemon, knownAnswers: knownAnswers, box: box)
                if box == .idle { idleStorm[knownAnswers] = result.stormCPU }
                if box != .idle, let idle = idleStorm[knownAnswers] {
                    let ratio = result.stormCPU / max(idle, 1e-6)
                    print(
                        String(
                            format: "      chatter and the storm against the idle box: %.2f× (target ≤ 1.5×: %@)",
                            ratio, ratio <= 1.5 ? "met" : "NOT MET"))
                }
            }
        }
    }

    struct Result {
        var chatterCPU: Double
        var stormCPU: Double
    }

    static func run(daemon: URL, knownAnswers: Bool, box: BusyBox) throws -> Result {
        let lab = try LabNetwork()
        defer { lab.close() }
        let proxy = try lab.addHost("proxy", mac: MACAddress("02:53:50:00:00:01")!, ipv4: ["169.254.0.1/16"])
        let clients = try lab.addHost("clients", mac: MACAddress("02:53:50:00:00:02")!, ipv4: ["169.254.0.2/16"])
        let chatter = try lab.addHost("chatter", mac: MACAddress("02:53:50:00:00:03")!, ipv4: ["169.254.250.1/16"])
        let stormer = try lab.addHost("stormer", mac: MACAddress("02:53:50:00:00:04")!, ipv4: ["169.254.250.2/16"])
        let querier = try lab.addHost("querier", mac: MACAddress("02:53:50:00:00:05")!, ipv4: ["169.254.250.3/16"])
        for host in [stormer, querier] {
            try host.namespace.check(["ip", "route", "replace", "224.0.0.0/4", "dev", "eth0"])
        }
        // The sleepers' addresses, as the scale benchmark sets them up: their side never answers ARP.
        try clients.namespace.check(["sysctl", "-qw", "net.ipv4.conf.all.arp_ignore=8"])
        try clients.namespace.check(["sysctl", "-qw", "net.ipv4.conf.eth0.arp_ignore=8"])
        let batch = lab.directory.appendingPathComponent("addresses")
        try (0..<Self.sleepers).map { "address add \(ScaleBenchmarks.address($0))/16 dev eth0\n" }.joined()
            .write(to: batch, atomically: true, encoding: .utf8)
        try clients.namespace.check(["ip", "-batch", batch.path])
        let neighbours = lab.directory.appendingPathComponent("neighbours")
        try (0..<Self.sleepers).map {
            "neigh replace \(ScaleBenchmarks.address($0)) lladdr \(clients.mac) dev eth0 nud permanent\n"
                + "neigh replace \(ScaleBenchmarks.linkLocal($0)) lladdr \(clients.mac) dev eth0 nud permanent\n"
        }.joined().write(to: neighbours, atomically: true, encoding: .utf8)
        try proxy.namespace.check(["ip", "-batch", neighbours.path])

        let state = lab.directory.appendingPathComponent("state")
        let socket = lab.directory.appendingPathComponent("control.sock")
        let process = try proxy.spawn(
            [
                daemon.path, "--interface", "eth0", "--state-directory", state.path, "--control-socket", socket.path,
                "--log-level", "warning",
            ], logName: "busy-lan")
        defer { process.stop() }
        try ScaleLabBenchmark.waitForControlSocket(socket)
        _ = try ScaleLabBenchmark.register(
            0..<Self.sleepers, from: clients, acknowledged: AcknowledgedTimes(count: Self.sleepers))
        // Probed, found asleep and announced: the takeover's probes and the announcements are over by then.
        usleep(12_000_000)
        // The box made busy or slow from here to the end of the run (bounded by the run's own length).
        let load = try box.impose(on: process.pid, seconds: 4 * Self.phaseSeconds + 60)
        defer { load.end() }
        let idleStart = ScaleLabBenchmark.cpuSeconds(process.pid)
        usleep(useconds_t(Self.phaseSeconds) * 1_000_000)
        let idle = (ScaleLabBenchmark.cpuSeconds(process.pid) - idleStart) / Double(Self.phaseSeconds)

        let script = ["/usr/bin/python3", Self.script.path]
        let sleeper = ScaleBenchmarks.address(7).description
        let record = "Host 7._svc0._tcp.local."
        let query =
            script + [
                "query", "--rate", "20", "--seconds", "\(Self.phaseSeconds)", "--name", "host7.local.", "--server",
                "224.0.0.251",
            ]
        let chattering = try chatter.spawn(
            script + ["chatter", "--devices", "\(Self.devices)", "--seconds", "\(3 * Self.phaseSeconds)"]
                + (knownAnswers ? [] : ["--no-known-answers"]), logName: "chatter")
        defer { chattering.stop() }
        usleep(2_000_000)
        var before = ScaleLabBenchmark.cpuSeconds(process.pid)
        let quiet = try querier.run(query, timeout: .seconds(Self.phaseSeconds + 30)).stdout
        let chatterCPU = (ScaleLabBenchmark.cpuSeconds(process.pid) - before) / Double(Self.phaseSeconds)
        before = ScaleLabBenchmark.cpuSeconds(process.pid)
        let storming = try stormer.spawn(
            script + ["storm", "--rate", "1000", "--seconds", "\(Self.phaseSeconds)", "--name", record],
            logName: "storm")
        let stormed = try querier.run(query, timeout: .seconds(Self.phaseSeconds + 30)).stdout
        // Its report is its last word: written once the storm is over.
        storming.waitForOutput("storm:", timeout: 30)
        let stormCPU = (ScaleLabBenchmark.cpuSeconds(process.pid) - before) / Double(Self.phaseSeconds)
        let stormLine = storming.output.split(separator: "\n").last { $0.hasPrefix("storm:") } ?? "storm: no report"

        print("    browses \(knownAnswers ? "with the known answers of a warm cache" : "with no known answers"):")
        print(String(format: "      idle with %d sleeping hosts: %.2f %% of a core", Self.sleepers, idle * 100))
        print(
            String(
                format: "      ordinary chatter: %.2f %% of a core (target ≤ 1 %%: %@)", chatterCPU * 100,
                chatterCPU <= 0.01 ? "met" : "NOT MET"))
        print("        another machine's questions for \(sleeper): \(Self.timings(quiet))")
        print(
            String(
                format: "      chatter and the storm: %.2f %% of a core (target ≤ 10 %%: %@)", stormCPU * 100,
                stormCPU <= 0.10 ? "met" : "NOT MET"))
        print("        \(stormLine) (RFC 6762 §6.2: at most once a second)")
        print(
            "        another machine's questions during the storm: \(Self.timings(stormed)) (target 0 lost, p99 ≤ 5 ms)"
        )
        return Result(chatterCPU: chatterCPU, stormCPU: stormCPU)
    }

    static func timings(_ output: String) -> String {
        (output.split(separator: "\n").last { $0.hasPrefix("query:") }?.dropFirst("query: ".count)).map(String.init)
            ?? "no report"
    }
}
