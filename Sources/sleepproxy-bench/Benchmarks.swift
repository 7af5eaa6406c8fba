import Foundation
import NIOCore
import SleepProxyTestSupport
import SleepProxyWire

#if canImport(Glibc)
    import Glibc
#endif

/// Prints throughput figures for the hot paths. Run in release: `swift run -c release sleepproxy-bench`.
/// Every figure is the median of several timed rounds on one thread, so it is a one-core number.
@main
enum Benchmarks {
    static func main() throws {
        var arguments = Array(CommandLine.arguments.dropFirst())
        if let index = arguments.firstIndex(of: "--filter"), index + 1 < arguments.count {
            benchmarkFilter = arguments[index + 1]
            arguments.removeSubrange(index...index + 1)
        }
        if let index = arguments.firstIndex(of: "--smoke") {
            smokeRun = true
            arguments.remove(at: index)
        }
        let groups = arguments.isEmpty ? ["wire", "registration", "responder", "takeover"] : arguments
        print(
            "sleepproxy-bench (\(isDebugBuild ? "DEBUG build: figures are meaningless, use -c release" : "release build"))"
                + (smokeRun ? ", smoke run: every benchmark once, a few iterations, no figure is a measurement" : "")
        )
        let stealBefore = CPUSteal.read()
        defer {
            if let before = stealBefore, let after = CPUSteal.read() {
                print(
                    String(
                        format:
                            "CPU stolen by the hypervisor during the run: %.1f%% (figures are medians of 7 rounds; a high share makes them pessimistic)",
                        after.share(since: before) * 100))
            }
        }
        for group in groups {
            switch group {
            case "wire": try WireBenchmarks.run()
            case "registration":
                try RegistrationBenchmarks.run()
                let daemon = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
                    .appendingPathComponent("sleepproxyd")
                try RegistrationBenchmarks.runLab(daemon: daemon)
                try RegistrationBenchmarks.runLab(daemon: daemon, flood: true)
            case "scale-local":
                ScaleBenchmarks.run()
            case "scale":
                ScaleBenchmarks.run()
                let daemon = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
                    .appendingPathComponent("sleepproxyd")
                try ScaleLabBenchmark.run(daemon: daemon)
            case "takeover":
                let daemon = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
                    .appendingPathComponent("sleepproxyd")
                try TakeoverBenchmarks.runLab(daemon: daemon)
            case "ssdp":
                let daemon = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
                    .appendingPathComponent("sleepproxyd")
                try SSDPBenchmarks.runLab(daemon: daemon)
            case "wake":
                WakeBenchmarks.run()
                let daemon = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
                    .appendingPathComponent("sleepproxyd")
                try WakeBenchmarks.runLab(daemon: daemon)
            case "wake-local":
                WakeBenchmarks.run()
            case "neighbours":
                NeighbourBenchmarks.run()
            case "adoption":
                try AdoptionBenchmarks.run()
                try AdoptionWatchBenchmark.run()
            case "home-assistant":
                try HomeAssistantBenchmarks.run()
            case "busy-lan-local":
                BusyLANFrameCosts.run()
            case "busy-lan":
                BusyLANFrameCosts.run()
                let daemon = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
                    .appendingPathComponent("sleepproxyd")
                try BusyLANBenchmark.runLab(daemon: daemon)
            case "wear":
                let daemon = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
                    .appendingPathComponent("sleepproxyd")
                try WearBenchmark.runLab(daemon: daemon)
            case "crash":
                let daemon = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
                    .appendingPathComponent("sleepproxyd")
                try CrashBenchmark.runLab(daemon: daemon)
            case "month":
                MonthBenchmark.run()
            case "status-local":
                try StatusBenchmarks.run()
            case "status-sample":
                // Not a benchmark: the README's picture of a host page (the directory follows).
                try StatusSample.write(to: URL(fileURLWithPath: arguments.last ?? ".build/status-sample"))
                return
            case "status":
                try StatusBenchmarks.run()
                let daemon = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
                    .appendingPathComponent("sleepproxyd")
                try StatusBenchmarks.runLab(daemon: daemon)
            case "responder-local":
                try ResponderBenchmarks.run()
            case "responder":
                try ResponderBenchmarks.run()
                let daemon = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
                    .appendingPathComponent("sleepproxyd")
                try ResponderBenchmarks.runLab(daemon: daemon)
            default:
                print(
                    "unknown benchmark group '\(group)'; known: wire, registration, neighbours, adoption, home-assistant, busy-lan, busy-lan-local, wear, crash, month, responder, responder-local, scale, scale-local, ssdp, status, status-local, takeover, wake, wake-local"
                )
                exit(2)
            }
        }
    }

