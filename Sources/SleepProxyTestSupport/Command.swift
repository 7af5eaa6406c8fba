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
        let output = try ChildProcess.pipe()
        let errors = try ChildProcess.pipe()
        let feed = try ChildProcess.pipe()
        let pid: pid_t
        do {
            pid = try ChildProcess.spawn(arguments, input: feed.read, output: output.write, error: errors.write)
        } catch {
            for fd in [output.read, output.write, errors.read, errors.write, feed.read, feed.write] { close(fd) }
            throw error
        }
        for fd in [output.write, errors.write, feed.read] { close(fd) }
        // Read both pipes on their own threads while the child runs (docs/linux.md §7), so a chatty child cannot
        // block on a full pipe, not even while it is given its input.
        let outReader = PipeReader(output.read)
        let errReader = PipeReader(errors.read)
        if let input { ChildProcess.write(input, to: feed.write) }
        close(feed.write)
        // The time limit bounds the child, never the pipes: a grandchild that outlives it may hold them open.
        // Asked every 5 ms: cheap next to a child's start, and no thread blocks for it.
        var status: Int32? = nil
        func waitForExit(until deadline: Date) {
            while status == nil, Date() < deadline {
                status = ChildProcess.reap(pid)
                if status == nil { usleep(5_000) }
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
    // @unchecked: `data`, `stopBy` and `ended` are guarded by `lock`; the descriptor is only read by the thread.
    private let lock = NSLock()
    private var data = Data()
    private var stopBy: Date? = nil
    private let ended = DispatchSemaphore(value: 0)

    /// Reads `fd` until end of file and then closes it.
    init(_ fd: Int32) {
        Thread.detachNewThread { [self] in
            defer { close(fd) }
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
