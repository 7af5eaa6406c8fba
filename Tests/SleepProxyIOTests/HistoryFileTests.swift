import Foundation
import Logging
import SleepProxyControl
import SleepProxyCore
import Testing

@testable import SleepProxyIO

/// `history.jsonl` (docs/status-page.md §3): what is written is read back at the next start, the file is
/// rewritten to its bound once it holds twice that (at 2N lines not yet, at 2N + 1 yes), a torn last line is
/// skipped, and a writer that cannot keep up drops records past its queue's bound instead of growing.
@Suite("History file")
struct HistoryFileTests {
    static let logger = Logger(label: "test")

    static func directory() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("history-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    static func record(_ index: Int) -> HistoryRecord {
        HistoryRecord(
            time: Date(timeIntervalSince1970: 1_790_000_000 + Double(index)), mac: "02:53:50:00:00:\(index % 3)",
            hostName: "h\(index % 3).local.", state: index % 2 == 0 ? .asleep : .handedBack, note: "n\(index)")
    }

    /// Reads what `file` kept, then starts its writer.
    static func start(_ file: HistoryFile) throws -> HistoryBook {
        let book = file.load()
        try file.start()
        return book
    }

    static func lines(_ file: HistoryFile) -> Int {
        ((try? String(contentsOf: file.url, encoding: .utf8)) ?? "").split(separator: "\n").count
    }

