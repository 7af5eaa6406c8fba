import CSleepProxyLinux
import Foundation
import SleepProxyCore
import SleepProxyTestSupport
import Testing

@testable import SleepProxyIO

/// The journal writes zeros ahead of its entries so that an append overwrites blocks the file already has
/// (docs/state.md, "SD-card wear"); replay takes the zeros for the end, and a torn write into them is cut.
@Suite("Journal file: zeros written ahead")
struct JournalReserveTests {
    static func length(_ directory: URL) throws -> Int {
        let path = directory.appendingPathComponent("registrations.journal").path
        return try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int ?? -1
    }

    /// `reserveBytes` at N and N+1: an append that ends exactly where the zeros end leaves the file as long as
    /// it was; one byte more grows it by a whole reserve, zeros and all.
    @Test func theFileGrowsOnlyPastItsZeros() throws {
        let directory = JournalFileTests.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let path = directory.appendingPathComponent("registrations.journal").path
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        #expect(fd >= 0)
        defer { close(fd) }
        let first = try JournalFile.write([1, 2, 3], to: fd, at: 0, allocated: 0)
        #expect(first == JournalFile.reserveBytes + JournalFile.pageBytes)
        #expect(try Self.length(directory) == first)
        let fill = [UInt8](repeating: 7, count: first - 3)
        #expect(try JournalFile.write(fill, to: fd, at: 3, allocated: first) == first)
        #expect(try Self.length(directory) == first)
        let grown = try JournalFile.write([9], to: fd, at: first, allocated: first)
        #expect(grown == JournalFile.allocation(for: first + 1) && grown >= first + 1 + JournalFile.reserveBytes)
        #expect(try Self.length(directory) == grown)
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: path)))
        #expect(bytes[first] == 9 && bytes[(first + 1)...].allSatisfy { $0 == 0 })
    }

    /// Appends land in the zeros; opened again, the journal reads without a problem, and appends go on where
    /// the entries end, not where the file does.
    @Test func aJournalWithZerosAheadReopensAndGoesOn() throws {
        let directory = JournalFileTests.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let hosts = try JournalFileTests.hosts(6)
        let base = SystemClock.timeBase()
        do {
            let (journal, _) = try JournalFile.open(directory: directory, timeBase: base)
            #expect(journal.allocated == 0 && journal.size == 0)
            try journal.append([.put(hosts[0])], timeBase: base)
            let allocated = journal.allocated
            #expect(allocated >= journal.size + JournalFile.reserveBytes)
            try journal.append([.put(hosts[1]), .put(hosts[2])], timeBase: base)
            let length = try Self.length(directory)
            #expect(journal.allocated == allocated && length == allocated)
        }
        let (journal, replay) = try JournalFileTests.reopen(directory, timeBase: base)
        #expect(replay.problems.isEmpty && replay.entryCount == 3)
        let length = try Self.length(directory)
        #expect(journal.size == replay.intactLength && journal.allocated == length)
        try journal.append([.put(hosts[3])], timeBase: base)
        let again = try journal.reread(timeBase: base)
        #expect(again.problems.isEmpty && Set(again.registrations.map(\.key)) == Set(hosts[0..<4].map(\.key)))
    }

    /// Appends of every size, across the end of the zeros, written past the page cache where the file system
    /// allows it and through it where it does not (or refused): the file holds the same entries either way, read
    /// back at once and after a restart.
    @Test(arguments: [true, false]) func appendsReadBackTheSameWrittenDirectlyOrNot(direct: Bool) throws {
        let directory = JournalFileTests.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let hosts = try JournalFileTests.hosts(24)
        let base = SystemClock.timeBase()
        do {
            let (journal, _) = try JournalFile.open(directory: directory, timeBase: base)
            var memory: UInt32 = 0
            var offset: UInt32 = 0
            let offered = csp_direct_io_alignment(journal.fd, &memory, &offset) == 0 && offset <= 4096
            #expect(journal.writesDirectly == offered, "direct I/O offered: \(offered), alignment \(offset)")
            if !direct {
                journal.direct = nil
                _ = csp_set_direct_io(journal.fd, 0)
            }
            for (n, host) in hosts.enumerated() {
                // Large entries, and a small removal now and then, so that the ends fall anywhere in a sector.
                try journal.append([.put(host)], timeBase: base)
                if n % 3 == 2 { try journal.append([.remove(hosts[n - 1].key)], timeBase: base) }
            }
            let length = try Self.length(directory)
            #expect(journal.size > JournalFile.reserveBytes && journal.allocated == length)
            let replay = try journal.reread(timeBase: base)
            #expect(replay.problems.isEmpty && replay.entryCount == 32 && replay.usedLength == journal.size)
        }
        let kept = Set(hosts.enumerated().filter { $0.offset % 3 != 1 }.map(\.element.key))
        let (journal, replay) = try JournalFileTests.reopen(directory, timeBase: base)
        #expect(replay.problems.isEmpty && Set(replay.registrations.map(\.key)) == kept)
        try journal.append([.remove(hosts[0].key)], timeBase: base)
        #expect(try journal.reread(timeBase: base).registrations.count == kept.count - 1)
    }

    /// A power cut while an entry overwrote the zeros leaves part of it: the next start reports it, cuts it with
    /// the zeros after it, keeps every host before it, and appends whole entries after them.
    @Test func anEntryTornInTheZerosIsCutAtTheNextStart() throws {
        let directory = JournalFileTests.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let hosts = try JournalFileTests.hosts(5)
        let base = SystemClock.timeBase()
        let intact: Int
        do {
            let (journal, _) = try JournalFile.open(directory: directory, timeBase: base)
            try journal.append(hosts[0..<3].map { .put($0) }, timeBase: base)
            intact = journal.size
        }
        let torn = RegistrationJournal.encode(.put(hosts[3]), timeBase: base)
        let handle = try FileHandle(forWritingTo: directory.appendingPathComponent("registrations.journal"))
        try handle.seek(toOffset: UInt64(intact))
        try handle.write(contentsOf: torn.prefix(torn.count / 2))
        try handle.close()

        let (journal, replay) = try JournalFileTests.reopen(directory, timeBase: base)
        #expect(replay.problems.count == 1 && replay.intactLength == intact)
        #expect(Set(replay.registrations.map(\.key)) == Set(hosts[0..<3].map(\.key)))
        #expect(try Self.length(directory) == intact && journal.size == intact)
        try journal.append([.put(hosts[4])], timeBase: base)
        let again = try journal.reread(timeBase: base)
        #expect(again.problems.isEmpty)
        #expect(Set(again.registrations.map(\.key)) == Set((hosts[0..<3] + [hosts[4]]).map(\.key)))
    }

    /// A compacted journal has its zeros too, with what was appended during the compaction inside them.
    @Test func aCompactedJournalHasItsZerosAhead() throws {
        let directory = JournalFileTests.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let hosts = try JournalFileTests.hosts(40)
        let base = SystemClock.timeBase()
        let (journal, _) = try JournalFile.open(directory: directory, timeBase: base)
        try journal.append(hosts.map { .put($0) }, timeBase: base)
        try journal.compact(Array(hosts.prefix(5)), timeBase: base)
        let compacted = try Self.length(directory)
        #expect(journal.allocated == compacted && journal.allocated >= journal.size + 4096)
        try journal.startCompaction(Array(hosts.prefix(3)), timeBase: base)
        try journal.append([.put(hosts[30])], timeBase: base)
        #expect(try JournalFileTests.finish(journal))
        let finished = try Self.length(directory)
        #expect(journal.allocated == finished && journal.allocated >= journal.size + 4096)
        let replay = try journal.reread(timeBase: base)
        #expect(replay.problems.isEmpty && replay.usedLength == journal.size)
        #expect(Set(replay.registrations.map(\.key)) == Set((hosts[0..<3] + [hosts[30]]).map(\.key)))
    }

    /// A compaction on a nearly full disk: the new file's zeros ahead stop where the disk does, and the journal
    /// takes the length the file has, not the one its zeros were meant to reach; appends and the next start go
    /// on. The disk is a tmpfs sized from a dry run so that the new file gets half its zeros (needs root to mount).
    @Test(.enabled(if: getuid() == 0, "needs root to mount a small tmpfs"))
    func aCompactionOnANearlyFullDiskTakesItsFilesRealLength() throws {
        let hosts = try JournalFileTests.hosts(12)
        let base = SystemClock.timeBase()
        // The dry run, on the ordinary temporary directory: how long the old journal and the compacted one are.
        let dry = JournalFileTests.directory()
        defer { try? FileManager.default.removeItem(at: dry) }
        let (sizing, _) = try JournalFile.open(directory: dry, timeBase: base)
        try sizing.append(hosts.map { .put($0) }, timeBase: base)
        let oldLength = sizing.allocated
        try sizing.compact(Array(hosts.prefix(8)), timeBase: base)
        let compacted = sizing.size
        let pages = (oldLength + compacted + JournalFile.reserveBytes / 2) / JournalFile.pageBytes + 1

        let directory = JournalFileTests.directory()
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        _ = try Command.check([
            "mount", "-t", "tmpfs", "-o", "size=\(pages * JournalFile.pageBytes)", "sleepproxy-test", directory.path,
        ])
        defer { _ = try? Command.run(["umount", "-l", directory.path]) }
        let (journal, _) = try JournalFile.open(directory: directory, timeBase: base)
        try journal.append(hosts.map { .put($0) }, timeBase: base)
        let before = try Self.length(directory)
        #expect(journal.allocated == oldLength && before == oldLength)
        try journal.startCompaction(Array(hosts.prefix(8)), timeBase: base)
        #expect(try JournalFileTests.finish(journal))
        let length = try Self.length(directory)
        #expect(journal.size == compacted)
        #expect(length > compacted && length < JournalFile.allocation(for: compacted), "the zeros stopped short")
        #expect(journal.allocated == length)
        // The old file is gone and its room with it: an append goes on, and the journal reads back whole.
        try journal.append([.put(hosts[11])], timeBase: base)
        let replay = try journal.reread(timeBase: base)
        #expect(replay.problems.isEmpty && replay.usedLength == journal.size)
        #expect(Set(replay.registrations.map(\.key)) == Set((hosts.prefix(8) + [hosts[11]]).map(\.key)))
    }
}
