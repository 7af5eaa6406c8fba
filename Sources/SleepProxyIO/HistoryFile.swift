import Dispatch
import FoundationEssentials
import Logging
import SleepProxyControl
import SleepProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// The hosts' history on disk (docs/status-page.md §3): one `HistoryRecord` a line in `history.jsonl` in the state
/// directory, read back at start so that a host's day survives a restart. The engine thread only hands over a
/// batch's lines; reading the file at start, writing and rewriting happen on a thread of their own, so neither a
/// slow SD card nor a long file holds up an answer or a restart. The file is rewritten with what `HistoryBook`
/// keeps once it holds twice `HistoryBook.recordsInAll` lines. Appends are not synced: the history explains, it
/// decides nothing, and a crash loses at most the last few lines.
final class HistoryFile: @unchecked Sendable {
    // @unchecked: `pending`, `stopped`, `writing` and `droppedCount` are guarded by `condition`; `lineCount` and
    // `failing` are the writer thread's alone.
    static let fileName = "history.jsonl"
    /// Lines waiting for the writer at most (about 600 KB); past it (a disk that stopped answering) records are
    /// kept in memory only, and counted.
    static let pendingLimit = 4096

    let url: URL
    private let logger: Logger
    private let condition = Condition()
    private var pending: [UInt8] = []
    private var pendingLines = 0
    private var stopped = false
    private var writing = false
    private var lineCount = 0
    private var droppedCount = 0
    /// Records not written because the queue was full.
    var dropped: Int {
        self.condition.lock()
        defer { self.condition.unlock() }
        return self.droppedCount
    }
    private var failing = false

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
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { Glibc.close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { return false }
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

    /// Records the file is rewritten down to (`HistoryBook.recordsInAll`; smaller in tests).
    let bound: Int

    init(
        directory: URL, logger: Logger, bound: Int = HistoryBook.recordsInAll
    ) {
        self.url = directory.appendingPathComponent(Self.fileName)
        self.logger = logger
        self.bound = bound
    }

    /// What an earlier run kept; lines that do not parse (a torn last line after a crash) are skipped.
    static func read(
        _ url: URL, bound: Int = HistoryBook.recordsInAll, maximumBytes: Int = HistoryFile.maximumBytes
    ) -> (HistoryBook, lines: Int) {
        var book = HistoryBook(inAll: bound)
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        var lines = 0
        _ = Self.forEachLine(of: url.path, maximumBytes: maximumBytes) { line in
            lines += 1
            if let record = HistoryRecord(stateLine: line)
                ?? (try? decoder.decode(HistoryRecord.self, from: Data(line)))
            {
                book.append(record)
            }
        }
        return (book, lines)
    }

    /// What an earlier run kept, read once at start, before the journal is replayed: then it is the one book the
    /// engine appends to, and the reading's buffers go back before the hosts are restored. Read later beside the
    /// restored hosts, a second book and its merge were the highest the resident size of a restart went
    /// (docs/memory.md). About 50 ms for 20,000 lines.
    func load() -> HistoryBook {
        let (book, lines) = Self.read(self.url, bound: self.bound)
        self.lineCount = lines
        return book
    }

    /// Starts the writer thread, which writes what is queued.
    func start() throws(SystemCallError) {
        try startThread(name: "history-writer") { [self] in self.loop() }
    }

    /// Queues a batch's lines (`count` of them, each ending in a newline) for the file; never blocks. A batch
    /// that does not fit is dropped whole.
    func write(_ bytes: [UInt8], lines count: Int) {
        guard count > 0 else { return }
        self.condition.lock()
        defer { self.condition.unlock() }
        guard self.pendingLines + count <= Self.pendingLimit else {
            self.droppedCount += count
            return
        }
        if self.pending.isEmpty { self.pending = bytes } else { self.pending += bytes }
        self.pendingLines += count
        self.condition.signal()
    }

    /// Writes what is queued, then ends the thread; waits at most `seconds` for the disk.
    func stop(waiting seconds: Double = 2) {
        self.condition.lock()
        self.stopped = true
        self.condition.signal()
        let deadline = SystemClock.now() + .milliseconds(Int64(seconds * 1000))
        while self.pendingLines > 0 || self.writing, SystemClock.now() < deadline {
            self.condition.wait(seconds: 0.05)
        }
        self.condition.unlock()
    }

    private func loop() {
        while true {
            self.condition.lock()
            while self.pendingLines == 0, !self.stopped { self.condition.wait(seconds: 1) }
            let bytes = self.pending
            let count = self.pendingLines
            self.pending = []
            self.pendingLines = 0
            let done = self.stopped && count == 0
            self.writing = count > 0
            self.condition.unlock()
            if done { return }
            self.append(bytes, lines: count)
            self.condition.lock()
            self.writing = false
            self.condition.signal()
            self.condition.unlock()
        }
    }

    private func append(_ bytes: [UInt8], lines count: Int) {
        do {
            try appendLines(bytes, to: self.url.path)
            self.lineCount += count
            if self.lineCount > 2 * self.bound { try self.rewrite() }
            if self.failing {
                self.failing = false
                self.logger.notice("history: writing \(self.url.path) again")
            }
        } catch {
            // One line when writing starts failing, one when it works again: a full disk must not fill the log.
            if !self.failing {
                self.failing = true
                self.logger.warning(
                    "history: cannot write \(self.url.path) (\(error)); the status page keeps the history in memory")
            }
        }
    }

    /// Rewrites the file with what the bounds keep, atomically (a crash leaves the old file or the new one).
    private func rewrite() throws {
        let (book, _) = Self.read(self.url, bound: self.bound)
        var data = Data()
        var failure: (any Error)? = nil
        book.forEach { record in
            guard failure == nil else { return }
            do { data += try record.jsonLine() } catch { failure = error }
        }
        if let failure { throw failure }
        try data.write(to: self.url, options: .atomic)
        self.lineCount = book.count
    }
}

/// Appends bytes as one write (O_APPEND: lines land whole at the end), creating the file owner- and
/// group-readable.
func appendLines(_ bytes: [UInt8], to path: String) throws {
    let fd = try retryingSyscall("open(\(path))") { open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0o640) }
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
}

extension EngineRunner {
    /// Keeps a record in memory for the status page and its line for the file (handed over once a batch). A
    /// presence change that leaves the host where its history already has it (a restart finding it asleep
    /// again) is not news.
    func recordHistory(_ record: HistoryRecord) {
        if let state = record.state, self.history.lastState(of: record.mac) == state { return }
        self.history.append(record)
        do {
            self.historyBytes += try record.jsonLine()
            self.historyLineCount += 1
        } catch {
            self.logger.warning("history: cannot encode a record (\(error)); kept in memory only")
        }
    }

    /// The batch's history lines to the writer: one hand-over a batch, not one a record.
    func flushHistory() {
        guard self.historyLineCount > 0 else { return }
        self.statusLock.withLock { self.changeObserver }?()
        self.historyFile.write(self.historyBytes, lines: self.historyLineCount)
        self.historyBytes = []
        self.historyLineCount = 0
    }
}

/// `HistoryFile.load` on a thread of its own, for a start that replays the journal meanwhile.
final class HistoryRead: @unchecked Sendable {
    // @unchecked: `book` is written once by the reading thread before `done` is signalled, and read after.
    private var book: HistoryBook?
    private let done = DispatchSemaphore(value: 0)

    init(_ file: HistoryFile) {
        DispatchQueue.global().async {
            self.book = file.load()
            self.done.signal()
        }
    }

    func wait() -> HistoryBook {
        self.done.wait()
        return self.book!
    }
}
