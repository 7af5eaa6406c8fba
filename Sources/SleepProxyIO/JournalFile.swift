import FoundationEssentials
import SleepProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// The registration journal on disk (see `RegistrationJournal` for the format and why it is a journal).
///
/// Owns `<state directory>/registrations.journal` and a lock file that keeps a second daemon from sharing the
/// directory. Not thread-safe: the engine thread is its only user.
public final class JournalFile {
    /// Compact when the journal holds this many entries per live host, so its size stays proportional to what it
    /// holds. Counted in entries, not against the size after the last compaction: a journal that grows only
    /// with new hosts (a registration storm) holds nothing to drop, and rewriting it then stalled the engine for
    /// a tenth of a second at a time (issue 16).
    public static let compactionRatio = 4
    /// …but never bother below this size.
    public static let compactionMinimumBytes = 1 << 20

    public let directory: URL
    private var fd: Int32
    private let lockFD: Int32
    public private(set) var size: Int
    /// Bytes right after opening or the last compaction.
    /// Entries in the file: read at start, one per entry appended, one per live host after a compaction.
    private(set) var entries = 0

    var path: String { self.directory.appendingPathComponent("registrations.journal").path }

    public struct OpenError: Error, CustomStringConvertible {
        public var description: String
    }

    /// Opens (creating if needed) the journal in `directory`, replays it, and truncates a torn tail so appends
    /// continue after the last intact entry.
    public static func open(directory: URL, timeBase: TimeBase) throws -> (JournalFile, RegistrationJournal.Replay) {
        do {
            try FileManager.default.createDirectory(
                at: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o750])
        } catch {
            throw OpenError(
                description: "cannot create the state directory \(directory.path): \(fileErrorReason(error))")
        }
        let lockPath = directory.appendingPathComponent("lock").path
        let lockFD = Glibc.open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard lockFD >= 0 else {
            throw OpenError(description: "cannot open \(lockPath): \(String(cString: strerror(errno)))")
        }
        guard flock(lockFD, LOCK_EX | LOCK_NB) == 0 else {
            Glibc.close(lockFD)
            throw OpenError(
                description:
                    "the state directory \(directory.path) is in use by another sleepproxyd; stop it or choose another --state-directory"
            )
        }
        let path = directory.appendingPathComponent("registrations.journal").path
        let fd = Glibc.open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            Glibc.close(lockFD)
            throw OpenError(description: "cannot open \(path): \(String(cString: strerror(errno)))")
        }
        // A journal that exists but cannot be read must stop the start: carrying on as if it were empty would let
        // the next compaction overwrite every registration it holds.
        let bytes: [UInt8]
        do {
            bytes = try JournalFile.readAll(fd)
        } catch {
            Glibc.close(fd)
            Glibc.close(lockFD)
            throw OpenError(
                description:
                    "cannot read \(path): \(error); the registrations in it are kept, fix the file or its disk and start again"
            )
        }
        let replay = RegistrationJournal.replay(bytes, timeBase: timeBase)
        if replay.intactLength < bytes.count, replay.problems.last?.reason.contains("torn") == true {
            // Only a torn tail is cut; damage in the middle stays for an operator to inspect until compaction.
            _ = ftruncate(fd, off_t(replay.intactLength))
        }
        let size = Int(lseek(fd, 0, SEEK_END))
        let journal = JournalFile(directory: directory, fd: fd, lockFD: lockFD, size: size)
        journal.entries = replay.entryCount
        return (journal, replay)
    }

    private init(directory: URL, fd: Int32, lockFD: Int32, size: Int) {
        self.directory = directory
        self.fd = fd
        self.lockFD = lockFD
        self.size = size
    }

    deinit {
        Glibc.close(self.fd)
        Glibc.close(self.lockFD)
    }

    /// Reads the journal back from disk (what is durable right now).
    public func reread(timeBase: TimeBase) throws -> RegistrationJournal.Replay {
        RegistrationJournal.replay(try JournalFile.readAll(self.fd), timeBase: timeBase)
    }

    /// The whole file through `fd`, from its start, leaving the offset at the end for appends.
    private static func readAll(_ fd: Int32) throws -> [UInt8] {
        let size = Int(try retryingSyscall("lseek") { lseek(fd, 0, SEEK_END) })
        var bytes = [UInt8](repeating: 0, count: size)
        var done = 0
        while done < size {
            let count = try bytes.withUnsafeMutableBytes { raw in
                try retryingSyscall("pread") { pread(fd, raw.baseAddress! + done, size - done, off_t(done)) }
            }
            guard count > 0 else { break }
            done += count
        }
        return Array(bytes[0..<done])
    }

    /// Appends entries in one write and makes them durable with one fdatasync (group commit).
    public func append(_ entries: [RegistrationJournal.Entry], timeBase: TimeBase) throws {
        guard !entries.isEmpty else { return }
        var bytes: [UInt8] = []
        for entry in entries { bytes += RegistrationJournal.encode(entry, timeBase: timeBase) }
        do {
            try self.writeAll(bytes, to: self.fd)
            try retryingSyscall("fdatasync") { fdatasync(self.fd) }
        } catch {
            // A write cut short (ENOSPC, EIO) leaves half an entry: cut the file back to its last good length so
            // later appends follow whole entries. Replay would skip the fragment anyway; this keeps it clean.
            _ = ftruncate(self.fd, off_t(self.size))
            _ = lseek(self.fd, 0, SEEK_END)
            throw error
        }
        self.size += bytes.count
        self.entries += entries.count
    }

    /// Whether the journal has grown enough to be rewritten (best done while idle), holding `liveHosts`.
    public func needsCompaction(liveHosts: Int) -> Bool {
        self.size > JournalFile.compactionMinimumBytes && self.entries > JournalFile.compactionRatio * max(1, liveHosts)
    }

    /// Whether it has grown so far that it must be rewritten now, busy or not.
    public func mustCompact(liveHosts: Int) -> Bool {
        self.size > 2 * JournalFile.compactionMinimumBytes
            && self.entries > 2 * JournalFile.compactionRatio * max(1, liveHosts)
    }

    /// Rewrites the journal with one entry per live host: written to a new file, synced, renamed over the old
    /// one, and the directory synced, so a crash at any point leaves either the old or the new journal whole.
    public func compact(_ live: [OwnerRegistration], timeBase: TimeBase) throws {
        var bytes: [UInt8] = []
        for registration in live { bytes += RegistrationJournal.encode(.put(registration), timeBase: timeBase) }
        let temporary = self.path + ".new"
        let newFD = Glibc.open(temporary, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard newFD >= 0 else { throw SystemCallError(function: "open \(temporary)", errno: errno) }
        do {
            try self.writeAll(bytes, to: newFD)
            try retryingSyscall("fsync") { fsync(newFD) }
            try retryingSyscall("rename") { rename(temporary, self.path) }
            try self.syncDirectory()
        } catch {
            Glibc.close(newFD)
            unlink(temporary)
            throw error
        }
        Glibc.close(self.fd)
        self.fd = newFD
        _ = lseek(self.fd, 0, SEEK_END)
        self.size = bytes.count
        self.entries = live.count
    }

    private func writeAll(_ bytes: [UInt8], to fd: Int32) throws {
        var written = 0
        try bytes.withUnsafeBytes { raw in
            while written < raw.count {
                let result = try retryingSyscall("write") {
                    Glibc.write(fd, raw.baseAddress! + written, raw.count - written)
                }
                written += result
            }
        }
    }

    private func syncDirectory() throws {
        let directoryFD = Glibc.open(self.directory.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directoryFD >= 0 else { throw SystemCallError(function: "open \(self.directory.path)", errno: errno) }
        defer { Glibc.close(directoryFD) }
        try retryingSyscall("fsync") { fsync(directoryFD) }
    }
}
