import FoundationEssentials
import Logging
import SleepProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// The savings ledger on disk (docs/savings.md, "On disk"), written the way the history is (docs/state.md,
/// "SD-card wear"): the days that changed go every few minutes to `savings-recent.txt` in the runtime directory
/// (memory), and move to `savings.txt` in the state directory at the history's settles, merged first, so that a
/// settle appends each changed day once (a home's 20 hosts: about a kilobyte, one synced write) however often it
/// changed. Appending the same days twice changes nothing, so a settle cut short is simply done again. The state
/// file is rewritten whole (aside, synced, renamed over) once its appends outgrow what it holds.
///
/// Used from the history's writer thread (`HistoryFile`) and, before that starts, from the start's reading thread.
final class SavingsFile {
    static let fileName = "savings.txt"
    static let recentFileName = "savings-recent.txt"
    static let settlingFileName = "savings-settling.txt"
    /// Where a state file that cannot be read is moved, so that nothing a person kept is overwritten.
    static let refusedFileName = "savings.refused.txt"
    /// Ours: appends past the last whole write at most before the file is rewritten: the ledger's own size again,
    /// and this much more for a young ledger (a few weeks of a home's settles).
    static let compactionSlackBytes = 64 << 10

    let url: URL
    let recentURL: URL
    let settlingURL: URL
    let refusedURL: URL
    private let logger: Logger
    /// The state file's size after its last whole write (0: not written whole by this run).
    private var compactedBytes = 0

    init(directory: URL, runtimeDirectory: URL?, logger: Logger) {
        self.url = directory.appendingPathComponent(Self.fileName)
        self.refusedURL = directory.appendingPathComponent(Self.refusedFileName)
        let runtime = runtimeDirectory ?? directory
        self.recentURL = runtime.appendingPathComponent(Self.recentFileName)
        self.settlingURL = runtime.appendingPathComponent(Self.settlingFileName)
        self.logger = logger
    }

    /// What earlier runs kept: the state file, then what was not settled yet. A state file that cannot be read
    /// is reported and moved aside (`refusedFileName`), and the proxy counts from nothing; an unreadable file of
    /// the runtime directory is reported and dropped (it holds minutes).
    func load() -> SavingsLedger {
        var ledger = SavingsLedger()
        switch Self.read(self.url) {
        case .none: break
        case .read(let kept):
            ledger = kept
            self.compactedBytes = regularFileSize(atPath: self.url.path) ?? 0
        case .refused(let reason):
            self.logger.error(
                "savings: cannot read \(self.url.path) (\(reason)); moved to \(self.refusedURL.lastPathComponent), counting from now"
            )
            _ = rename(self.url.path, self.refusedURL.path)
        }
        for url in [self.settlingURL, self.recentURL] {
            switch Self.read(url) {
            case .none: break
            case .read(let recent): ledger.merge(recent)
            case .refused(let reason):
                self.logger.warning("savings: ignoring \(url.path) (\(reason))")
                _ = unlink(url.path)
            }
        }
        return ledger
    }

    enum ReadResult {
        case none
        case read(SavingsLedger)
        case refused(String)
    }

    static func read(_ url: URL) -> ReadResult {
        guard regularFileSize(atPath: url.path) != nil else { return .none }
        do {
            let bytes = try LineFiles.contents(of: url.path, maximumBytes: SavingsLedger.maximumFileBytes)
            guard let text = String(validating: bytes, as: UTF8.self) else { return .refused("not UTF-8 text") }
            return .read(try SavingsLedger(decodingAppends: text))
        } catch let error as SavingsLedger.DecodingError {
            return .refused(Self.describe(error))
        } catch {
            return .refused("\(error)")
        }
    }

    static func describe(_ error: SavingsLedger.DecodingError) -> String {
        switch error {
        case .notALedger: "it does not start with \"\(SavingsLedger.header)\""
        case .tooLarge: "it is larger than \(SavingsLedger.maximumFileBytes) bytes"
        case .malformedLine(let line): "line \(line) is not what the ledger writes"
        case .tooManyHosts: "more than \(SavingsLedger.maximumHosts) hosts"
        case .tooManyDays(let host): "more than \(SavingsLedger.daysKept) days for \(host)"
        case .daysOutOfOrder(let line): "line \(line): days out of order"
        }
    }

    /// Appends changed days to the runtime directory's file (never synced: it is memory).
    func append(_ bytes: [UInt8]) throws {
        try appendLines(bytes, to: self.recentURL.path)
    }

    /// Moves what the runtime directory holds to the state file, merged into one append and synced; rewrites
    /// the state file whole once it has grown past `compactionSlackBytes` over twice its last whole size.
    func settle() throws {
        if regularFileSize(atPath: self.settlingURL.path) == nil {
            guard let size = regularFileSize(atPath: self.recentURL.path), size > 0 else { return }
            try retryingSyscall("rename(\(self.recentURL.path))") {
                rename(self.recentURL.path, self.settlingURL.path)
            }
        }
        switch Self.read(self.settlingURL) {
        case .none: return
        case .refused(let reason):
            self.logger.warning("savings: dropping \(self.settlingURL.path) (\(reason))")
        case .read(let changes):
            try appendLines(Array(changes.encoded().utf8), to: self.url.path, sync: true)
        }
        try retryingSyscall("unlink(\(self.settlingURL.path))") { unlink(self.settlingURL.path) }
        let size = regularFileSize(atPath: self.url.path) ?? 0
        if size > 2 * self.compactedBytes + Self.compactionSlackBytes { try self.rewrite() }
    }

    /// The state file written whole from what it holds: aside, synced, renamed over (a crash leaves the old file
    /// or the new one).
    private func rewrite() throws {
        guard case .read(let ledger) = Self.read(self.url) else { return }
        let bytes = Array(ledger.encoded().utf8)
        let aside = self.url.path + ".new"
        _ = unlink(aside)
        try appendLines(bytes, to: aside, sync: true)
        try retryingSyscall("rename(\(aside))") { rename(aside, self.url.path) }
        self.compactedBytes = bytes.count
    }
}
