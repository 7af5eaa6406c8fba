import CSleepProxyLinux

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

/// The allocator's settings for a long-running daemon on a small box.
public enum MemoryTuning {
    /// Two malloc arenas instead of one per thread (call before threads start; docs/threads.md).
    public static func limitArenas() { csp_malloc_limit_arenas() }

    /// Gives freed heap back to the system after a restore or a journal compaction, which build and drop a copy
    /// of every registration.
    public static func trim() { csp_malloc_trim() }
}
