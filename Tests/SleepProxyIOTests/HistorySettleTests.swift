import Foundation
import Logging
import SleepProxyControl
import SleepProxyCore
import Testing

@testable import SleepProxyIO

/// The history's recent lines wait in the runtime directory and settle into the state directory together
/// (docs/state.md, "SD-card wear"): nothing reaches the state file before a settle, everything after it; a settle cut
/// short by a crash is finished once, never twice; a runtime file at its byte bound that cannot settle drops what
/// comes next instead of growing. The wake log, kept in the runtime directory, is rebuilt from the history after a
/// reboot and taken over once from the state directory where earlier releases kept it.
@Suite("History settles")
struct HistorySettleTests {
    static let logger = Logger(label: "test")

    /// A state and a runtime directory of their own, removed by `body`'s end.
    static func directories(_ body: (URL, URL) throws -> Void) throws {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("settle-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: base) }
        let state = base.appendingPathComponent("state")
        let runtime = base.appendingPathComponent("run")
        for directory in [state, runtime] {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        }
        try body(state, runtime)
    }

    static func lines(_ url: URL) -> [String] {
        ((try? String(contentsOf: url, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
    }

    @Test func linesReachTheStateDirectoryOnlyWhenTheySettle() throws {
        try Self.directories { state, runtime in
            let file = HistoryFile(directory: state, runtimeDirectory: runtime, logger: Self.logger)
            let started = try HistoryFileTests.start(file)
            #expect(started.count == 0)
            file.write((0..<4).map(HistoryFileTests.record))
            #expect(file.settleNow(), "the first settle writes the queued lines, then moves them")
            #expect(Self.lines(file.url).count == 4)
            #expect(!FileManager.default.fileExists(atPath: file.recentURL.path))
            file.write([HistoryFileTests.record(4)])
            // Written to the runtime directory, not yet to the state file: wait for the writer (bounded).
            #expect(waitUntil { Self.lines(file.recentURL).count == 1 })
            #expect(Self.lines(file.url).count == 4, "nothing reaches the state file between settles")
            // A restart reads both, and settles what the last run left first.
            file.stop()
            #expect(Self.lines(file.url).count == 5, "a stop settles")
            file.write([HistoryFileTests.record(5)])  // after the stop: never written
            let again = HistoryFile(directory: state, runtimeDirectory: runtime, logger: Self.logger)
            let read = try HistoryFileTests.start(again)
            #expect(read.all.map(\.note) == ["n0", "n1", "n2", "n3", "n4"])
            again.stop()
        }
    }

    @Test func aCrashLeavesNothingLostAndNothingTwice() throws {
        try Self.directories { state, runtime in
            let file = HistoryFile(directory: state, runtimeDirectory: runtime, logger: Self.logger)
            let settled = Array(try (0..<2).map { try HistoryFileTests.record($0).jsonLine() }.joined())
            let unsettled = try HistoryFileTests.record(2).jsonLine()
            // A crash after the settle's append, before the settling file went: not appended again.
            try Data(settled).write(to: file.url)
            try Data(settled).write(to: file.settlingURL)
            try Data(unsettled).write(to: file.recentURL)
            #expect(file.load().all.map(\.note) == ["n0", "n1", "n2"])
            #expect(Self.lines(file.url).count == 3)
            #expect(!FileManager.default.fileExists(atPath: file.settlingURL.path))
            // A crash before the append: the settling file is appended at the next start.
            let more = try HistoryFileTests.record(3).jsonLine()
            try Data(more).write(to: file.settlingURL)
            let again = HistoryFile(directory: state, runtimeDirectory: runtime, logger: Self.logger)
            #expect(again.load().all.map(\.note) == ["n0", "n1", "n2", "n3"])
            #expect(Self.lines(again.url).count == 4)
        }
    }

    /// A runtime directory anybody can write to (`--control-socket /tmp/…`) must not make the daemon copy another
    /// file into the state directory: a symbolic link planted as the recent or the settling file is not followed.
    @Test func aPlantedSymbolicLinkIsNotFollowed() throws {
        try Self.directories { state, runtime in
            let secret = runtime.deletingLastPathComponent().appendingPathComponent("secret")
            try Data(try HistoryFileTests.record(7).jsonLine()).write(to: secret)
            let file = HistoryFile(directory: state, runtimeDirectory: runtime, logger: Self.logger)
            try FileManager.default.createSymbolicLink(at: file.settlingURL, withDestinationURL: secret)
            try FileManager.default.createSymbolicLink(at: file.recentURL, withDestinationURL: secret)
            #expect(file.load().count == 0, "neither link is read")
            #expect(!Self.lines(file.url).contains { $0.contains("n7") }, "nor copied to the state directory")
        }
    }

    /// At `recentLimitBytes` the runtime file takes the batch; one byte more, with the state file unwritable (a
    /// directory stands in its place), the batch is dropped and counted.
    @Test(arguments: [0, 1])
    func theRuntimeFileIsBoundedWhileTheStateDirectoryCannotBeWritten(over: Int) throws {
        try Self.directories { state, runtime in
            let file = HistoryFile(directory: state, runtimeDirectory: runtime, logger: Self.logger)
            try FileManager.default.createDirectory(at: file.url, withIntermediateDirectories: true)
            let line = try HistoryFileTests.record(0).jsonLine()
            let filler = HistoryFile.recentLimitBytes - line.count + over
            // Long lines that are no record: read at start without a decoder's cost a line.
            let block = [UInt8](repeating: UInt8(ascii: "x"), count: 4095) + [0x0A]
            var bytes = Array(Array(repeating: block, count: filler / block.count).joined())
            bytes += [UInt8](repeating: 0x0A, count: filler - bytes.count)
            try Data(bytes).write(to: file.recentURL)
            _ = try HistoryFileTests.start(file)
            file.write([HistoryFileTests.record(0)])
            // The start moved the filler aside to settle it, and could not: the line lands in a new recent file,
            // or is dropped.
            #expect(waitUntil { file.dropped > 0 || (regularFileSize(atPath: file.recentURL.path) ?? 0) > 0 })
            #expect(file.dropped == over, "at the bound the line is kept, past it dropped")
            #expect(!file.settleNow(), "a settle that cannot write says so (`sleepproxyctl sync` fails)")
            file.stop()
        }
    }

    /// Journal entries no reply waits on are held at most `heldJournalLimitBytes` (at N held, at N + 1 written), or
    /// six hours; nothing held is never due.
    @Test func heldJournalEntriesAreBoundedInBytesAndTime() {
        let limit = EngineRunner.heldJournalLimitBytes
        let since = Timestamp(nanoseconds: 1_000_000_000)
        #expect(!EngineRunner.heldJournalIsDue(bytes: limit, since: since, now: since))
        #expect(EngineRunner.heldJournalIsDue(bytes: limit + 1, since: since, now: since))
        let settle = HistoryFile.settleInterval
        #expect(!EngineRunner.heldJournalIsDue(bytes: 1, since: since, now: since + settle - .nanoseconds(1)))
        #expect(EngineRunner.heldJournalIsDue(bytes: 1, since: since, now: since + settle))
        #expect(!EngineRunner.heldJournalIsDue(bytes: 0, since: nil, now: since + settle))
    }

    @Test func theWakeLogIsRebuiltFromTheHistoryOrTakenOverOnce() throws {
        try Self.directories { state, runtime in
            let entry = WakeLogEntry(
                kind: .wake, time: Date(timeIntervalSince1970: 1_790_000_000), mac: "02:53:50:00:00:01",
                interface: "eth0", hostName: "h.local.", trigger: .init(type: .administrator), seconds: nil,
                attempts: nil, summary: "woken")
            var book = HistoryBook()
            book.append(HistoryFileTests.record(0))
            book.append(HistoryRecord(entry))
            let rebuilt = WakeLog(directory: runtime, stateDirectory: state, history: book)
            #expect(rebuilt.recent == [entry], "after a reboot: the history's wake records")
            #expect(Self.lines(rebuilt.url).count == 1, "and written to the runtime directory")
            try FileManager.default.removeItem(at: rebuilt.url)
            // An earlier release's log in the state directory is taken over once, and removed there.
            var older = entry
            older.kind = .awake
            let legacy = state.appendingPathComponent(WakeLog.fileName)
            try Data(try ControlProtocol.frame(older)).write(to: legacy)
            let upgraded = WakeLog(directory: runtime, stateDirectory: state, history: book)
            #expect(upgraded.recent == [older])
            #expect(!FileManager.default.fileExists(atPath: legacy.path))
            #expect(WakeLog(directory: runtime, stateDirectory: state, history: HistoryBook()).recent == [older])
        }
    }
}

/// Polls `condition` every 10 ms for at most `seconds`.
private func waitUntil(seconds: Double = 5, _ condition: () -> Bool) -> Bool {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if condition() { return true }
        usleep(10_000)
    }
    return condition()
}
