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
        try Command.start(process)
        // Read both pipes on their own threads while the child runs (docs/linux.md §7), so a chatty child cannot
        // block on a full pipe, not even while it is given its input.
        let outReader = PipeReader(stdout.fileHandleForReading)
        let errReader = PipeReader(stderr.fileHandleForReading)
        if let input { stdin.fileHandleForWriting.write(input) }
        try? stdin.fileHandleForWriting.close()
        // Foundation learns that a child ended when a socket it handed down closes; a long-lived process started
        // by another test at the same moment can inherit that socket, or the writing end of these pipes, and hold
        // it open, and then neither the exit nor the pipes' end of file comes. The kernel knows: read the status
        // without reaping (WNOWAIT), so Foundation still reaps it. The time limit bounds the child, never the
        // pipes: seen in CI, an `ip link add` that had long exited 0 was reported as timed out.
        let reaped = DispatchSemaphore(value: 0)
        // A thread of its own: a child whose exit Foundation never learns would hold a pool thread for good.
        Thread.detachNewThread {
            process.waitUntilExit()
            reaped.signal()
        }
        let pid = process.processIdentifier
        var status: Int32? = nil
        func waitForExit(until deadline: Date) {
            while status == nil, Date() < deadline {
                if reaped.wait(timeout: .now() + .milliseconds(5)) == .success {
                    // Foundation gives a signal's number alone; report it as the kernel path does.
                    status =
                        process.terminationReason == .uncaughtSignal
                        ? 128 + process.terminationStatus : process.terminationStatus
                } else {
                    status = Self.exitStatusWithoutReaping(pid)
                }
            }
        }
        let seconds = Double(timeout.components.seconds) + Double(timeout.components.attoseconds) / 1e18
        waitForExit(until: Date(timeIntervalSinceNow: seconds))
        let timedOut = status == nil
        if timedOut {
            kill(pid, SIGKILL)
            waitForExit(until: Date(timeIntervalSinceNow: 10))
        }
        // The child is gone, so whatever it wrote is in the pipes: take it, waiting a little for end of file.
        let drainDeadline = Date(timeIntervalSinceNow: Self.drainGrace)
        let out = outReader.finish(by: drainDeadline)
        let err = errReader.finish(by: drainDeadline)
        guard let status else {
            return CommandResult(
                status: -1, stdout: String(decoding: out, as: UTF8.self),
                stderr: String(decoding: err, as: UTF8.self) + "\n(exit status never reported)", timedOut: true)
        }
        return CommandResult(
            status: status, stdout: String(decoding: out, as: UTF8.self), stderr: String(decoding: err, as: UTF8.self),
            timedOut: timedOut)
    }

    /// How long the output of a child that has ended may take to reach end of file before what was read is
    /// taken as all of it: only a process that inherited the pipe (see `run`) keeps it open longer.
    static let drainGrace: TimeInterval = 1

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

/// Reads a pipe on a thread of its own until end of file, or until told to stop once nothing more is waiting.
final class PipeReader: @unchecked Sendable {
    // @unchecked: `data`, `stopBy` and `ended` are guarded by `lock`; `handle` is only read by the thread.
    private let lock = NSLock()
    private var data = Data()
    private var stopBy: Date? = nil
    private let ended = DispatchSemaphore(value: 0)

    init(_ handle: FileHandle) {
        let fd = handle.fileDescriptor
        Thread.detachNewThread { [self] in
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while true {
                var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                let ready = poll(&entry, 1, 20)
                if ready > 0 {
                    let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                    if count > 0 {
                        self.lock.withLock { self.data.append(contentsOf: buffer[0..<count]) }
                        continue
                    }
                    if count == 0 || (errno != EINTR && errno != EAGAIN) { break }
                } else if ready < 0, errno != EINTR {
                    break
                }
                // Nothing waiting, or a writer that will not stop: give up once told to and the grace is over.
                if let stopBy = self.lock.withLock({ self.stopBy }), Date() >= stopBy { break }
            }
            self.ended.signal()
        }
    }

    /// What was read, once end of file comes or `deadline` passes, whichever is first.
    func finish(by deadline: Date) -> Data {
        self.lock.withLock { self.stopBy = deadline }
        self.ended.wait()
        return self.lock.withLock { self.data }
    }
}

extension Command {
    /// Starts `process` with no signal blocked. Foundation spawns from the calling thread and hands its signal
    /// mask down, and the threads tests run on block nearly every signal (the concurrency runtime's and
    /// Dispatch's do): children then held SIGTERM pending until they were killed, and check_tcp's alarm() never
    /// fired, so its timeout never came (docs/linux.md §7).
    public static func start(_ process: Process) throws {
        var none = sigset_t()
        var saved = sigset_t()
        sigemptyset(&none)
        pthread_sigmask(SIG_SETMASK, &none, &saved)
        defer { pthread_sigmask(SIG_SETMASK, &saved, nil) }
        try process.run()
    }
}
