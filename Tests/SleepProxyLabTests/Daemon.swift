import Foundation
import SleepProxyControl
import SleepProxyTestSupport
import SleepProxyWire

/// Locates the built `sleepproxyd` and runs it inside a lab host.
enum Daemon {
    /// The product directory holds both the test bundle and the executables (`swift build --build-tests`).
    static var executable: URL {
        if let override = ProcessInfo.processInfo.environment["SLEEPPROXYD"] { return URL(fileURLWithPath: override) }
        var candidates = [URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()]
        candidates += Bundle.allBundles.map { $0.bundleURL.deletingLastPathComponent() }
        candidates.append(
            URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../.build/debug")
                .standardized)
        for directory in candidates {
            let url = directory.appendingPathComponent("sleepproxyd")
            if FileManager.default.isExecutableFile(atPath: url.path) { return url }
        }
        return candidates[0].appendingPathComponent("sleepproxyd")
    }

    /// Another executable built beside sleepproxyd (sleepproxyctl, sleepproxy-client).
    static func sibling(_ name: String) -> String {
        self.executable.deletingLastPathComponent().appendingPathComponent(name).path
    }

    /// Asks the daemon (bounded: `timeout`) until the host named `name` is in `expected`, the readiness a lab test
    /// waits for instead of a fixed sleep; returns the last state seen.
    @discardableResult
    static func waitForHost(
        _ name: String, in expected: PresenceState, proxy: LabHost, stateDirectory: URL, timeout: TimeInterval = 15
    ) -> PresenceState? {
        var state: PresenceState? = nil
        waitUntil(timeout: timeout, interval: 0.2) {
            state = self.hosts(proxy: proxy, stateDirectory: stateDirectory)[name]?.state ?? state
            return state == expected
        }
        return state
    }

    /// `environment` (NAME=value) is set for the daemon alone, as `env` does.
    static func start(
        in host: LabHost, stateDirectory: URL, logName: String = "sleepproxyd", extra: [String] = [],
        environment: [String] = []
    ) throws -> ManagedProcess {
        let process = try host.spawn(
            (environment.isEmpty ? [] : ["/usr/bin/env"] + environment) + [
                self.executable.path, "--interface", "eth0", "--state-directory", stateDirectory.path,
                "--control-socket", stateDirectory.appendingPathComponent("control.sock").path, "--log-level",
                ProcessInfo.processInfo.environment["SLEEPPROXYD_LOG_LEVEL"] ?? "info",
            ] + extra, logName: logName)
        // Ready when it answers on its control socket: every socket is bound before that, and the engine runs.
        guard self.answers(in: host, stateDirectory: stateDirectory, timeout: 15) else {
            process.stop(signal: SIGKILL)
            throw CommandError("sleepproxyd did not start: \(process.output)")
        }
        return process
    }

    /// Asks `sleepproxyctl status` (bounded) until the daemon answers.
    static func answers(in host: LabHost, stateDirectory: URL, timeout: TimeInterval) -> Bool {
        let socket = stateDirectory.appendingPathComponent("control.sock").path
        return waitUntil(timeout: timeout) {
            (try? host.run([self.sibling("sleepproxyctl"), "status", "--socket", socket]))?.succeeded == true
        }
    }

    /// The hosts the daemon holds, by name, as `sleepproxyctl hosts` reports them (empty when it does not answer).
    static func hosts(proxy: LabHost, stateDirectory: URL) -> [String: HostSummary] {
        let socket = stateDirectory.appendingPathComponent("control.sock").path
        guard let result = try? proxy.run([self.sibling("sleepproxyctl"), "hosts", "--socket", socket, "--json"]),
            let line = result.stdout.split(separator: "\n").first,
            let response = try? ControlProtocol.decode(ControlResponse.self, from: Array(line.utf8))
        else { return [:] }
        return Dictionary(
            (response.hosts ?? []).map { ($0.name ?? $0.mac, $0) }, uniquingKeysWith: { first, _ in first })
    }

    /// `sleepproxyctl status`, decoded (nil when the daemon does not answer).
    static func status(proxy: LabHost, stateDirectory: URL) -> DaemonStatus? {
        let socket = stateDirectory.appendingPathComponent("control.sock").path
        guard let result = try? proxy.run([self.sibling("sleepproxyctl"), "status", "--socket", socket, "--json"]),
            let line = result.stdout.split(separator: "\n").first
        else { return nil }
        return (try? ControlProtocol.decode(ControlResponse.self, from: Array(line.utf8)))?.status
    }

