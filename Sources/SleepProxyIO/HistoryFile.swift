import CSleepProxyLinux
import Dispatch
import FoundationEssentials
import Logging
import SleepProxyControl
import SleepProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// The hosts' history on disk (docs/status-page.md §3, docs/state.md "SD-card wear"): one `HistoryRecord` a line.
/// The engine thread only hands over a batch's records; encoding, writing, settling and rewriting happen on a thread
/// of their own, so neither a slow SD card nor a long file holds up an answer or a restart.
///
/// Lines go first to `history-recent.jsonl` in the runtime directory (`/run/sleep-proxy`, memory), and move to
/// `history.jsonl` in the state directory together, every `settleInterval`, at a stop and on `sleepproxyctl sync`:
/// appended one by one, each line dirtied a page of the SD card of its own (4 KiB for a line of 150 bytes, a day
/// of a home's history about 2.4 MB; sleepproxy-bench wear). A crash or a restart loses nothing (the runtime
/// directory outlives the daemon), a power cut at most the lines of one interval: the history explains, it decides
/// nothing. The state file is rewritten with what `HistoryBook` keeps once it holds twice
/// `HistoryBook.recordsInAll` lines.
final class HistoryFile: @unchecked Sendable {
    // @unchecked: `pendingRecords`, `pendingLines`, `stopped`, `running`, `settleRequests`, `settled`, `settledWell`
    // and `droppedCount` are guarded by `condition`; `lineCount`, `nextSettle` and `failing` are the writer thread's
    // alone (or `load`'s, before).
    static let fileName = "history.jsonl"
    /// In the runtime directory: lines not yet settled, and lines being settled (a settle cut short by a crash
    /// is finished at the next one).
    static let recentFileName = "history-recent.jsonl"
    static let settlingFileName = "history-settling.jsonl"
    /// Records waiting for the writer at most (about 600 KB of lines); past it (a disk that stopped answering)
    /// records are kept in memory only, and counted.
    static let pendingLimit = 4096
    /// Ours (docs/state.md, "SD-card wear"): four settles a day write a home's day in about 40 pages instead of
    /// 600, and a power cut loses at most six hours of explanations.
    static let settleInterval: Duration = .seconds(6 * 3600)
    /// The most the runtime directory's file holds before it is settled early (it is memory: a registration storm
    /// of 10,000 hosts writes about 3 MB of lines); past it, while the state directory cannot be written, lines
    /// are dropped and counted rather than fill the box's memory.
    static let recentLimitBytes = 8 << 20

    let url: URL
    let recentURL: URL
    let settlingURL: URL
    private let logger: Logger
    /// The savings ledger's file, written and settled by the same thread at the same times (`SavingsFile`).
    let savings: SavingsFile
    private let condition = Condition()
    private var pendingRecords: [HistoryRecord] = []
    /// The savings ledger's changed days waiting for the writer (guarded by `condition`).
    private var pendingSavings: [UInt8] = []
    /// Ours: the most savings bytes waiting (a disk that stopped answering for hours at a home's few hundred
    /// bytes a write); past it the newest are dropped and counted: the days they hold are written again when
    /// they next change.
    static let pendingSavingsLimit = 1 << 20
    private var pendingLines = 0
    private var stopped = false
    /// The writer thread has started and not yet ended (`stop` waits for its last settle).
    private var running = false
    private var settleRequests = 0
    private var settled = 0
    /// Whether the last settle wrote what it had to (`settleNow` tells `sleepproxyctl sync`).
    private var settledWell = true
    private var lineCount = 0
    private var recentBytes = 0
    private var nextSettle: Timestamp
    private var droppedCount = 0
    /// Records not written because the queue was full, or the runtime directory's file while it could not settle.
    var dropped: Int {
        self.condition.lock()
        defer { self.condition.unlock() }
        return self.droppedCount
    }
    private var failing = false

    /// Records the file is rewritten down to (`HistoryBook.recordsInAll`; smaller in tests).
    let bound: Int

