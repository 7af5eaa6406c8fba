import CSleepProxyLinux
import SleepProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// How the journal's bytes reach the file: zeros written ahead of the entries, and direct writes where the file
/// system allows them (docs/state.md, "SD-card wear").
extension JournalFile {
    /// The file's length once `size` bytes of entries are followed by their zeros: the next page boundary at
    /// least `reserveBytes` past them.
    static func allocation(for size: Int) -> Int {
        (size + Self.reserveBytes + Self.pageBytes - 1) / Self.pageBytes * Self.pageBytes
    }

    /// Writes `bytes` at `offset` of a file `allocated` bytes long; when they reach past its zeros, writes new
    /// zeros after them, a page at a time, up to `allocation(for:)`. Returns the file's new length. The caller
    /// syncs: one sync makes the entries and the file's new length durable together.
    static func write(_ bytes: [UInt8], to fd: Int32, at offset: Int, allocated: Int) throws -> Int {
        try Self.pwriteAll(bytes[...], to: fd, at: offset)
        let end = offset + bytes.count
        guard end > allocated else { return allocated }
        let target = Self.allocation(for: end)
        let zeros = [UInt8](repeating: 0, count: Self.pageBytes)
        var position = max(end, allocated)
        while position < target {
            let next = min(target, (position / Self.pageBytes + 1) * Self.pageBytes)
            do {
                try Self.pwriteAll(zeros[0..<(next - position)], to: fd, at: position)
            } catch let error as SystemCallError where error.errno == ENOSPC {
                // No room for every zero ahead on a nearly full disk: the entries are written, and they are what
                // counts; the next append tries again.
                return position
            }
            position = next
        }
        return target
    }

    static func pwriteAll(_ bytes: ArraySlice<UInt8>, to fd: Int32, at offset: Int) throws {
        var written = 0
        try bytes.withUnsafeBytes { raw in
            while written < raw.count {
                let result = try retryingSyscall("pwrite") {
                    Glibc.pwrite(fd, raw.baseAddress! + written, raw.count - written, off_t(offset + written))
                }
                written += result
            }
        }
    }

    /// An append's bytes, ready: through the page cache they are written already; a direct write is left to
    /// `JournalWrite`, with the file's length and the tail to keep once it is done.
    struct Prepared {
        var write: JournalWrite
        var allocated: Int
        var tail: [UInt8]?
    }

    /// Prepares `bytes` for `size`: directly when it can, through the page cache otherwise.
    func prepare(_ bytes: [UInt8]) throws -> Prepared {
        guard let direct = self.direct else {
            let allocated = try Self.write(bytes, to: self.fd, at: self.size, allocated: self.allocated)
            return Prepared(write: JournalWrite(fd: self.fd), allocated: allocated, tail: nil)
        }
        // One aligned write from the last aligned offset before `size`: the tail kept from the last append, the
        // new bytes, and zeros up to the alignment, or up to a new reserve when they pass the file's end.
        let alignment = direct.alignment
        let start = self.size - direct.tail.count
        let end = self.size + bytes.count
        var allocated = self.allocated
        var writeEnd = (end + alignment - 1) / alignment * alignment
        if writeEnd > allocated {
            allocated = Self.allocation(for: end)
            writeEnd = allocated
        }
        let buffer = UnsafeMutableRawBufferPointer.allocate(
            byteCount: writeEnd - start, alignment: direct.memoryAlignment)
        buffer.initializeMemory(as: UInt8.self, repeating: 0)
        buffer.copyBytes(from: direct.tail)
        UnsafeMutableRawBufferPointer(rebasing: buffer[direct.tail.count...]).copyBytes(from: bytes)
        let tail = Array(buffer[(end / alignment * alignment - start)..<(end - start)])
        // What the entries need alone, to the alignment: written by itself when the disk has no room for new zeros.
        let needed = min(writeEnd, (end + alignment - 1) / alignment * alignment)
        return Prepared(
            write: JournalWrite(fd: self.fd, direct: buffer, at: start, needed: needed - start), allocated: allocated,
            tail: tail)
    }

    /// Direct writes for `fd`, holding `size` bytes of entries, if its file system allows them for it: the
    /// alignment it asks (at most a page, so that the reserve's page-sized steps keep it) and the tail read back.
    static func directWrites(_ fd: Int32, size: Int) -> DirectWrites? {
        var memory: UInt32 = 0
        var offset: UInt32 = 0
        guard csp_direct_io_alignment(fd, &memory, &offset) == 0 else { return nil }
        let alignment = Int(offset)
        guard alignment.nonzeroBitCount == 1, alignment <= Self.pageBytes, Int(memory) <= Self.pageBytes else {
            return nil
        }
        let start = size / alignment * alignment
        var tail = [UInt8](repeating: 0, count: size - start)
        let read = tail.withUnsafeMutableBytes { raw in
            raw.count == 0 ? 0 : pread(fd, raw.baseAddress!, raw.count, off_t(start))
        }
        guard read == tail.count, csp_set_direct_io(fd, 1) == 0 else { return nil }
        return DirectWrites(memoryAlignment: max(1, Int(memory)), alignment: alignment, tail: tail)
    }
}

/// What an append leaves to do, once, on any thread: the engine hands it to `JournalSync` and answers queries
/// while the card works. Through the page cache that is the sync alone; a direct write waits for the card itself,
/// so it is done here too, not on the engine thread.
public final class JournalWrite: @unchecked Sendable {
    // @unchecked: handed from the engine thread to the sync thread and back, one owner at a time.
    let fd: Int32
    private let buffer: UnsafeMutableRawBufferPointer?
    private let offset: Int
    /// The bytes of `buffer` that hold the entries, to the alignment: written alone when the disk has no room for
    /// the new zeros that follow them.
    private let needed: Int
    private(set) var performed = false
    /// Where the file ends when the disk had no room for the new zeros after the entries (nil otherwise).
    private(set) var end: Int?

    init(fd: Int32, direct buffer: UnsafeMutableRawBufferPointer? = nil, at offset: Int = 0, needed: Int = 0) {
        self.fd = fd
        self.buffer = buffer
        self.offset = offset
        self.needed = needed
    }

    deinit { self.buffer?.deallocate() }

    /// Writes what is left to write, then makes it durable when `sync` (an fdatasync).
    public func perform(sync: Bool) throws {
        precondition(!self.performed, "an append's write is carried out once")
        self.performed = true
        if let buffer = self.buffer {
            do {
                try self.write(buffer, count: buffer.count)
            } catch let error as SystemCallError where error.errno == ENOSPC && self.needed < buffer.count {
                // No room for the new zeros on a nearly full disk: the entries alone, as before there were any.
                try self.write(buffer, count: self.needed)
                self.end = self.offset + self.needed
            }
        }
        if sync { _ = try retryingSyscall("fdatasync") { fdatasync(self.fd) } }
    }

    private func write(_ buffer: UnsafeMutableRawBufferPointer, count: Int) throws {
        let written = try retryingSyscall("pwrite") { pwrite(self.fd, buffer.baseAddress!, count, off_t(self.offset)) }
        // A direct write is whole or fails; a short one (a full disk) is taken for a failure.
        guard written == count else { throw SystemCallError(function: "pwrite", errno: ENOSPC) }
    }
}
