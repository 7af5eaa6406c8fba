import CSleepProxyLinux
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// An anonymous network namespace that cannot outlive the test process.
///
/// It is held by `unshare --net` running `cat` on a pipe whose writing end only this process holds: when the
/// test ends, or crashes, the pipe closes, `cat` exits and the namespace disappears with its interfaces
/// (docs/linux.md §7: named namespaces leak on a crash, held anonymous ones do not). Processes started in it get
/// SIGKILL when the test process dies (PR_SET_PDEATHSIG through setpriv), so they cannot keep it alive either.
public final class NetworkNamespace: @unchecked Sendable {
    // @unchecked: `holder`, `stdin` and `children` are guarded by `lock`.
    public let pid: Int32
    private let holder: Process
    private let stdin: Pipe
    private let lock = NSLock()
    private var children: [ManagedProcess] = []
    private var closed = false

    public init() throws {
        let holder = Process()
        holder.executableURL = URL(fileURLWithPath: "/usr/bin/unshare")
        holder.arguments = ["--net", "--", "/bin/sh", "-c", "ip link set lo up && echo ready && exec cat >/dev/null"]
        let stdin = Pipe()
        let stdout = Pipe()
        holder.standardInput = stdin
        holder.standardOutput = stdout
        holder.standardError = FileHandle.nullDevice
        try Command.start(holder)
        // Wait for "ready" (bounded), so the namespace exists and lo is up before anyone uses it. Polled on this
        // thread, never on a shared pool: seen in CI, a pool whose threads all waited on other tests' children
        // left the reader unscheduled and a namespace that was long ready reported as not started. A busy kernel
        // tearing down other tests' namespaces can make `unshare` itself slow, hence the generous bound.
        let fd = stdout.fileHandleForReading.fileDescriptor
        let deadline = Date(timeIntervalSinceNow: Self.startTimeout)
        var ready = false
        while !ready, Date() < deadline {
            var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            let polled = poll(&entry, 1, 100)
            if polled > 0 {
                var byte: UInt8 = 0
                ready = Glibc.read(fd, &byte, 1) == 1
                if !ready { break }  // end of file: the holder ended before it was ready
            } else if polled < 0, errno != EINTR {
                break
            }
        }
        guard ready else {
            holder.terminate()
            throw CommandError("the namespace holder did not start within \(Int(Self.startTimeout)) s")
        }
        self.pid = holder.processIdentifier
        self.holder = holder
        self.stdin = stdin
    }

    /// How long `unshare` may take to report a namespace ready.
    static let startTimeout: TimeInterval = 60

    deinit { self.close() }

    /// `nsenter` arguments that run a command inside this namespace. The command gets SIGKILL if the test
    /// process dies (PR_SET_PDEATHSIG through setpriv), so not even a short-lived client outlives a killed run.
    public var enter: [String] { ["nsenter", "-t", "\(self.pid)", "-n", "--", "setpriv", "--pdeathsig", "KILL", "--"] }

    @discardableResult
    public func run(_ arguments: [String], timeout: Duration = .seconds(30), input: Data? = nil) throws
        -> CommandResult
    {
        try Command.run(self.enter + arguments, timeout: timeout, input: input)
    }

    @discardableResult
    public func check(_ arguments: [String], timeout: Duration = .seconds(30)) throws -> CommandResult {
        try Command.check(self.enter + arguments, timeout: timeout)
    }

    /// Starts a long-running process in the namespace; its output goes to `log`. Stop it by PID with
    /// `ManagedProcess.stop()`; `close()` stops whatever is still running.
    public func spawn(_ arguments: [String], log: URL) throws -> ManagedProcess {
        let child = try ManagedProcess(arguments: self.enter + arguments, log: log)
        self.lock.withLock { self.children.append(child) }
        return child
    }

