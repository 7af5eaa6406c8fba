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
    // @unchecked: `children` and `closed` are guarded by `lock`; `holdingEnd` is closed once, by `close()`.
    public let pid: Int32
    /// The writing end of the holder's standard input: while it is open, the namespace lives.
    private let holdingEnd: Int32
    private let lock = NSLock()
    private var children: [ManagedProcess] = []
    private var closed = false

    public init() throws {
        let feed = try ChildProcess.pipe()
        let report = try ChildProcess.pipe()
        let null = try ChildProcess.null()
        let pid: pid_t
        do {
            pid = try ChildProcess.spawn(
                ["unshare", "--net", "--", "/bin/sh", "-c", "ip link set lo up && echo ready && exec cat >/dev/null"],
                input: feed.read, output: report.write, error: null)
        } catch {
            for fd in [feed.read, feed.write, report.read, report.write, null] { Glibc.close(fd) }
            throw error
        }
        for fd in [feed.read, report.write, null] { Glibc.close(fd) }
        defer { Glibc.close(report.read) }
        // Wait for "ready" (bounded), so the namespace exists and lo is up before anyone uses it. Polled on this
        // thread, never on a shared pool: seen in CI, a pool whose threads all waited on other tests' children
        // left the reader unscheduled and a namespace that was long ready reported as not started. A busy kernel
        // tearing down other tests' namespaces can make `unshare` itself slow, hence the generous bound.
        let fd = report.read
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
            Glibc.close(feed.write)
            kill(pid, SIGKILL)
            let reapBy = Date(timeIntervalSinceNow: 5)
            while ChildProcess.reap(pid) == nil, Date() < reapBy { usleep(5_000) }
            throw CommandError("the namespace holder did not start within \(Int(Self.startTimeout)) s")
        }
        self.pid = pid
        self.holdingEnd = feed.write
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
        let children: [ManagedProcess]? = self.lock.withLock {
            guard !self.closed else { return nil }
            self.closed = true
            return self.children
        }
        // Once only: the holding end's number may be another file's by a second call.
        guard let children else { return }
        for child in children { child.stop(signal: SIGKILL) }
        Glibc.close(self.holdingEnd)
        // Bounded; reaped here, so no zombie is left for the rest of the run.
        // Killed only while not yet reaped: once reaped, its PID may be another process's.
        var reaped = false
        let deadline = Date(timeIntervalSinceNow: 10)
        while !reaped, Date() < deadline {
            reaped = ChildProcess.reap(self.pid) != nil
            if !reaped { usleep(5_000) }
        }
        if !reaped {
            kill(self.pid, SIGKILL)
            let reapBy = Date(timeIntervalSinceNow: 5)
            while ChildProcess.reap(self.pid) == nil, Date() < reapBy { usleep(5_000) }
        }
    }
}

/// A process started by a test, tracked and stopped by its PID (never by name).
public final class ManagedProcess: @unchecked Sendable {
    // @unchecked: `exitStatus` is guarded by `lock`.
    public let pid: Int32
    public let log: URL
    private let lock = NSLock()
    private var exitStatus: Int32? = nil

    init(arguments: [String], log: URL) throws {
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        let output = open(log.path, O_WRONLY | O_APPEND | O_CLOEXEC)
        guard output >= 0 else { throw CommandError("cannot open \(log.path): \(String(cString: strerror(errno)))") }
        defer { Glibc.close(output) }
        let null = try ChildProcess.null()
        defer { Glibc.close(null) }
        self.pid = try ChildProcess.spawn(arguments, input: null, output: output, error: output)
        self.log = log
    }

    /// Until it has ended, and then reaped (its status kept): a reaped child's PID may be another's.
    public var isRunning: Bool {
        self.lock.withLock {
            if self.exitStatus == nil { self.exitStatus = ChildProcess.reap(self.pid) }
            return self.exitStatus == nil
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
