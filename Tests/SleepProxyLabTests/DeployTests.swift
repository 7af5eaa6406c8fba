import Foundation
import SleepProxyTestSupport
import Testing

/// The files in deploy/ are checked as the tools that read them would.
@Suite("Deployment files", .lab())
struct DeployTests {
    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../..")
        .standardized

    /// `systemd-analyze verify` on the unit, with ExecStart pointed at the binary just built (verify checks that
    /// the command exists). Its warnings go to stderr with exit 0, so stderr must be empty; a misspelt directive
    /// is shown to produce one, so this check can fail.
    @Test(
        .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/systemd-analyze"), "needs systemd-analyze"))
    func theSystemdUnitVerifies() throws {
        let unit = try String(
            contentsOf: Self.repository.appendingPathComponent("deploy/sleep-proxy.service"), encoding: .utf8)
        #expect(unit.contains("ExecStart=/usr/bin/sleepproxyd "))
        for capability in ["CAP_NET_RAW", "CAP_NET_ADMIN", "CAP_NET_BIND_SERVICE"] {
            #expect(unit.contains(capability))
        }
        for hardening in [
            "ProtectSystem=strict", "NoNewPrivileges=yes", "PrivateTmp=yes", "StateDirectory=sleep-proxy",
            "User=sleep-proxy",
        ] {
            #expect(unit.contains(hardening), "\(hardening) missing")
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("unit-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        func verify(_ text: String, name: String) throws -> CommandResult {
            let url = directory.appendingPathComponent(name)
            try text.replacingOccurrences(of: "/usr/bin/sleepproxyd", with: Daemon.executable.path)
                .replacingOccurrences(
                    of: "/usr/lib/sleep-proxy/sleep-proxy-leave",
                    with: Self.repository.appendingPathComponent("deploy/sleep-proxy-leave").path
                ).write(to: url, atomically: true, encoding: .utf8)
            return try Command.run(["/usr/bin/systemd-analyze", "verify", url.path], timeout: .seconds(60))
        }
        let result = try verify(unit, name: "sleep-proxy.service")
        #expect(result.succeeded && result.stderr.isEmpty, "\(result)")
        let broken = try verify(
            unit.replacingOccurrences(of: "NoNewPrivileges=yes", with: "NoNewPrivilegez=yes"), name: "broken.service")
        #expect(broken.stderr.contains("Unknown key"), "\(broken)")
    }

    /// The example configuration is accepted by the daemon as it ships (every line, commented or not).
    @Test func theExampleConfigurationParses() throws {
        let config = Self.repository.appendingPathComponent("deploy/sleepproxyd.conf")
        let text = try String(contentsOf: config, encoding: .utf8)
        // Uncomment every example setting: each must be a valid line too.
        let uncommented = text.split(separator: "\n", omittingEmptySubsequences: false).map { line in
            line.hasPrefix("#") && line.dropFirst().contains("=") && !line.dropFirst().hasPrefix(" ")
                ? String(line.dropFirst()) : String(line)
        }.joined(separator: "\n")
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("sleepproxyd-\(getpid()).conf")
        defer { try? FileManager.default.removeItem(at: file) }
        for candidate in [text, uncommented] {
            try candidate.write(to: file, atomically: true, encoding: .utf8)
            // --help after a valid configuration prints the usage and exits 0; a bad line exits non-zero first.
            let result = try Command.run(
                [Daemon.executable.path, "--config", file.path, "--help"], timeout: .seconds(30))
            #expect(result.succeeded, "\(result)")
        }
    }

    /// `sleepproxyd --check-config` (run by the unit's ExecReload before the SIGHUP): the shipped file passes; a
    /// bad value names its line; an interface this machine lacks is named; nothing is started either way.
    @Test func checkConfigGivesAVerdictWithoutStarting() throws {
        let shipped = Self.repository.appendingPathComponent("deploy/sleepproxyd.conf").path
        let good = try Command.run(
            [Daemon.executable.path, "--check-config", "--config", shipped], timeout: .seconds(30))
        #expect(good.succeeded && good.stdout.contains("\(shipped) is valid"), "\(good)")
        // The metric presets are accepted by name.
        let preset = FileManager.default.temporaryDirectory.appendingPathComponent(
            "sleepproxyd-preset-\(getpid()).conf")
        defer { try? FileManager.default.removeItem(at: preset) }
        try "metrics = fallback\n".write(to: preset, atomically: true, encoding: .utf8)
        let fallback = try Command.run(
            [Daemon.executable.path, "--check-config", "--config", preset.path], timeout: .seconds(30))
        #expect(fallback.succeeded, "\(fallback)")

        let file = FileManager.default.temporaryDirectory.appendingPathComponent("sleepproxyd-check-\(getpid()).conf")
        defer { try? FileManager.default.removeItem(at: file) }
        for (text, says) in [
            (
                "# a comment\nlog-level = notice\nexpiry-action = sometimes\n",
                "line 3: The value 'sometimes' is invalid for '--expiry-action <expiry-action>'"
            ),
            ("interface = sp-nonexistent9\n", "--interface sp-nonexistent9: no such interface on this machine"),
            // docs/waking.md §5: source rules and the monitor hold-off are checked like every other value.
            (
                "wake-ignore-source = 192.0.2.0/24\nwake-ignore-source = 192.0.2.300\n",
                "line 2: wake-ignore-source \"192.0.2.300\": \"192.0.2.300\" is not an address, a subnet"
            ),
            (
                "wake-only-from = 02:00@192.0.2.1\n",
                "line 1: wake-only-from \"02:00@192.0.2.1\": \"02:00\" is not a MAC"
            ),
            ("wake-monitor-holdoff = 604801\n", "line 1: --wake-monitor-holdoff must be 0 to 604800 seconds"),
            // docs/status-page.md §1: the HTTP server's address, under its new name and its old one.
            ("http-address = 127.0.0.1\n", "line 1: --http-address must be IPv4:PORT such as 127.0.0.1:9580, or none"),
            (
                "prometheus-address = localhost:x\n",
                "line 1: --http-address must be IPv4:PORT such as 127.0.0.1:9580, or none"
            ),
            (
                "metrics = ultimate\n",
                "line 1: --metrics must be four two-digit numbers like 20-40-10-65, or dedicated or fallback"
            ),
            // docs/adoption.md §1: a host's MAC, and the packet side to learn it from.
            ("adopt = 01:00:5e:00:00:fb\n", "line 1: --adopt: \"01:00:5e:00:00:fb\" is not a host's MAC address"),
            ("adopt = 02:53:50:00:00:02\nno-takeover = true\n", "--adopt needs the packet side"),
            // docs/home-assistant.md §2: the broker's URL, credentials only from a file, settings that need it.
            ("mqtt = http://192.0.2.20\n", "line 1: --mqtt: \"http://192.0.2.20\" is not an MQTT URL"),
            ("mqtt = mqtt://ha:secret@192.0.2.20\n", "in the file mqtt-password-file names, not in the URL"),
            ("mqtt-user = sleepproxy\n", "--mqtt-user needs --mqtt"),
            (
                "mqtt = mqtt://192.0.2.20\nmqtt-password-file = /etc/hostname\n",
                "--mqtt-password-file needs --mqtt-user"
            ),
            (
                "mqtt = mqtt://192.0.2.20\nmqtt-user = sp\nmqtt-password-file = /nonexistent/pw\n",
                "--mqtt-password-file: cannot read /nonexistent/pw"
            ),
            ("mqtt = mqtt://192.0.2.20\nmqtt-ca-file = /etc/hostname\n", "--mqtt-ca-file is for an mqtts:// broker"),
            (
                "mqtt = mqtt://192.0.2.20\nmqtt-allow-wake = true\nno-takeover = true\n",
                "--mqtt-allow-wake needs the packet side"
            ),
            ("mqtt = mqtt://192.0.2.20\nmqtt-discovery-prefix = home/#\n", "is not a topic prefix"),
        ] {
            try text.write(to: file, atomically: true, encoding: .utf8)
            let bad = try Command.run(
                [Daemon.executable.path, "--check-config", "--config", file.path], timeout: .seconds(30))
            #expect(!bad.succeeded && bad.stderr.contains(says) && !bad.stdout.contains("is valid"), "\(bad)")
        }
    }

    /// The unit's ExecStop: a stop while the unit is enabled does nothing; a stop for good (disabled) runs
    /// `release-all --transfer` on the daemon's socket; when systemd cannot be asked, nothing is given away. Run
    /// with stand-ins for systemctl and sleepproxyctl.
    @Test func leavingForGoodTransfersAndARestartDoesNothing() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("leave-\(getpid())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let calls = directory.appendingPathComponent("calls")
        let ctl = directory.appendingPathComponent("sleepproxyctl")
        try "#!/bin/sh\necho \"$@\" >> \(calls.path)\necho '1 transferred, 0 woken and released'\n".write(
            to: ctl, atomically: true, encoding: .utf8)
        // The systemctl stand-in reads each case's answer from a data file, so that no program is rewritten while
        // the test process may be forking: a script written a moment before it runs can still be open for writing
        // in a child another thread is spawning, and running it then fails with "Text file busy" (docs/linux.md
        // §6), which the leave script takes, rightly, for "systemd cannot be asked".
        let answerFile = directory.appendingPathComponent("answer")
        let systemctl = directory.appendingPathComponent("systemctl")
        try "#!/bin/sh\n. \(answerFile.path)\n".write(to: systemctl, atomically: true, encoding: .utf8)
        for file in [ctl, systemctl] {
            try FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: file.path)
        }
        try "exit 0\n".write(to: answerFile, atomically: true, encoding: .utf8)
        #expect(
            waitUntil(timeout: 10) {
                (try? Command.run([systemctl.path], timeout: .seconds(5)))?.succeeded == true
                    && (try? Command.run([ctl.path], timeout: .seconds(5)))?.succeeded == true
            }, "the stand-ins never ran")
        // systemctl's answer for an enabled unit, a disabled one, and a failure to ask systemd at all (which a
        // restart must take as "keep the hosts").
        for (answer, expectCall) in [
            ("echo enabled; exit 0", false), ("echo disabled; exit 1", true),
            ("echo 'Failed to connect' >&2; exit 1", false),
        ] {
            try? FileManager.default.removeItem(at: calls)
            try "\(answer)\n".write(to: answerFile, atomically: true, encoding: .utf8)
            let result = try Command.run(
                [
                    "/usr/bin/env", "PATH=\(directory.path):/usr/bin:/bin", "SLEEPPROXYCTL=\(ctl.path)",
                    "RUNTIME_DIRECTORY=/run/sp-test", "/bin/sh",
                    Self.repository.appendingPathComponent("deploy/sleep-proxy-leave").path,
                ], timeout: .seconds(30))
            #expect(result.succeeded, "\(result)")
            let called = (try? String(contentsOf: calls, encoding: .utf8)) ?? ""
            #expect(
                expectCall
                    ? called.contains("release-all --transfer --yes --socket /run/sp-test/control.sock")
                    : called.isEmpty,
                "systemctl \(answer): \(called)")
        }
    }

    @Test func theUnitChecksTheConfigurationBeforeAReload() throws {
        let unit = try String(
            contentsOf: Self.repository.appendingPathComponent("deploy/sleep-proxy.service"), encoding: .utf8)
        let reloads = unit.split(separator: "\n").filter { $0.hasPrefix("ExecReload=") }
        #expect(
            reloads.count == 2 && reloads[0].contains("--check-config") && reloads[1].contains("kill -HUP"),
            "\(reloads)")
    }

    /// deploy/Containerfile (registry builds) and scripts/build-image (this machine's builds) must make the same
    /// image: the same entry point, user, capabilities, directories, stop signal and health check. The image
    /// itself is run by scripts/test-image; this catches the two drifting apart.
    @Test func theContainerfileAndTheImageScriptAgree() throws {
        let containerfile = try String(
            contentsOf: Self.repository.appendingPathComponent("deploy/Containerfile"), encoding: .utf8)
        let script = try String(
            contentsOf: Self.repository.appendingPathComponent("scripts/build-image"), encoding: .utf8)
        let entryPoint = [
            "/usr/bin/sleepproxyd", "--config", "/etc/sleep-proxy/sleepproxyd.conf", "--state-directory",
            "/var/lib/sleep-proxy", "--control-socket", "/run/sleep-proxy/control.sock",
        ]
        let json = "[" + entryPoint.map { "\"\($0)\"" }.joined(separator: ", ") + "]"
        #expect(containerfile.contains("ENTRYPOINT \(json)"))
        #expect(script.contains("--entrypoint '\(json)'"))
        #expect(containerfile.contains("USER sleep-proxy") && script.contains("--user sleep-proxy"))
        #expect(containerfile.contains("STOPSIGNAL SIGTERM") && script.contains("--stop-signal SIGTERM"))
        #expect(
            containerfile.contains("VOLUME /var/lib/sleep-proxy") && script.contains("--volume /var/lib/sleep-proxy"))
        let health = "/usr/bin/sleepproxyctl --socket /run/sleep-proxy/control.sock status"
        #expect(
            containerfile.contains(
                "CMD [" + health.split(separator: " ").map { "\"\($0)\"" }.joined(separator: ", ") + "]"))
        #expect(script.contains("--healthcheck 'CMD \(health)'"))
        for line in [
            "setcap cap_net_raw,cap_net_admin=ip",
            "install -d -o sleep-proxy -g sleep-proxy -m 0750 /var/lib/sleep-proxy",
            "install -d -o sleep-proxy -g sleep-proxy -m 0755 /run/sleep-proxy",
        ] {
            #expect(containerfile.contains(line) && script.contains(line), "\(line)")
        }
        for interval in ["30s", "5s", "10s"] {
            #expect(containerfile.contains(interval) && script.contains(interval))
        }
    }
}
