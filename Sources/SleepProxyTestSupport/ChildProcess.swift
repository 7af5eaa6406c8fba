import CSleepProxyLinux
import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// How the test helpers start a child: `arguments` run through `/usr/bin/env` (the first looked up on PATH) with the
/// three descriptors given as its standard ones and no other (posix_spawn through `csp_spawn`), no signal blocked.
/// Not Foundation's `Process`: on Linux its `run()` copies a whole 256-byte name out of each /proc/self/fd entry,
/// past the end of the directory buffer, and now and then crashes the test process (swift-corelibs-foundation
/// PR 5472; seen here once the lab stopped spinning); its `waitUntilExit()` spins a core while the child runs; and
/// a child it starts can inherit another test's pipes. The caller reaps what it starts (`reap`).
public enum ChildProcess {
    public static func spawn(_ arguments: [String], input: Int32, output: Int32, error: Int32) throws -> pid_t {
        let argv: [UnsafeMutablePointer<CChar>?] = (["/usr/bin/env"] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid = pid_t()
        let result = argv.withUnsafeBufferPointer {
            csp_spawn(&pid, "/usr/bin/env", $0.baseAddress, input, output, error)
        }
        guard result == 0 else {
            throw CommandError("cannot start \(arguments.first ?? "nothing"): \(String(cString: strerror(result)))")
        }
        return pid
    }

    /// A pipe whose ends no child inherits unless it is handed over as a standard descriptor (every child
    /// starts with descriptors 3 and up closed; close-on-exec as well, for anything else that might spawn).
    static func pipe() throws -> (read: Int32, write: Int32) {
        var ends: [Int32] = [-1, -1]
        guard Glibc.pipe(&ends) == 0 else {
            throw CommandError("cannot make a pipe: \(String(cString: strerror(errno)))")
        }
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
        return (ends[0], ends[1])
    }

    /// /dev/null, for a standard descriptor that has nothing to give or take.
    public static func null() throws -> Int32 {
        let fd = open("/dev/null", O_RDWR | O_CLOEXEC)
        guard fd >= 0 else { throw CommandError("cannot open /dev/null: \(String(cString: strerror(errno)))") }
        return fd
    }

    /// The child's exit status once it has ended (reaped here, so ask once it has: the PID is free again after),
    /// nil while it runs. A child killed by a signal reports 128 + the signal, as a shell would.
    public static func reap(_ pid: pid_t) -> Int32? {
        var raw: Int32 = 0
        let result = waitpid(pid, &raw, WNOHANG)
        // ECHILD: reaped already, by an earlier call; nothing more will come.
        if result < 0 { return errno == ECHILD ? -1 : nil }
        guard result == pid else { return nil }
        let signal = raw & 0x7f
        return signal == 0 ? (raw >> 8) & 0xff : 128 + signal
    }

    /// Writes all of `data` to `fd` (a child's standard input), stopping early only if the child stopped reading.
    static func write(_ data: Data, to fd: Int32) {
        data.withUnsafeBytes { bytes in
            var offset = 0
            while offset < bytes.count {
                let written = Glibc.write(fd, bytes.baseAddress! + offset, bytes.count - offset)
                if written > 0 {
                    offset += written
                } else if written < 0, errno == EINTR {
                    continue
                } else {
                    return
                }
            }
        }
    }
}