    static var isDebugBuild: Bool {
        #if DEBUG
            return true
        #else
            return false
        #endif
    }
}

/// The value at quantile `p` (0 to 1) of `values` by the nearest rank, as every benchmark reports its p50 and
/// p99; NaN when there are none.
func percentile(_ values: [Double], _ p: Double) -> Double {
    let sorted = values.sorted()
    return sorted.isEmpty ? .nan : sorted[min(sorted.count - 1, Int(Double(sorted.count) * p))]
}

/// Whether a lab benchmark can run here (root and the lab's tools, and `daemon` built); says why not when it
/// cannot, naming the benchmark.
func labCanRun(_ name: String, daemon: URL) -> Bool {
    guard Command.canBuildNetworks else {
        print("\(name): skipped (needs root, iproute2 and util-linux to build the lab)")
        return false
    }
    guard FileManager.default.isExecutableFile(atPath: daemon.path) else {
        print("\(name): skipped (\(daemon.path) not built; run swift build -c release)")
        return false
    }
    return true
}

/// Only benchmarks whose label contains this run (`--filter TEXT`).
nonisolated(unsafe) var benchmarkFilter: String? = nil

/// `--smoke`: every benchmark runs, briefly, so that a test run shows that they still work (the responder
/// benchmark once stopped on an answer it no longer found first, and nobody saw it for a while).
nonisolated(unsafe) var smokeRun = false

/// The iterations a measurement makes: as asked, or a handful in a smoke run.
func benchmarkIterations(_ iterations: Int) -> Int { smokeRun ? min(iterations, 20) : iterations }

/// Runs `body` `iterations` times per round for `rounds` rounds; returns operations per second (median round).
func measure(_ label: String, iterations: Int, rounds: Int = 7, target: Double? = nil, _ body: () throws -> Int)
    rethrows -> Double
{
    if let filter = benchmarkFilter, !label.contains(filter) { return 0 }
    let iterations = benchmarkIterations(iterations)
    let rounds = smokeRun ? 1 : rounds
    var sink = 0
    var rates: [Double] = []
    let clock = ContinuousClock()
    // Warm-up round, not counted.
    for _ in 0..<max(1, iterations / 10) { sink &+= try body() }
    for _ in 0..<rounds {
        let start = clock.now
        for _ in 0..<iterations { sink &+= try body() }
        let elapsed = clock.now - start
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        rates.append(Double(iterations) / seconds)
    }
    rates.sort()
    let median = rates[rates.count / 2]
    let best = rates.last!
    var line =
        "  \(label + String(repeating: " ", count: max(0, 52 - label.count))) \(format(median)) ops/s  (\(format(1e9 / median)) ns/op; best round \(format(best)))"
    if let target, !smokeRun {
        line += median >= target ? "  target ≥ \(format(target)): met" : "  target ≥ \(format(target)): NOT MET"
    }
    print(line)
    // Keep the optimiser from discarding the work.
    if sink == 42 { print("") }
    return median
}

func format(_ value: Double) -> String {
    if value >= 100 {
        let rounded = Int(value.rounded())
        var text = String(rounded)
        var index = text.count - 3
        while index > 0 {
            text.insert(",", at: text.index(text.startIndex, offsetBy: index))
            index -= 3
        }
        return text
    }
    return String(Int(value * 10) / 10) + "." + String(Int(value * 10) % 10)
}

/// The "steal" column of /proc/stat: time the hypervisor gave this VM's CPUs to someone else.
struct CPUSteal {
    var steal: Double
    var total: Double

    static func read() -> CPUSteal? {
        guard let text = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
            let line = text.split(separator: "\n").first(where: { $0.hasPrefix("cpu ") })
        else { return nil }
        let fields = line.split(separator: " ").dropFirst().compactMap { Double($0) }
        guard fields.count >= 8 else { return nil }
        return CPUSteal(steal: fields[7], total: fields.reduce(0, +))
    }

    func share(since earlier: CPUSteal) -> Double {
        let total = self.total - earlier.total
        return total > 0 ? (self.steal - earlier.steal) / total : 0
    }
}