    /// Asks (bounded) until `condition` holds for the daemon's hosts; false when it never did.
    static func waitForHosts(
        proxy: LabHost, stateDirectory: URL, timeout: TimeInterval = 15, _ condition: ([String: HostSummary]) -> Bool
    ) -> Bool {
        waitUntil(timeout: timeout) { condition(self.hosts(proxy: proxy, stateDirectory: stateDirectory)) }
    }
}

/// Waits that are part of a scenario, not synchronisation: what a real host or a person does takes this long.
enum Scenario {
    /// A sleeping host resumes this long after the first magic packet reaches it (the lab's hosts wake at once
    /// otherwise; a real NIC and kernel take longer still).
    static let resumeAfterMagicPacket: useconds_t = 500_000
    /// A cable pulled from the proxy stays out this long, and the link needs this long to be used again.
    static let cableOut: useconds_t = 1_500_000
    static let cableBack: useconds_t = 2_500_000
    /// After a resume, the sleeping client's address returns this late (a DHCP renewal).
    static let addressReturns: useconds_t = 1_500_000
    /// A responder announces each record twice, a second apart, and multicasts it again no sooner than a second
    /// after (RFC 6762 §8.3, §6): a question asked before this has passed since it started speaking is answered
    /// late or not at all. avahi starting (2 s); the proxy starting to speak for a host (2.5 s: its two
    /// announcements and the second that follows).
    static let pastAvahiAnnouncements: useconds_t = 2_000_000
    static let pastProxyAnnouncements: useconds_t = 2_500_000
}

/// The lab most end-to-end suites use: the proxy (02:53:50:00:00:01, 192.0.2.1, 2001:db8::1), a sleeping host
/// with a TCP service on 8080 (…:02, 192.0.2.2, 2001:db8::2) and a third machine (…:20, 192.0.2.20,
/// 2001:db8::20) named as the suite calls it; the proxy's state directory inside the lab's own.
final class ThreeHostLab {
    static let proxyMAC = MACAddress("02:53:50:00:00:01")!
    static let sleeperMAC = MACAddress("02:53:50:00:00:02")!

    let lab: LabNetwork
    let proxy: LabHost
    let sleeper: SleepingHost
    let third: LabHost
    let state: URL

    init(thirdName: String) throws {
        self.lab = try LabNetwork()
        self.proxy = try self.lab.addHost("proxy", mac: Self.proxyMAC, ipv4: ["192.0.2.1/24"], ipv6: ["2001:db8::1/64"])
        self.sleeper = try SleepingHost(
            lab: self.lab, name: "sleeper", mac: Self.sleeperMAC, ipv4: ["192.0.2.2/24"], ipv6: ["2001:db8::2/64"],
            servicePort: 8080)
        self.third = try self.lab.addHost(
            thirdName, mac: MACAddress("02:53:50:00:00:20")!, ipv4: ["192.0.2.20/24"], ipv6: ["2001:db8::20/64"])
        self.state = self.lab.directory.appendingPathComponent("state")
    }

    /// The suite is done with the lab (its instance is dropped after each test, pass or fail): the sleeper's
    /// capture stops and every namespace and process of the lab goes.
    deinit {
        self.sleeper.close()
        self.lab.close()
    }
}

/// A lab suite on the three-host LAN: it holds the lab (`setup`), names its parts, and leaves the closing to
/// `ThreeHostLab`, so that no suite repeats the scaffolding.
protocol ThreeHostSuite {
    var setup: ThreeHostLab { get }
}

extension ThreeHostSuite {
    var lab: LabNetwork { self.setup.lab }
    var proxy: LabHost { self.setup.proxy }
    var sleeper: SleepingHost { self.setup.sleeper }
    var state: URL { self.setup.state }

    /// Every sample of the daemon's Prometheus endpoint (its default address, in the proxy's namespace), by its
    /// series (`name{labels}`).
    func scrape() throws -> [String: Double] {
        let result = try self.proxy.run([
            "/usr/bin/python3", "-c",
            "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9580/metrics', timeout=5).read().decode())",
        ])
        var samples: [String: Double] = [:]
        for line in result.stdout.split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else {
                continue
            }
            samples[String(line[..<space])] = value
        }
        return samples
    }
}