    /// `runtimeDirectory` nil keeps the recent lines in the state directory too (no less durable, no less wear).
    init(
        directory: URL, runtimeDirectory: URL? = nil, logger: Logger, bound: Int = HistoryBook.recordsInAll
    ) {
        self.url = directory.appendingPathComponent(Self.fileName)
        let runtime = runtimeDirectory ?? directory
        self.recentURL = runtime.appendingPathComponent(Self.recentFileName)
        self.settlingURL = runtime.appendingPathComponent(Self.settlingFileName)
        self.logger = logger
        self.bound = bound
        self.savings = SavingsFile(directory: directory, runtimeDirectory: runtimeDirectory, logger: logger)
        self.nextSettle = SystemClock.now() + Self.settleInterval
    }

    /// What an earlier run kept; lines that do not parse (a torn last line after a crash) are skipped.
    static func read(
        _ url: URL, bound: Int = HistoryBook.recordsInAll, maximumBytes: Int = LineFiles.maximumBytes
    ) -> (HistoryBook, lines: Int) {
        var book = HistoryBook(inAll: bound)
        let lines = Self.read(url, into: &book, maximumBytes: maximumBytes)
        return (book, lines)
    }

    static func read(_ url: URL, into book: inout HistoryBook, maximumBytes: Int = LineFiles.maximumBytes) -> Int {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        var lines = 0
        _ = LineFiles.forEachLine(of: url.path, maximumBytes: maximumBytes) { line in
            lines += 1
            if let record = HistoryRecord(stateLine: line)
                ?? (try? decoder.decode(HistoryRecord.self, from: Data(line)))
            {
                book.append(record)
            }
        }
        return lines
    }

    /// What an earlier run kept, read once at start, before the journal is replayed: then it is the one book the
    /// engine appends to, and the reading's buffers go back before the hosts are restored. Read later beside the
    /// restored hosts, a second book and its merge were the highest the resident size of a restart went
    /// (docs/memory.md). About 50 ms for 20,000 lines. What the last run left in the runtime directory is settled
    /// first; what cannot be (the state directory is read-only) is read from where it is.
    func load() -> HistoryBook {
        self.settle()
        var (book, lines) = Self.read(self.url, bound: self.bound)
        lines += Self.read(self.settlingURL, into: &book)
        let recent = Self.read(self.recentURL, into: &book)
        lines += recent
        self.recentBytes =
            (regularFileSize(atPath: self.recentURL.path) ?? 0) + (regularFileSize(atPath: self.settlingURL.path) ?? 0)
        self.lineCount = lines
        return book
    }

    /// Starts the writer thread, which writes what is queued.
    func start() throws(SystemCallError) {
        self.condition.lock()
        self.running = true
        self.condition.unlock()
        do {
            try startThread(name: "history-writer") { [self] in self.loop() }
        } catch {
            self.condition.lock()
            self.running = false
            self.condition.unlock()
            throw error
        }
    }

    /// Queues a batch's records, to be written as lines by the writer thread; never blocks. Encoding them is the
    /// writer's work, not the engine's: a registration storm of 10,000 hosts makes 20,000 records, and their lines
    /// were 4 % of the engine's time in it (docs/scale.md). A batch that does not fit is dropped whole.
    func write(_ records: [HistoryRecord]) {
        guard !records.isEmpty else { return }
        self.condition.lock()
        defer { self.condition.unlock() }
        guard self.pendingLines + records.count <= Self.pendingLimit else {
            self.droppedCount += records.count
            return
        }
        self.pendingRecords += records
        self.pendingLines += records.count
        self.condition.signal()
    }

    /// Queues the savings ledger's changed days (`SavingsLedger.takeChanges`, encoded) for its file; never blocks.
    func writeSavings(_ bytes: [UInt8]) {
        guard !bytes.isEmpty else { return }
        self.condition.lock()
        defer { self.condition.unlock() }
        guard self.pendingSavings.count + bytes.count <= Self.pendingSavingsLimit else {
            self.droppedCount += 1
            return
        }
        self.pendingSavings += bytes
        self.condition.signal()
    }