    @Test func whatIsWrittenIsReadBackAndRewrittenPastTwiceItsBound() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = HistoryFile(directory: directory, logger: Self.logger, bound: 5)
        #expect(try Self.start(file).count == 0)
        file.write((0..<10).map(Self.record))
        file.stop()
        #expect(Self.lines(file) == 10, "at twice the bound the file is appended to")
        let again = HistoryFile(directory: directory, logger: Self.logger, bound: 5)
        let book = try Self.start(again)
        #expect(book.count == 5 && book.records(of: "02:53:50:00:00:0").last?.note == "n9", "the newest five")
        again.write([Self.record(10)])
        again.stop()
        #expect(Self.lines(again) == 5, "one past twice the bound, it is rewritten to the bound")
        let rewritten = HistoryFile.read(again.url, bound: 5).0
        #expect(rewritten.all.map(\.note) == ["n6", "n7", "n8", "n9", "n10"])
    }

    /// The engine hands over records and the writer thread makes the lines: a state change (written by hand) and a
    /// wake decision (through the JSON encoder) come back at the next start as they were, in the order given.
    @Test func recordsHandedOverAreWrittenInOrderByTheWriter() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let file = HistoryFile(directory: directory, logger: Self.logger)
        _ = try Self.start(file)
        let wake = HistoryRecord(
            WakeLogEntry(
                kind: .wake, time: Date(timeIntervalSince1970: 1_790_000_100), mac: "02:53:50:00:00:01",
                interface: "eth0", hostName: "h1.local.", trigger: .init(type: .administrator), seconds: nil,
                attempts: nil, summary: "woken"))
        file.write([Self.record(0), wake])
        file.write([Self.record(1)])
        file.stop()
        #expect(file.dropped == 0)
        let lines = try String(contentsOf: file.url, encoding: .utf8).split(separator: "\n")
        #expect(lines.count == 3)
        #expect(
            lines.count == 3 && lines[0].contains("\"n0\"") && lines[1].contains("woken") && lines[2].contains("\"n1\"")
        )
        let read = HistoryFile.read(file.url).0.all
        #expect(Set(read) == [Self.record(0), wake, Self.record(1)], "\(read)")
    }

    /// Lines as 0.5.0 wrote them, one for every state and every reason it wrote: each is read, its state is the
    /// wire's word for the engine's state, and its note the word of one of the engine's reasons.
    @Test func aHistoryWrittenBy050IsRead() throws {
        let written: [(state: String, note: String)] = [
            ("starting", "registered"), ("starting", "handed over"), ("asleep", "no probe answer"),
            ("asleep", "no name answer"), ("asleep", "after a restart"), ("awake", "answers itself"),
            ("standby", "other proxy"), ("handed-back", "owner-option"), ("handed-back", "mdns"),
            ("handed-back", "own-name-probe"), ("handed-back", "ssdp"), ("gone", "lease ended"),
            ("gone", "awake at expiry"), ("gone", "forgotten"), ("gone", "released"), ("gone", "transferred"),
            ("gone", "reloaded"),
        ]
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let lines = written.enumerated().map { index, line in
            "{\"hostName\":\"vm.local.\",\"mac\":\"02:53:50:00:00:02\",\"note\":\"\(line.note)\",\"state\":\"\(line.state)\",\"time\":\"2026-11-25T10:00:\(10 + index)Z\"}\n"
        }
        try Data(lines.joined().utf8).write(to: directory.appendingPathComponent(HistoryFile.fileName))
        let read = HistoryFile.read(directory.appendingPathComponent(HistoryFile.fileName)).0.all
        #expect(read.count == written.count)
        for (record, line) in zip(read, written) {
            let state = try #require(record.state)
            #expect(state.rawValue == line.state && HostState(state).map(PresenceState.init) == state)
            #expect(HostStateReason(rawValue: record.note ?? "") != nil, "\(line.note)")
        }
    }

    @Test func aTornLastLineIsSkipped() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let whole = try ControlProtocol.frame(Self.record(1))
        try Data(whole + whole.prefix(20)).write(to: directory.appendingPathComponent(HistoryFile.fileName))
        #expect(HistoryFile.read(directory.appendingPathComponent(HistoryFile.fileName)).0.count == 1)
    }

    /// A file grown past the bound is read from its newest part only: a file of exactly the bound is read whole,
    /// one byte over it loses its first (then partial) line.
    @Test func anOversizedFileIsReadFromItsNewestPart() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let lines = try (0..<3).map { try Self.record($0).jsonLine() }
        let bytes = Array(lines.joined())
        let url = directory.appendingPathComponent(HistoryFile.fileName)
        try Data(bytes).write(to: url)
        #expect(HistoryFile.read(url, maximumBytes: bytes.count).0.all.map(\.note) == ["n0", "n1", "n2"])
        #expect(HistoryFile.read(url, maximumBytes: bytes.count - 1).0.all.map(\.note) == ["n1", "n2"])
    }

    /// The file is read in chunks: lines that straddle a chunk's end are read whole, and a line longer than
    /// `maximumLineBytes` (at N + 1; at N it is kept) is skipped without holding more than that.
    @Test func linesAcrossChunksAreWholeAndAnOverlongLineIsSkipped() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let url = directory.appendingPathComponent(HistoryFile.fileName)
        let records = try (0..<3_000).map { try Self.record($0).jsonLine() }
        try Data(records.joined()).write(to: url)
        #expect(records.joined().count > 4 * LineFiles.maximumLineBytes, "the file spans several chunks")
        var seen: [[UInt8]] = []
        _ = LineFiles.forEachLine(of: url.path, maximumBytes: LineFiles.maximumBytes) { seen.append(Array($0)) }
        #expect(seen == records.map { Array($0.dropLast()) }, "every line whole, none twice")

        func lineCount(withPadding padding: Int) throws -> Int {
            // A line of `maximumLineBytes + padding` bytes (its newline not counted) between two records.
            let long = [UInt8](repeating: UInt8(ascii: "x"), count: LineFiles.maximumLineBytes + padding)
            try Data(records[0] + long + [0x0A] + records[1]).write(to: url)
            var seen = 0
            _ = LineFiles.forEachLine(of: url.path, maximumBytes: LineFiles.maximumBytes) { _ in seen += 1 }
            return seen
        }
        #expect(try lineCount(withPadding: 0) == 3, "a line of the longest length kept is read")
        #expect(try lineCount(withPadding: 1) == 2, "one byte longer is skipped")
        #expect(HistoryFile.read(url).0.all.map(\.note) == ["n0", "n1"])
    }

    @Test func aStalledWriterDropsPastItsQueueBound() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        // Not started: nothing drains the queue, as with a disk that stopped answering.
        let file = HistoryFile(directory: directory, logger: Self.logger)
        let record = Self.record(0)
        file.write(Array(repeating: record, count: HistoryFile.pendingLimit - 1))
        file.write([record])
        #expect(file.dropped == 0, "at the bound every record is queued")
        file.write([record, record])
        #expect(file.dropped == 2)
    }
}