    /// Runs `body` on a new thread that has entered this namespace (setns is per-thread, so never on a shared
    /// pool thread; docs/linux.md §7). Sockets created there stay in the namespace.
    public func inside<T: Sendable>(_ body: @escaping @Sendable () throws -> T) throws -> T {
        let box = ResultBox<T>()
        let done = DispatchSemaphore(value: 0)
        let path = "/proc/\(self.pid)/ns/net"
        let thread = Thread {
            defer { done.signal() }
            let fd = open(path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0, csp_setns_net(fd) == 0 else {
                box.set(.failure(CommandError("cannot enter \(path): \(String(cString: strerror(errno)))")))
                return
            }
            Glibc.close(fd)
            box.set(Result { try body() })
        }
        thread.start()
        done.wait()
        return try box.get()
    }

    /// Stops every process started here, then releases the namespace.
    public func close() {
        let children: [ManagedProcess] = self.lock.withLock {
            guard !self.closed else { return [] }
            self.closed = true
            return self.children
        }
        for child in children { child.stop(signal: SIGKILL) }
        try? self.stdin.fileHandleForWriting.close()
        // Bounded, and without Foundation's reaping (see ManagedProcess.isRunning).
        let deadline = Date(timeIntervalSinceNow: 10)
        while ManagedProcess.isAlive(self.pid), Date() < deadline { usleep(5_000) }
        if ManagedProcess.isAlive(self.pid) { kill(self.pid, SIGKILL) }
    }
}

/// A process started by a test, tracked and stopped by its PID (never by name).
public final class ManagedProcess: @unchecked Sendable {
    // @unchecked: Process is thread-safe for the calls made here.
    private let process: Process
    public let log: URL

    init(arguments: [String], log: URL) throws {
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        let handle = try FileHandle(forWritingTo: log)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = arguments
        process.standardOutput = handle
        process.standardError = handle
        process.standardInput = FileHandle.nullDevice
        try Command.start(process)
        self.process = process
        self.log = log
    }

    public var pid: Int32 { self.process.processIdentifier }

    /// Alive and not a zombie, read from /proc: Foundation's `Process` has been seen never to reap a child (and
    /// `waitUntilExit()` then never returns), so nothing here waits on it.
    public var isRunning: Bool { ManagedProcess.isAlive(self.pid) }

    /// Alive while any of its threads is: a multi-threaded process's main thread shows as a zombie as soon as it
    /// exits, while the other threads, still holding the process's files (a daemon's state-directory lock),
    /// finish their own exit.
    static func isAlive(_ pid: Int32) -> Bool {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        return tasks.contains { task in
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")"),
                stat.distance(from: close, to: stat.endIndex) > 2
            else { return false }
            let state = stat[stat.index(close, offsetBy: 2)]
            return state != "Z" && state != "X"
        }
    }

    /// Sends `signal` and waits (bounded) for the process to end; SIGKILL if it has not after `timeout`.
    public func stop(signal: Int32 = SIGTERM, timeout: TimeInterval = 10) {
        guard self.isRunning else { return }
        kill(self.pid, signal)
        let deadline = Date(timeIntervalSinceNow: timeout)
        while self.isRunning, Date() < deadline { usleep(10_000) }
        if self.isRunning {
            kill(self.pid, SIGKILL)
            let killDeadline = Date(timeIntervalSinceNow: 5)
            while self.isRunning, Date() < killDeadline { usleep(10_000) }
        }
    }

    public var output: String { (try? String(contentsOf: self.log, encoding: .utf8)) ?? "" }

    /// Waits (bounded) until the log contains `text`.
    @discardableResult
    public func waitForOutput(_ text: String, timeout: TimeInterval = 10) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while Date() < deadline {
            if self.output.contains(text) { return true }
            if !self.isRunning { return self.output.contains(text) }
            usleep(20_000)
        }
        return false
    }
}

final class ResultBox<T: Sendable>: @unchecked Sendable {
    // @unchecked: guarded by `lock`.
    private let lock = NSLock()
    private var result: Result<T, Error>?
    func set(_ result: Result<T, Error>) { self.lock.withLock { self.result = result } }
    func get() throws -> T { try self.lock.withLock { self.result! }.get() }
}
