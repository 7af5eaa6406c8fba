import CSleepProxyLinux
import Dispatch
import FoundationEssentials
import SleepProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// The registration journal on disk (see `RegistrationJournal` for the format and why it is a journal).
///
/// Owns `<state directory>/registrations.journal` and a lock file that keeps a second daemon from sharing the
/// directory. Not thread-safe: the engine thread is its only user (a compaction's new file is written by a thread
/// of its own, which touches nothing else; see `startCompaction`).
public final class JournalFile {
    /// Compact when the journal holds this many entries per live host, so its size stays proportional to what it
    /// holds. Counted in entries, not against the size after the last compaction: a journal that grows only
    /// with new hosts (a registration storm) holds nothing to drop, and rewriting it then stalled the engine for
    /// a tenth of a second at a time (docs/scale.md).
    public static let compactionRatio = 4
    /// …but never bother below this size.
    public static let compactionMinimumBytes = 1 << 20
    /// Ours: how far ahead of its entries the journal writes zeros. An append then overwrites blocks the file
    /// has, and its fdatasync writes the data page alone; growing the file made every append also commit the
    /// file's new size and blocks, about as many bytes again (docs/state.md, "SD-card wear"). 64 KiB is about 80
    /// entries of a typical host, so the file grows once for that many appends; the zeros are written in pages,
    /// as the appends will touch them.
    public static let reserveBytes = 64 << 10
    static let pageBytes = 4096
    public let directory: URL
    private(set) var fd: Int32
    private let lockFD: Int32
    /// Where the entries end and the next append goes.
    public private(set) var size: Int
    /// The file's length: `size` plus the zeros written ahead.
    public private(set) var allocated: Int
    /// Appends written past the page cache where the file system allows it: an append then sends the card the
    /// few sectors its entry touches, where a write through the page cache sends the whole 4 KiB page holding it
    /// and the entries before it (a database's redo log writes sector-sized blocks for the same reason;
    /// docs/state.md, "SD-card wear"). Nil where the file system cannot, or refused once.
    struct DirectWrites {
        let memoryAlignment: Int
        let alignment: Int
        /// The journal's bytes from the last aligned offset up to `size`: written again with the next append.
        var tail: [UInt8]
    }
    var direct: DirectWrites?

    /// Whether appends go past the page cache (`DirectWrites`).
    public var writesDirectly: Bool { self.direct != nil }

    /// Bytes right after opening or the last compaction.
    /// Entries in the file: read at start, one per entry appended, one per live host after a compaction.
    private(set) var entries = 0

    var path: String { self.directory.appendingPathComponent("registrations.journal").path }

    /// A compaction under way: its new file is written and synced by a thread of its own while appends go on to
    /// the old file; they are copied aside and carried over to the new one when it is ready.
    private final class Rewrite: @unchecked Sendable {
        // @unchecked: `written` is guarded by `condition`; everything else is the engine thread's alone.
        let condition = Condition()
        /// Set by the writing thread when it is done: the bytes written, or why it failed.
        var written: Result<Int, SystemCallError>?
        let fd: Int32
        let temporary: String
        let entries: Int
        var carried: [UInt8] = []
        var carriedEntries = 0

        init(fd: Int32, temporary: String, entries: Int) {
            self.fd = fd
            self.temporary = temporary
            self.entries = entries
        }

        var result: Result<Int, SystemCallError>? {
            self.condition.lock()
            defer { self.condition.unlock() }
            return self.written
        }
    }
    private var rewrite: Rewrite?

    /// Whether a compaction is under way (`startCompaction`).
    public var isCompacting: Bool { self.rewrite != nil }

    public struct OpenError: Error, CustomStringConvertible {
        public var description: String
    }

