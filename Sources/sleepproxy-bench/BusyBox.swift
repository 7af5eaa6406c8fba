import Foundation
import SleepProxyTestSupport

#if canImport(Glibc)
    import Glibc
#endif

/// The box the proxy shares (docs/busy-lan.md): idle, busy with other work at the same priority (a Raspberry Pi
/// that also runs Home Assistant, a NAS in its backup), or slow (the daemon held to a quarter of one core by a CPU
/// cgroup quota, about what a Pi core is next to this machine's).
enum BusyBox: CaseIterable, CustomStringConvertible {
    case idle
    case busy
    case quarterCore

    /// Two CPU-bound processes: as many as this machine has cores, so the daemon always competes for one.
    static let busyProcesses = 2
    /// A quarter of one core: 25 ms of CPU in every 100 ms period.
    static let quotaMicroseconds = 25_000
    static let periodMicroseconds = 100_000

    /// As `BENCH_BOXES` names it (`idle,busy,quarter-core`).
    var name: String {
        switch self {
        case .idle: "idle"
        case .busy: "busy"
        case .quarterCore: "quarter-core"
        }
    }

    var description: String {
        switch self {
        case .idle: "the box otherwise idle"
        case .busy: "\(Self.busyProcesses) CPU-bound processes beside it"
        case .quarterCore: "the daemon held to a quarter of one core (a CPU cgroup quota)"
        }
    }

    /// Makes the box this kind for the daemon `pid`, for at most `seconds`; the returned value undoes it.
    func impose(on pid: Int32, seconds: Int) throws -> BoxLoad {
        switch self {
        case .idle:
            return BoxLoad(hogs: [], cgroup: nil)
        case .busy:
            // Each ends by itself after `seconds`, and is stopped by its PID when the run ends: the spinning
            // process is the one started (no wrapper whose death would leave it running).
            // Started as the lab starts its children (`ChildProcess`, not Foundation's `Process`: docs/linux.md §7).
            let null = try ChildProcess.null()
            defer { close(null) }
            var hogs: [Int32] = []
            for _ in 0..<Self.busyProcesses {
                let program = "import time\nend = time.monotonic() + \(seconds)\nwhile time.monotonic() < end: pass"
                hogs.append(
                    try ChildProcess.spawn(["python3", "-c", program], input: null, output: null, error: null))
            }
            return BoxLoad(hogs: hogs, cgroup: nil)
        case .quarterCore:
            return BoxLoad(hogs: [], cgroup: try CPUQuota(pid: pid))
        }
    }
}

/// What `BusyBox.impose` set up, undone by `end()`.
struct BoxLoad {
    /// The CPU-bound processes' PIDs, ours until reaped here.
    let hogs: [Int32]
    let cgroup: CPUQuota?

    func end() {
        for hog in self.hogs {
            kill(hog, SIGKILL)
            let reapBy = Date(timeIntervalSinceNow: 5)
            while ChildProcess.reap(hog) == nil, Date() < reapBy { usleep(5_000) }
        }
        self.cgroup?.remove()
    }
}

/// A CPU cgroup of the benchmark's own with a quota, holding one process (all its threads): cgroup v2's
/// `cpu.max` where the unified hierarchy is mounted, v1's `cpu.cfs_quota_us` otherwise.
struct CPUQuota {
    let directory: String
    let pid: Int32
    let parentProcs: String

    init(pid: Int32) throws {
        let v2 = FileManager.default.fileExists(atPath: "/sys/fs/cgroup/cgroup.controllers")
        let root = v2 ? "/sys/fs/cgroup" : "/sys/fs/cgroup/cpu"
        self.directory = "\(root)/sleepproxy-bench-\(getpid())"
        self.pid = pid
        self.parentProcs = "\(root)/cgroup.procs"
        try? FileManager.default.removeItem(atPath: self.directory)
        guard mkdir(self.directory, 0o755) == 0 || errno == EEXIST else {
            throw BenchError("cannot create \(self.directory): \(String(cString: strerror(errno)))")
        }
        if v2 {
            try? "+cpu".write(toFile: "\(root)/cgroup.subtree_control", atomically: false, encoding: .utf8)
            try "\(BusyBox.quotaMicroseconds) \(BusyBox.periodMicroseconds)".write(
                toFile: "\(self.directory)/cpu.max", atomically: false, encoding: .utf8)
        } else {
            try "\(BusyBox.periodMicroseconds)".write(
                toFile: "\(self.directory)/cpu.cfs_period_us", atomically: false, encoding: .utf8)
            try "\(BusyBox.quotaMicroseconds)".write(
                toFile: "\(self.directory)/cpu.cfs_quota_us", atomically: false, encoding: .utf8)
        }
        // cgroup.procs moves the whole process, every thread of it.
        try "\(pid)".write(toFile: "\(self.directory)/cgroup.procs", atomically: false, encoding: .utf8)
    }

    /// Moves the process back (if it still runs) and removes the group.
    func remove() {
        try? "\(self.pid)".write(toFile: self.parentProcs, atomically: false, encoding: .utf8)
        for _ in 0..<100 where rmdir(self.directory) != 0 { usleep(50_000) }
    }
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
