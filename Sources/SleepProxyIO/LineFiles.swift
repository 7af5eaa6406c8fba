import FoundationEssentials

#if canImport(Glibc)
    import Glibc
#endif

/// Reading and appending the line files of the state and runtime directories (the history, the wake log).
enum LineFiles {
    /// The most of the file read at start: its newest part, from the first whole line on. The rewrite keeps it
    /// under about 18 MB (40,000 lines of at most about 450 bytes); a file grown past this by anything else (a
    /// copy gone wrong, another program) must not make the daemon read it all into memory.
    static let maximumBytes = 32 << 20

    /// Longest line kept whole (a record is at most about 450 bytes); a longer one, which the daemon never writes,
    /// is skipped to its end instead of held.
    static let maximumLineBytes = 64 << 10

    /// Calls `body` with each whole line of the file (without its newline), or of its last `maximumBytes` from
    /// the first line that starts inside them; false when it cannot be read. The file is read in chunks and the
    /// lines parsed as they come: reading it whole into the heap left its size twice over (a buffer and its copy)
    /// with the allocator after a restart, about 12 MB at 10,000 hosts (sleepproxy-bench scale), and a mapping
    /// would bring the daemon down (SIGBUS) if the file were cut short while it reads.
    static func forEachLine(
        of path: String, maximumBytes: Int, _ body: (UnsafeBufferPointer<UInt8>) -> Void
    ) -> Bool {
        // Never through a symbolic link: the runtime directory may be one anybody can write to (--control-socket
        // in /tmp), and what is read here is appended to the state directory.
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { return false }
        defer { Glibc.close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return false }
        let size = Int(info.st_size)
        let start = max(0, size - maximumBytes)
        guard lseek(fd, off_t(start), SEEK_SET) >= 0 else { return false }
        var left = size - start  // never more than that, even if the file grows meanwhile
        // Cut into the middle of the file: the first, partial line goes.
        var skipping = start > 0
        var pending: [UInt8] = []
        // A line that starts and ends in one chunk is never longer than the longest kept.
        var chunk = [UInt8](repeating: 0, count: Self.maximumLineBytes)
        while left > 0 {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress!, min($0.count, left)) }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { break }
            left -= count
            chunk.withUnsafeBufferPointer { buffer in
                var lineStart = 0
                for index in 0..<count where buffer[index] == 0x0A {
                    defer { lineStart = index + 1 }
                    if skipping {
                        skipping = false
                        pending.removeAll()
                        continue
                    }
                    if pending.isEmpty {
                        body(UnsafeBufferPointer(rebasing: buffer[lineStart..<index]))
                    } else {
                        if pending.count + (index - lineStart) <= Self.maximumLineBytes {
                            pending.append(contentsOf: buffer[lineStart..<index])
                            pending.withUnsafeBufferPointer { body($0) }
                        }
                        pending.removeAll(keepingCapacity: true)
                    }
                }
                // The rest of the chunk starts a line the next chunk ends; too long a line is dropped.
                if pending.count + (count - lineStart) <= Self.maximumLineBytes {
                    pending.append(contentsOf: buffer[lineStart..<count])
                } else {
                    pending.removeAll()
                    skipping = true
                }
            }
        }
        return true
    }

}

/// Appends bytes as one write (O_APPEND: lines land whole at the end), creating the file owner- and
/// group-readable; with `sync`, durable before it returns. A symbolic link is refused (O_NOFOLLOW): the runtime
/// directory may be one an administrator chose, and the daemon runs as root.
func appendLines(_ bytes: [UInt8], to path: String, sync: Bool = false) throws {
    let fd = try retryingSyscall("open(\(path))") {
        open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o640)
    }
    defer { Glibc.close(fd) }
    var written = 0
    while written < bytes.count {
        let count = try bytes.withUnsafeBytes { raw in
            try retryingSyscall("write(\(path))") {
                Glibc.write(fd, raw.baseAddress! + written, raw.count - written)
            }
        }
        written += count
    }
    if sync { _ = try retryingSyscall("fdatasync(\(path))") { fdatasync(fd) } }
}

extension LineFiles {
    /// Whether the file's last bytes are `suffix` (a settle that was cut short after its append).
    static func file(_ path: String, endsWith suffix: [UInt8]) -> Bool {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { Glibc.close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, Int(info.st_size) >= suffix.count else { return false }
        var tail = [UInt8](repeating: 0, count: suffix.count)
        var read = 0
        while read < suffix.count {
            let count = tail.withUnsafeMutableBytes {
                pread(fd, $0.baseAddress! + read, $0.count - read, off_t(Int(info.st_size) - suffix.count + read))
            }
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { return false }
            read += count
        }
        return tail == suffix
    }

    /// The whole of a regular file, never through a symbolic link (`forEachLine`); at most `maximumBytes`.
    static func contents(of path: String, maximumBytes: Int = LineFiles.maximumBytes) throws -> [UInt8] {
        let fd = try retryingSyscall("open(\(path))") { open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW) }
        defer { Glibc.close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG, Int(info.st_size) <= maximumBytes else {
            throw EngineRunnerError(description: "\(path) is not a regular file of at most \(maximumBytes) bytes")
        }
        var bytes = [UInt8](repeating: 0, count: Int(info.st_size))
        var read = 0
        while read < bytes.count {
            let count = try bytes.withUnsafeMutableBytes { raw in
                try retryingSyscall("read(\(path))") { Glibc.read(fd, raw.baseAddress! + read, raw.count - read) }
            }
            guard count > 0 else { break }
            read += count
        }
        return Array(bytes.prefix(read))
    }
}