    /// Opens (creating if needed) the journal in `directory`, replays it, and truncates a torn tail so appends
    /// continue after the last intact entry.
    ///
    /// `restoring` is given the hosts to restore, a few at a time in journal order on the calling thread, while the
    /// journal is still being decoded on another: a restart restores its hosts beside the decoding instead of after
    /// it (about 0.3 s each at 10,000 hosts of 24 records on a 2-core box, docs/scale.md). The replay returned
    /// holds the same hosts.
    public static func open(
        directory: URL, timeBase: TimeBase, restoring: ([OwnerRegistration]) -> Void = { _ in }
    ) throws -> (JournalFile, RegistrationJournal.Replay) {
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
        let bytes: ReadBytes
        do {
            bytes = ReadBytes(try JournalFile.readAll(fd))
        } catch {
            Glibc.close(fd)
            Glibc.close(lockFD)
            throw OpenError(
                description:
                    "cannot read \(path): \(error); the registrations in it are kept, fix the file or its disk and start again"
            )
        }
        // One run on this thread: decoded in runs side by side (as 0.6.0 did, on up to four cores), the restored
        // hosts kept 6 MB more at 10,000 hosts (each run's tables leave their holes between the hosts kept), and a
        // restart needed more memory than registering the same hosts live (docs/memory.md, "Restoring").
        let replay = Self.replay(bytes, timeBase: timeBase, restoring: restoring)
        if replay.intactLength < replay.usedLength {
            // Only a torn tail is cut (with the zeros after it: the next append writes them again); damage in the
            // middle stays for an operator to inspect until compaction.
            _ = ftruncate(fd, off_t(replay.intactLength))
        }
        // What was read is in memory now: its pages go, so that appends start again from small ones. (Read back
        // in one go, the file's pages can be large folios, and the kernel counts a whole folio written for every
        // append into one.)
        _ = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)
        let allocated = Int(lseek(fd, 0, SEEK_END))
        let journal = JournalFile(
            directory: directory, fd: fd, lockFD: lockFD, size: min(replay.intactLength, allocated),
            allocated: allocated)
        journal.entries = replay.entryCount
        journal.direct = Self.directWrites(fd, size: journal.size)
        return (journal, replay)
    }

    private init(directory: URL, fd: Int32, lockFD: Int32, size: Int, allocated: Int) {
        self.directory = directory
        self.fd = fd
        self.lockFD = lockFD
        self.size = size
        self.allocated = allocated
    }

    deinit {
        self.abandonCompaction()
        Glibc.close(self.fd)
        Glibc.close(self.lockFD)
    }

    /// Reads the journal back from disk (what is durable right now), through a descriptor of its own: reads
    /// through the appending one would need the alignment of its direct writes.
    public func reread(timeBase: TimeBase) throws -> RegistrationJournal.Replay {
        let fd = Glibc.open(self.path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw SystemCallError(function: "open \(self.path)", errno: errno) }
        defer { Glibc.close(fd) }
        return RegistrationJournal.replay(try JournalFile.readAll(fd), timeBase: timeBase)
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
        var bytes: [UInt8] = []
        for entry in entries { bytes += RegistrationJournal.encode(entry, timeBase: timeBase) }
        try self.append(encoded: bytes, entries: entries.count)
    }

    /// The same for entries encoded already (`RegistrationJournal.encode`), `count` of them in `bytes`: the
    /// engine encodes each as it comes, between two registrations, so that the write and sync at the end of a
    /// batch is all that queries arriving then wait for.
    public func append(encoded bytes: [UInt8], entries count: Int) throws {
        try self.append(encoded: bytes, entries: count) { try $0.perform(sync: true) }
    }

    /// The same, with `commit` carrying out the write (`JournalWrite.perform`, synced or not: the engine hands it to
    /// `JournalSync` and answers queries meanwhile); a commit that throws fails the append, and one that does not
    /// carry the write out is a bug.
    public func append(encoded bytes: [UInt8], entries count: Int, commit: (JournalWrite) throws -> Void) throws {
        guard count > 0 else { return }
        do {
            let prepared = try self.prepare(bytes)
            try commit(prepared.write)
            precondition(prepared.write.performed, "an append's write was never carried out")
            self.allocated = min(prepared.allocated, prepared.write.end ?? prepared.allocated)
            if let tail = prepared.tail { self.direct?.tail = tail }
        } catch {
            if let error = error as? SystemCallError, error.errno == EINVAL, self.direct != nil {
                // The file system refused a direct write after all: through the page cache from now on (this
                // batch is not acknowledged; its clients send again).
                self.direct = nil
                _ = csp_set_direct_io(self.fd, 0)
            }
            // A write cut short (ENOSPC, EIO) leaves half an entry: cut the file back to its last good length so
            // later appends follow whole entries. Replay would skip the fragment anyway; this keeps it clean.
            _ = ftruncate(self.fd, off_t(self.size))
            self.allocated = self.size
            throw error
        }
        self.size += bytes.count
        self.entries += count
        if let rewrite = self.rewrite {
            rewrite.carried += bytes
            rewrite.carriedEntries += count
        }
    }

    /// Whether the journal has grown enough to be rewritten (`startCompaction`), holding `liveHosts`.
    public func needsCompaction(liveHosts: Int) -> Bool {
        self.size > JournalFile.compactionMinimumBytes && self.entries > JournalFile.compactionRatio * max(1, liveHosts)
    }

    /// Starts rewriting the journal with one entry per live host, without holding up the caller: a thread of its
    /// own encodes them into a new file and syncs it (tens of milliseconds of writing and waiting with thousands
    /// of hosts, during which no query would be answered; docs/scale.md). Appends go on to the old file meanwhile,
    /// which stays whole and in place until `finishCompaction` has carried them over to the new one.
    public func startCompaction(_ live: [OwnerRegistration], timeBase: TimeBase) throws {
        guard self.rewrite == nil else { return }
        let temporary = self.path + ".new"
        let newFD = Glibc.open(temporary, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard newFD >= 0 else { throw SystemCallError(function: "open \(temporary)", errno: errno) }
        let rewrite = Rewrite(fd: newFD, temporary: temporary, entries: live.count)
        do {
            try startThread(name: "journal-compact") {
                var bytes: [UInt8] = []
                for registration in live {
                    bytes += RegistrationJournal.encode(.put(registration), timeBase: timeBase)
                }
                let result = outcome(of: "write \(temporary)") { () throws -> Int in
                    _ = try Self.write(bytes, to: newFD, at: 0, allocated: 0)
                    try retryingSyscall("fsync") { fsync(newFD) }
                    // Clean now: dropped, so that appends start from small pages (as at `open`).
                    _ = posix_fadvise(newFD, 0, 0, POSIX_FADV_DONTNEED)
                    return bytes.count
                }
                rewrite.condition.lock()
                rewrite.written = result
                rewrite.condition.signal()
                rewrite.condition.unlock()
            }
        } catch {
            Glibc.close(newFD)
            unlink(temporary)
            throw error
        }
        self.rewrite = rewrite
    }

    /// Ends a compaction whose new file is written: the appends made since it started are added to the new file
    /// and synced, the new file is renamed over the old one and the directory synced, so a crash at any point
    /// leaves either the old or the new journal whole. Returns false when there is none, or it is still being
    /// written; throws (the old journal staying in use, whole) when it failed.
    @discardableResult
    public func finishCompaction() throws -> Bool {
        guard let rewrite = self.rewrite, let written = rewrite.result else { return false }
        self.rewrite = nil
        let size: Int
        var allocated: Int
        do {
            size = try written.get()
            // The file's real length: its zeros ahead may have stopped short on a nearly full disk.
            allocated = Int(try retryingSyscall("lseek") { lseek(rewrite.fd, 0, SEEK_END) })
            if !rewrite.carried.isEmpty {
                allocated = try Self.write(rewrite.carried, to: rewrite.fd, at: size, allocated: allocated)
                try retryingSyscall("fdatasync") { fdatasync(rewrite.fd) }
            }
            try retryingSyscall("rename") { rename(rewrite.temporary, self.path) }
        } catch {
            Glibc.close(rewrite.fd)
            unlink(rewrite.temporary)
            throw error
        }
        self.switchTo(
            rewrite.fd, size: size + rewrite.carried.count, allocated: allocated,
            entries: rewrite.entries + rewrite.carriedEntries)
        try self.syncDirectory()
        return true
    }

    /// Once the new file has the journal's name it is the journal, whatever happens next: appending to the old
    /// one, now nameless, would lose every later change at the next start. (A failed directory sync after it is
    /// reported; the rename may then not survive a power cut, and the next compaction tries again.)
    private func switchTo(_ fd: Int32, size: Int, allocated: Int, entries: Int) {
        Glibc.close(self.fd)
        self.fd = fd
        self.size = size
        self.allocated = allocated
        self.entries = entries
        self.direct = Self.directWrites(fd, size: size)
    }

    /// Gives up a compaction under way (at a stop), once its thread is done with the new file; the old journal
    /// is whole and stays.
    public func abandonCompaction() {
        guard let rewrite = self.rewrite else { return }
        self.rewrite = nil
        rewrite.condition.lock()
        while rewrite.written == nil { rewrite.condition.wait(seconds: 1) }
        rewrite.condition.unlock()
        Glibc.close(rewrite.fd)
        unlink(rewrite.temporary)
    }

    /// Rewrites the journal with one entry per live host, at once (`startCompaction` and `finishCompaction`
    /// without the wait): written to a new file, synced, renamed over the old one, and the directory synced.
    public func compact(_ live: [OwnerRegistration], timeBase: TimeBase) throws {
        self.abandonCompaction()
        var bytes: [UInt8] = []
        for registration in live { bytes += RegistrationJournal.encode(.put(registration), timeBase: timeBase) }
        let temporary = self.path + ".new"
        let newFD = Glibc.open(temporary, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard newFD >= 0 else { throw SystemCallError(function: "open \(temporary)", errno: errno) }
        let allocated: Int
        do {
            allocated = try Self.write(bytes, to: newFD, at: 0, allocated: 0)
            try retryingSyscall("fsync") { fsync(newFD) }
            try retryingSyscall("rename") { rename(temporary, self.path) }
        } catch {
            Glibc.close(newFD)
            unlink(temporary)
            throw error
        }
        self.switchTo(newFD, size: bytes.count, allocated: allocated, entries: live.count)
        try self.syncDirectory()
    }

    private func syncDirectory() throws {
        let directoryFD = Glibc.open(self.directory.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directoryFD >= 0 else { throw SystemCallError(function: "open \(self.directory.path)", errno: errno) }
        defer { Glibc.close(directoryFD) }
        try retryingSyscall("fsync") { fsync(directoryFD) }
    }
}
