import Foundation
import SleepProxyTestSupport

/// A month in minutes (docs/long-running.md): the composed engine through 30 days of a home of 20 hosts
/// (12 registering, 8 adopted) that sleep and wake ten times a day and renew their leases every two hours, 40 other
/// devices chattering, and Home Assistant's nmap tracker every two minutes. `BENCH_MONTH_DAYS` shortens it.
enum MonthBenchmark {
    static func run() {
        var configuration = HomeMonth.Configuration()
        if let days = ProcessInfo.processInfo.environment["BENCH_MONTH_DAYS"].flatMap(Int.init) {
            configuration.days = days
        } else if smokeRun {
            configuration.days = 3
        }
        print(
            "Month: \(configuration.days) days of a home (\(configuration.registeredHosts) registering and "
                + "\(configuration.adoptedHosts) adopted hosts, \(configuration.cyclesPerDay) sleeps a day each, "
                + "\(configuration.noiseDevices) other devices, an nmap -F sweep every "
                + "\(configuration.scanInterval.components.seconds) s), the engine audited after every step")
        let clock = ContinuousClock()
        let began = clock.now
        var month = HomeMonth(configuration)
        month.run()
        let wall = clock.now - began
        let report = month.report
        let days = Double(configuration.days)
        func seconds(_ duration: Duration) -> Double {
            Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        }
        print(
            String(
                format:
                    "  %d engine steps in %.0f s of wall time; the engine's own time %.1f s a simulated day (%.3f%% of a core)",
                report.steps, seconds(wall), seconds(report.engineTime) / days,
                seconds(report.engineTime) / days / 864))
        print("  invariants: \(report.violation ?? "held after every step")")
        print(
            "  hosts: \(report.sleeps) times asleep, \(report.handBacks) handed back, \(report.renewals) lease renewals "
                + "while asleep; \(report.questions) questions for hosts held asleep, \(report.unanswered) unanswered")
        print(
            String(
                format:
                    "  a person's wakes: %d started, %d answered (longest %.1f s from the resolve to the hand-back)",
                report.personWakes, report.personWakesAnswered, seconds(report.longestPersonWake)))
        print(
            "  noise: \(report.scans) scans (\(report.scanFrames) frames), \(report.declined) declined; "
                + "\(report.noiseWakes) wakes for noise, \(report.unwantedMagicPackets) magic packets nobody wanted")
        for line in report.noiseWakeExamples { print("    \(line)") }
        let grown = report.grownTables
        let changes = grown.map { "\($0.path) " + String(format: "%.1f → %.1f", $0.early, $0.late) }
        print(
            "  tables: \(report.lastDay.count) counted every hour; grown from the week after day 1 to the last week "
                + "(average daily high): " + (grown.isEmpty ? "none" : changes.joined(separator: ", ")))
        if let heap = report.heap {
            print(
                String(
                    format: "  heap in use (largest of each window): %.2f MiB → %.2f MiB%@",
                    Double(heap.early) / 1_048_576, Double(heap.late) / 1_048_576,
                    report.heapGrew ? " (GREW)" : ""))
        }
        print("  largest tables on the last day:")
        for (path, count) in report.largestTables.prefix(8) { print("    \(count)  \(path)") }
    }
}
