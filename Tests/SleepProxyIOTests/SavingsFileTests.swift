import Foundation
import Logging
import SleepProxyCore
import Testing

@testable import SleepProxyIO

/// The savings ledger's file (docs/savings.md, "On disk"): changed days wait in the runtime directory and settle into
/// the state directory merged, once each however often they changed; it reads back after a restart with what was not
/// settled yet; a settle done twice changes nothing; a state file that cannot be read is moved aside, never
/// overwritten.
@Suite("Savings file")
struct SavingsFileTests {
    static let logger = Logger(label: "test")

    static func ledgerAfter(minutes: Int, hosts: Int) -> SavingsLedger {
        var ledger = SavingsLedger()
        let local = { (minute: Int) in LocalDayTime(day: 20_000, millisecondsIntoDay: Int64(minute) * 60_000) }
        ledger.advance(now: .seconds(0), local: local(0))
        for index in 0..<hosts {
            ledger.hostEntered(
                .asleep, host: "02:00:00:00:00:\(10 + index)", name: "h\(index).local.", now: .seconds(0),
                local: local(0))
        }
        for minute in 1...max(1, minutes) { ledger.advance(now: .seconds(Int64(minute) * 60), local: local(minute)) }
        return ledger
    }

    static func changes(_ ledger: inout SavingsLedger) -> [UInt8] {
        Array((ledger.takeChanges()?.encoded() ?? "").utf8)
    }

    @Test func changedDaysSettleMergedAndReadBack() throws {
        try HistorySettleTests.directories { state, runtime in
            let file = SavingsFile(directory: state, runtimeDirectory: runtime, logger: Self.logger)
            var ledger = Self.ledgerAfter(minutes: 1, hosts: 20)
            // A minute's changes sixty times over, as the engine hands them on.
            for minute in 2...61 {
                let local = LocalDayTime(day: 20_000, millisecondsIntoDay: Int64(minute) * 60_000)
                ledger.advance(now: .seconds(Int64(minute) * 60), local: local)
                try file.append(Self.changes(&ledger))
            }
            #expect(!FileManager.default.fileExists(atPath: file.url.path), "nothing on the card before a settle")
            try file.settle()
            let settled = try Data(contentsOf: file.url)
            // Twenty hosts' one day and the proxy's, once: what the card receives for an hour of changes.
            #expect(String(decoding: settled, as: UTF8.self).split(separator: "\n").count == 1 + 2 + 20 * 2)
            #expect(settled.count < 1_500)
            #expect(!FileManager.default.fileExists(atPath: file.recentURL.path))
            let read = SavingsFile(directory: state, runtimeDirectory: runtime, logger: Self.logger).load()
            #expect(read.hosts.mapValues(\.days) == ledger.hosts.mapValues(\.days))
            #expect(read.running == ledger.running)
        }
    }

    /// A restart before the settle reads what waits in the runtime directory too; a settle cut short after its
    /// append (the settling file still there) is done again, and the file reads the same.
    @Test func whatWaitsIsReadAndASettleDoneTwiceChangesNothing() throws {
        try HistorySettleTests.directories { state, runtime in
            let file = SavingsFile(directory: state, runtimeDirectory: runtime, logger: Self.logger)
            var ledger = Self.ledgerAfter(minutes: 5, hosts: 2)
            try file.append(Self.changes(&ledger))
            try file.settle()
            ledger.advance(now: .seconds(600), local: LocalDayTime(day: 20_000, millisecondsIntoDay: 600_000))
            let changes = Self.changes(&ledger)
            try file.append(changes)
            let beforeSettle = SavingsFile(directory: state, runtimeDirectory: runtime, logger: Self.logger).load()
            #expect(beforeSettle.hosts.mapValues(\.days) == ledger.hosts.mapValues(\.days))
            // Cut short: appended to the state file, the settling file left behind.
            try appendLines(changes, to: file.url.path)
            try FileManager.default.moveItem(at: file.recentURL, to: file.settlingURL)
            try file.settle()
            #expect(!FileManager.default.fileExists(atPath: file.settlingURL.path))
            let after = SavingsFile(directory: state, runtimeDirectory: runtime, logger: Self.logger).load()
            #expect(after.hosts.mapValues(\.days) == ledger.hosts.mapValues(\.days))
        }
    }

    /// Appends outgrowing the file's own size get it rewritten whole, to what it holds.
    @Test func theFileIsRewrittenOnceItsAppendsOutgrowIt() throws {
        try HistorySettleTests.directories { state, runtime in
            let file = SavingsFile(directory: state, runtimeDirectory: runtime, logger: Self.logger)
            var ledger = Self.ledgerAfter(minutes: 1, hosts: 50)
            var minute = 1
            var largest = 0
            var rewritten = false
            while !rewritten, minute < 1_000 {
                minute += 1
                ledger.advance(
                    now: .seconds(Int64(minute) * 60),
                    local: LocalDayTime(day: 20_000, millisecondsIntoDay: Int64(minute) * 60_000))
                try file.append(Self.changes(&ledger))
                try file.settle()
                let size = try #require(regularFileSize(atPath: file.url.path))
                rewritten = size < largest
                largest = max(largest, size)
            }
            #expect(
                rewritten && largest > SavingsFile.compactionSlackBytes - 4_096,
                "rewritten once past the bound, not before")
            #expect(try #require(regularFileSize(atPath: file.url.path)) < 4_096, "the ledger itself: one day each")
            let read = SavingsFile(directory: state, runtimeDirectory: runtime, logger: Self.logger).load()
            #expect(read.hosts.mapValues(\.days) == ledger.hosts.mapValues(\.days))
        }
    }

    @Test func aFileThatCannotBeReadIsMovedAsideNotOverwritten() throws {
        try HistorySettleTests.directories { state, runtime in
            let file = SavingsFile(directory: state, runtimeDirectory: runtime, logger: Self.logger)
            let damaged = SavingsLedger.header + "\nhost a\nnot a day\n"
            try damaged.write(to: file.url, atomically: true, encoding: .utf8)
            #expect(file.load().hosts.isEmpty)
            #expect(!FileManager.default.fileExists(atPath: file.url.path))
            #expect(try String(contentsOf: file.refusedURL, encoding: .utf8) == damaged)
        }
    }
}
