import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// What a finished command printed and how it ended.
public struct CommandResult: Sendable, CustomStringConvertible {
    public var status: Int32
    public var stdout: String
    public var stderr: String
    public var timedOut: Bool

    public var succeeded: Bool { self.status == 0 && !self.timedOut }
    public var description: String {
        "exit \(self.status)\(self.timedOut ? " (timed out)" : ""); stdout: \(self.stdout); stderr: \(self.stderr)"
    }
}

public struct CommandError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// Runs external commands with a time bound: every test helper that starts a process goes through here.
public enum Command {
    /// Runs `arguments` (looked up on PATH), waits at most `timeout`, then kills it.
    @discardableResult
    public static func run(_ arguments: [String], timeout: Duration = .seconds(30), input: Data? = nil) throws
        -> CommandResult
    {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = arguments
        let stdout = Pipe()
        let stderr = Pipe()
        let stdin = Pipe()
        process.standardOutput = stdout
        process.standardError = stderr
        process.standardInput = stdin
        try process.run()
        if let input { stdin.fileHandleForWriting.write(input) }
        try? stdin.fileHandleForWriting.close()
        // Read both pipes to EOF on their own threads before waiting (docs/linux.md §7), so a chatty child cannot
        // block on a full pipe.
        let outData = LockedData()
        let errData = LockedData()
        let group = DispatchGroup()
        for (pipe, sink) in [(stdout, outData), (stderr, errData)] {
            group.enter()
            DispatchQueue.global().async {
                sink.set(pipe.fileHandleForReading.readDataToEndOfFile())
                group.leave()
            }
        }
        var timedOut = false
        if group.wait(
            timeout: .now()
                + .nanoseconds(
                    Int(timeout.components.seconds * 1_000_000_000 + timeout.components.attoseconds / 1_000_000_000)))
            == .timedOut
        {
            timedOut = true
            kill(process.processIdentifier, SIGKILL)
            group.wait()
        }
        // Both pipes reached end of file, so the child is gone or about to be; wait for its status, bounded.
        let reaped = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            process.waitUntilExit()
            reaped.signal()
        }
        // Foundation learns that a child ended when a socket it handed down closes; a long-lived process started
        // by another test at the same moment can inherit that socket and hold it open, and then the exit is never
        // reported. The kernel knows: read the status without reaping (WNOWAIT), so Foundation still reaps it.
        var ended: Int32? = nil
        var reportedInTime = false
        let reapDeadline = Date(timeIntervalSinceNow: 10)
        repeat {
            if reaped.wait(timeout: .now() + .milliseconds(20)) == .success {
                reportedInTime = true
                break
            }
            ended = Self.exitStatusWithoutReaping(process.processIdentifier)
        } while ended == nil && Date() < reapDeadline
        if !reportedInTime {
            guard let ended else {
                return CommandResult(
                    status: -1, stdout: String(decoding: outData.get(), as: UTF8.self),
                    stderr: String(decoding: errData.get(), as: UTF8.self) + "\n(exit status never reported)",
                    timedOut: true)
            }
            return CommandResult(
                status: ended, stdout: String(decoding: outData.get(), as: UTF8.self),
                stderr: String(decoding: errData.get(), as: UTF8.self), timedOut: timedOut)
        }
        return CommandResult(
            status: process.terminationStatus,
            stdout: String(decoding: outData.get(), as: UTF8.self),
            stderr: String(decoding: errData.get(), as: UTF8.self),
            timedOut: timedOut
        )
    }

    /// The exit status of a child that has ended, read without reaping it (waitid with WNOWAIT); nil while it runs.
    /// A child killed by a signal reports 128 + the signal, as a shell would.
    static func exitStatusWithoutReaping(_ pid: Int32) -> Int32? {
        var info = siginfo_t()
        guard waitid(P_PID, id_t(pid), &info, WEXITED | WNOWAIT | WNOHANG) == 0,
            info._sifields._sigchld.si_pid == pid
        else { return nil }
        let status = info._sifields._sigchld.si_status
        return info.si_code == Int32(CLD_EXITED) ? status : 128 + status
    }

    /// Runs a command that must succeed.
    @discardableResult
    public static func check(_ arguments: [String], timeout: Duration = .seconds(30)) throws -> CommandResult {
        let result = try self.run(arguments, timeout: timeout)
        guard result.succeeded else { throw CommandError("\(arguments.joined(separator: " ")): \(result)") }
        return result
    }

    /// True when the tests that build namespaces can run: root, and the tools they use.
    public static var canBuildNetworks: Bool {
        geteuid() == 0
            && ["/usr/bin/unshare", "/usr/bin/nsenter", "/usr/bin/setpriv"].allSatisfy {
                FileManager.default.isExecutableFile(atPath: $0)
            }
            && (FileManager.default.isExecutableFile(atPath: "/usr/sbin/ip")
                || FileManager.default.isExecutableFile(atPath: "/sbin/ip"))
    }
}

final class LockedData: @unchecked Sendable {
    // @unchecked: guarded by `lock`.
    private let lock = NSLock()
    private var data = Data()
    func set(_ data: Data) { self.lock.withLock { self.data = data } }
    func get() -> Data { self.lock.withLock { self.data } }
}
