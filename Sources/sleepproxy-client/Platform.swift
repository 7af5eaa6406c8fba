import Foundation

/// The announcer as a transient systemd unit, so `hook post` returns at once while the announcements go on.
enum Systemd {
    static let announcerUnit = "sleepproxy-client-announce"

    static var isRunning: Bool { FileManager.default.fileExists(atPath: "/run/systemd/system") }

    static func tool(_ name: String) -> String? {
        ["/usr/bin/\(name)", "/bin/\(name)"].first(where: FileManager.default.isExecutableFile(atPath:))
    }

    /// Starts `sleepproxy-client announce` with the hook's interface, host name and state directory in a
    /// transient unit (replacing one still running); false when systemd is not running or refuses.
    static func startAnnouncer(link: LinkOptions, state: StateOptions) -> Bool {
        guard self.isRunning, let run = self.tool("systemd-run"),
            let me = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")
        else { return false }
        self.stopAnnouncer()
        var arguments = [
            "--no-block", "--collect", "--quiet", "--unit", self.announcerUnit, "--description",
            "sleepproxy-client: wake announcements", "--", me, "announce", "--state-directory", state.stateDirectory,
        ]
        if let interface = link.interface { arguments += ["--interface", interface] }
        if let hostName = link.hostName { arguments += ["--host-name", hostName] }
        return self.run(run, arguments) == 0
    }

    static func stopAnnouncer() {
        guard self.isRunning, let systemctl = self.tool("systemctl") else { return }
        _ = self.run(systemctl, ["stop", "--quiet", "\(self.announcerUnit).service"])
    }

    private static func run(_ tool: String, _ arguments: [String]) -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        // Foundation's `waitUntilExit()` spins a core on Linux while the child runs; its handler does not.
        let ended = DispatchSemaphore(value: 0)
        process.terminationHandler = { _ in ended.signal() }
        guard (try? process.run()) != nil else { return -1 }
        ended.wait()
        return process.terminationStatus
    }
}

enum RTC {
    /// Writes a relative wake alarm to the first RTC (cleared first, as the kernel requires).
    static func setAlarm(seconds: Int) {
        let path = "/sys/class/rtc/rtc0/wakealarm"
        do {
            try "0".write(toFile: path, atomically: false, encoding: .utf8)
            try "+\(seconds)".write(toFile: path, atomically: false, encoding: .utf8)
            print("RTC wake alarm set in \(seconds) s to renew the lease")
        } catch {
            FileHandle.standardError.write(
                Data("sleepproxy-client: cannot set the RTC wake alarm (\(path)): \(error)\n".utf8))
        }
    }
}
