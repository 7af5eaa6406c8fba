import Foundation
import SleepProxyControl
import SleepProxyTestSupport
import Testing

/// `sleepproxyctl` as the adoption suites ask it (docs/adoption.md): what the daemon says of the adopted hosts.
extension ThreeHostSuite {
    func ctl(_ arguments: [String]) throws -> ControlResponse {
        let result = try self.proxy.run(
            [Daemon.sibling("sleepproxyctl")] + arguments + [
                "--socket", self.state.appendingPathComponent("control.sock").path, "--json",
            ])
        // A refusal prints its sentence on stderr and nothing on stdout.
        guard let line = result.stdout.split(separator: "\n").first.map({ Array($0.utf8) }) else {
            return .failure(result.stderr)
        }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return try decoder.decode(ControlResponse.self, from: Data(line))
    }

    /// The adopted sleeper as `sleepproxyctl adopted` shows it.
    func adopted(_ mac: String = ThreeHostLab.sleeperMAC.description) throws -> AdoptedSummary? {
        try self.ctl(["adopted"]).adopted?.first { $0.mac == mac }
    }

    /// Polls (bounded) until the adopted sleeper is in `state`; returns what was seen last. 35 s by default: an idle
    /// host that falls asleep silently is held within 30 s (docs/adoption.md §3).
    @discardableResult
    func waitForAdopted(_ state: String, timeout: Double = 35, also: (AdoptedSummary) -> Bool = { _ in true }) throws
        -> AdoptedSummary?
    {
        var last: AdoptedSummary?
        _ = try waitUntil(timeout: timeout, interval: 0.2) {
            last = try self.adopted()
            return last.map { $0.state == state && also($0) } ?? false
        }
        return last
    }
}
