import CSleepProxyLinux
import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// An errno-carrying failure of a system call, naming the call so a log line says what failed.
public struct SystemCallError: Error, Hashable, Sendable, CustomStringConvertible {
    public var function: String
    public var errno: Int32

    public init(function: String, errno: Int32) {
        self.function = function
        self.errno = errno
    }

    public var description: String {
        #if canImport(Glibc)
            let message = String(cString: strerror(self.errno))
        #else
            let message = "errno"
        #endif
        return "\(self.function) failed: \(message) (errno \(self.errno))"
    }
}

/// Runs a system call that returns -1 and sets errno on failure, retrying on EINTR (as NIOPosix's System.swift
/// does) and throwing every other failure. `@inline(never)` keeps ARC traffic between the call and the read of
/// errno from clobbering it.
@inline(never)
@discardableResult
public func retryingSyscall<T: FixedWidthInteger>(_ function: String, _ body: () -> T) throws -> T {
    while true {
        let result = body()
        if result != -1 { return result }
        #if canImport(Glibc)
            let code = Glibc.errno
            if code == EINTR { continue }
        #else
            let code: Int32 = -1
        #endif
        throw SystemCallError(function: function, errno: code)
    }
}

/// Capabilities the process may use but does not have in effect yet.
public enum ProcessCapabilities {
    /// Puts every permitted capability into effect. The container image grants CAP_NET_RAW and CAP_NET_ADMIN as
    /// file capabilities without the effective bit (`setcap ...=ip`): that works under Docker, which gives a
    /// non-root user no ambient capabilities, and under podman alike, and the binary starts with them permitted
    /// only. Elsewhere (root, or systemd's AmbientCapabilities) they are in effect already and nothing changes.
    public static func raisePermitted() throws {
        try retryingSyscall("capset") { csp_raise_permitted_capabilities() }
    }
}

/// Runs `body` and keeps its outcome as a value, for a helper thread (the journal's sync and compaction) to hand
/// to the engine thread: a `SystemCallError` as it is, anything else as an I/O error of `function`.
func outcome<T>(of function: String, _ body: () throws -> T) -> Result<T, SystemCallError> {
    do {
        return .success(try body())
    } catch let error as SystemCallError {
        return .failure(error)
    } catch {
        return .failure(SystemCallError(function: function, errno: EIO))
    }
}

/// The allocator's settings for a long-running daemon on a small box.
public enum MemoryTuning {
    /// Two malloc arenas instead of one per thread (call before threads start; docs/threads.md).
    public static func limitArenas() { csp_malloc_limit_arenas() }

    /// Gives freed heap back to the system after a restore or a journal compaction, which build and drop a copy
    /// of every registration.
    public static func trim() { csp_malloc_trim() }

    /// Hands back the resident pages of code and constants, of the daemon and of its shared libraries, once
    /// start-up is over: argument parsing, the journal's replay and the bootstraps run once in years of running,
    /// yet every page they touched (and the 64 KB the kernel maps around each) would stay in the resident set for
    /// good. The pages stay in the page cache; whatever runs again faults back in at once, so what stays resident
    /// is what the daemon runs (docs/memory.md). Returns the bytes of address range let go.
    @discardableResult
    public static func releaseStartupCode() -> Int { Int(csp_release_readonly_segments()) }
}

/// A file error in a few words ("No such file or directory"), for a start-up sentence: what Foundation throws
/// describes itself as a dictionary dump, and `localizedDescription` needs libFoundation, which the daemon does
/// not link (docs/memory.md).
public func fileErrorReason(_ error: any Error) -> String {
    #if canImport(Glibc)
        if let posix = error as? POSIXError {
            return String(cString: strerror(posix.code.rawValue))
        }
        if let cocoa = error as? CocoaError {
            if let posix = cocoa.underlying as? POSIXError { return String(cString: strerror(posix.code.rawValue)) }
            switch cocoa.code {
            case .fileReadNoSuchFile, .fileNoSuchFile: return String(cString: strerror(ENOENT))
            case .fileReadNoPermission, .fileWriteNoPermission: return String(cString: strerror(EACCES))
            case .fileReadInapplicableStringEncoding, .fileReadCorruptFile: return "not UTF-8 text"
            default: break
            }
        }
    #endif
    return "\(error)"
}

/// The size in bytes of the regular file at `path`, or nil when there is none or it is not a regular file.
/// (FileManager's attribute dictionary types its size differently with and without libFoundation: a `UInt`
/// under FoundationEssentials alone, so an `as? Int` that passed the tests was nil in the daemon.)
func regularFileSize(atPath path: String) -> Int? {
    var info = stat()
    guard stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
    return Int(info.st_size)
}