    /// Writes what is queued and settles it, then ends the thread; waits at most `seconds` for the disk.
    func stop(waiting seconds: Double = 2) {
        self.condition.lock()
        self.stopped = true
        self.condition.signal()
        let deadline = SystemClock.now() + .milliseconds(Int64(seconds * 1000))
        while self.running, SystemClock.now() < deadline { self.condition.wait(seconds: 0.05) }
        self.condition.unlock()
    }

    /// Writes what is queued and moves the recent lines to the state directory now (`sleepproxyctl sync`); true
    /// once done, false if the writer did not get to it within `seconds`.
    func settleNow(waiting seconds: Double = 5) -> Bool {
        self.condition.lock()
        defer { self.condition.unlock() }
        self.settleRequests += 1
        let wanted = self.settleRequests
        self.condition.signal()
        let deadline = SystemClock.now() + .milliseconds(Int64(seconds * 1000))
        while self.settled < wanted, SystemClock.now() < deadline { self.condition.wait(seconds: 0.05) }
        return self.settled >= wanted && self.settledWell
    }

    private func loop() {
        while true {
            self.condition.lock()
            while self.pendingLines == 0, self.pendingSavings.isEmpty, !self.stopped,
                self.settled == self.settleRequests, SystemClock.now() < self.nextSettle
            {
                self.condition.wait(seconds: 1)
            }
            var bytes: [UInt8] = []
            var count = self.pendingLines
            let records = self.pendingRecords
            let savings = self.pendingSavings
            self.pendingRecords = []
            self.pendingLines = 0
            self.pendingSavings = []
            let stopping = self.stopped
            let requested = self.settleRequests
            let settling = stopping || self.settled < requested || SystemClock.now() >= self.nextSettle
            self.condition.unlock()
            for record in records {
                do {
                    bytes += try record.jsonLine()
                } catch {
                    count -= 1
                    self.logger.warning("history: cannot encode a record (\(error)); kept in memory only")
                }
            }
            if count > 0 { self.append(bytes, lines: count) }
            if !savings.isEmpty {
                do {
                    try self.savings.append(savings)
                } catch {
                    self.failed(error)
                }
            }
            var well = true
            if settling {
                well = self.settle()
                self.nextSettle = SystemClock.now() + Self.settleInterval
            }
            self.condition.lock()
            if settling {
                self.settled = max(self.settled, requested)
                self.settledWell = well
            }
            self.condition.signal()
            self.condition.unlock()
            if stopping, count == 0, savings.isEmpty {
                self.condition.lock()
                self.running = false
                self.condition.signal()
                self.condition.unlock()
                return
            }
        }
    }

    private func append(_ bytes: [UInt8], lines count: Int) {
        if self.recentBytes + bytes.count > Self.recentLimitBytes { self.settle() }
        guard self.recentBytes + bytes.count <= Self.recentLimitBytes else {
            self.condition.lock()
            self.droppedCount += count
            self.condition.unlock()
            return
        }
        do {
            try appendLines(bytes, to: self.recentURL.path)
            self.recentBytes += bytes.count
            self.lineCount += count
            self.working()
        } catch {
            self.failed(error)
        }
    }

    /// Moves the recent lines to the state file: renamed aside first, so that new lines start a new recent file
    /// and a crash in the middle leaves a settling file the next settle finishes (docs/state.md).
    @discardableResult
    private func settle() -> Bool {
        do {
            // `recentBytes` counts the settling file too until it is gone: both are memory.
            try self.finishSettling()
            self.recentBytes = regularFileSize(atPath: self.recentURL.path) ?? 0
            guard self.recentBytes > 0 else {
                try self.savings.settle()
                return true
            }
            try retryingSyscall("rename(\(self.recentURL.path))") {
                rename(self.recentURL.path, self.settlingURL.path)
            }
            try self.finishSettling()
            self.recentBytes = 0
            if self.lineCount > 2 * self.bound { try self.rewrite() }
            try self.savings.settle()
            self.working()
            return true
        } catch {
            self.failed(error)
            return false
        }
    }

    /// Appends the settling file to the state file, unless an earlier settle already did (the state file ends
    /// with its bytes), syncs it and removes the settling file.
    private func finishSettling() throws {
        guard let size = regularFileSize(atPath: self.settlingURL.path) else { return }
        let bytes = try LineFiles.contents(of: self.settlingURL.path)
        if size > 0, !LineFiles.file(self.url.path, endsWith: bytes) {
            try appendLines(bytes, to: self.url.path, sync: true)
        }
        try retryingSyscall("unlink(\(self.settlingURL.path))") { unlink(self.settlingURL.path) }
    }

    private func working() {
        guard self.failing else { return }
        self.failing = false
        self.logger.notice("history: writing \(self.url.path) again")
    }

    private func failed(_ error: any Error) {
        // One line when writing starts failing, one when it works again: a full disk must not fill the log.
        guard !self.failing else { return }
        self.failing = true
        self.logger.warning(
            "history: cannot write \(self.url.path) (\(error)); the status page keeps the history in memory")
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

extension EngineRunner {
    /// Keeps a record in memory for the status page and for the file (handed over once a batch). A presence change
    /// that leaves the host where its history already has it (a restart finding it asleep again) is not news.
    func recordHistory(_ record: HistoryRecord) {
        if let state = record.state, self.history.lastState(of: record.mac) == state { return }
        self.history.append(record)
        self.historyRecords.append(record)
    }

    /// The batch's history records to the writer: one hand-over a batch, not one a record.
    func flushHistory() {
        guard !self.historyRecords.isEmpty else { return }
        self.statusLock.withLock { self.changeObserver }?()
        self.historyFile.write(self.historyRecords)
        self.historyRecords = []
    }
}

/// What a start reads besides the journal, on a thread of its own while the journal is decoded and restored: the
/// spoken-for record and the savings ledger, then `HistoryFile.load` at a lower priority, so that on two cores the
/// decoding and the restoring, which the first answer waits for, keep both (docs/scale.md, "0.8.0: the start's other
/// reads out of the restore's way").
final class HistoryRead: @unchecked Sendable {
    // @unchecked: the three are written once by the reading thread before `done` is signalled, and read after.
    private var book: HistoryBook?
    private var savings: SavingsLedger?
    private var spokenFor = SpokenForRecord.Ahead()
    private let done = DispatchSemaphore(value: 0)

    /// How far the history's read yields to the restore: nice 10 gets about a tenth of a core beside a busy thread
    /// at nice 0 (the kernel's weights, 110 to 1024), and every idle moment.
    static let priorityDecrease: Int32 = 10

    init(_ file: HistoryFile, stateDirectory: URL, runtimeDirectory: URL?) {
        let read: @Sendable (_ ownThread: Bool) -> Void = { ownThread in
            // The record and the ledger are small, and read while the restoring still waits for the first hosts
            // decoded; the history is most of the work, and what the start may wait for last.
            self.spokenFor = SpokenForRecord.readAhead(
                stateDirectory: stateDirectory, runtimeDirectory: runtimeDirectory)
            self.savings = file.savings.load()
            // Lowered on this thread alone, which ends with the read; failing, it reads at the usual priority.
            if ownThread { _ = csp_lower_thread_priority(Self.priorityDecrease) }
            self.book = file.load()
            self.done.signal()
        }
        do {
            try startThread(name: "history-read") { read(true) }
        } catch {
            DispatchQueue.global().async { read(false) }
        }
    }

    func wait() -> (HistoryBook, SavingsLedger, SpokenForRecord.Ahead) {
        self.done.wait()
        return (self.book!, self.savings!, self.spokenFor)
    }
}
