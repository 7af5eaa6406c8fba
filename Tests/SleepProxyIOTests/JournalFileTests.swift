import Foundation
import SleepProxyCore
import SleepProxyTestSupport
import SleepProxyWire
import Testing

@testable import SleepProxyIO

@Suite("Journal file compaction")
struct JournalFileTests {
    /// Large hosts (30 services, about 4 KB an entry), each from its own address.
    static func hosts(_ count: Int) throws -> [OwnerRegistration] {
        var registrar = Registrar(
            configuration: RegistrationConfiguration(
                maximumRecords: 1_000_000, maximumHosts: 10_000, requireSourceAmongClaimedAddresses: false,
                rateLimitBurst: 1 << 30, rateLimitPerSecond: 1 << 30))
        let services = (0..<30).map { ("Service \($0) with a long descriptive name._http._tcp", UInt16(8000 + $0)) }
        return try (0..<count).map { n in
            let address = IPAddress.v6(IPv6Address(high: 0x2001_0DB8_0000_0000, low: 0x6000 + UInt64(n)))
            let message = SampleRegistration.message(
                id: UInt16(n), mac: MACAddress(rawValue: 0x0253_5000_6000 + UInt64(n)),
                host: try DNSName(parsing: "j\(n).local."), addresses: [address], services: services)
            guard
                case .accepted(let acceptance) = registrar.handle(
                    datagram: message.encoded(options: .appleUpdate), from: address,
                    on: InterfaceContext(
                        name: "eth0", index: 2, macAddress: MACAddress("02:53:50:00:00:01")!,
                        prefixes: [IPPrefix("2001:db8::1/64")!]),
                    now: SystemClock.now())
            else { throw CancellationError() }
            return acceptance.registration
        }
    }

    /// A journal that grew only with new hosts holds nothing to drop and is not rewritten (a registration storm
    /// would stall on it); one with more than four entries per live host is (N and N+1 around the ratio).
    /// At open, the hosts are handed to `restoring` while the journal is decoded on another thread, in chunks of
    /// at most `restoreChunk`: every host the replay holds, once, and a removed one not at all.
    @Test func openHandsOverTheHostsToRestoreInChunks() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "journal-restoring-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        defer { try? FileManager.default.removeItem(at: directory) }
        let count = JournalFile.restoreChunk * 2 + 1
        let hosts = try Self.hosts(count)
        let base = SystemClock.timeBase()
        do {
            let (journal, _) = try JournalFile.open(directory: directory, timeBase: base)
            try journal.append(
                hosts.map { RegistrationJournal.Entry.put($0) } + [.remove(hosts[0].key)], timeBase: base)
        }
        var chunks: [[OwnerRegistration]] = []
        let (_, replay) = try JournalFile.open(directory: directory, timeBase: base) { chunks.append($0) }
        #expect(replay.registrations.count == count - 1)
        #expect(chunks.flatMap { $0 }.sorted { $0.key < $1.key } == replay.registrations)
        #expect(chunks.allSatisfy { !$0.isEmpty && $0.count <= JournalFile.restoreChunk } && chunks.count >= 2)
    }

    @Test func compactionCountsEntriesPerLiveHost() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "journal-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        defer { try? FileManager.default.removeItem(at: directory) }
        let hosts = try Self.hosts(300)
        let (journal, _) = try JournalFile.open(directory: directory, timeBase: SystemClock.timeBase())
        try journal.append(hosts.map { .put($0) }, timeBase: SystemClock.timeBase())
        #expect(journal.size > JournalFile.compactionMinimumBytes, "\(journal.size) bytes")
        #expect(!journal.needsCompaction(liveHosts: 300), "every entry is a live host")
        let ratio = JournalFile.compactionRatio
        #expect(!journal.needsCompaction(liveHosts: 300 / ratio))
        #expect(journal.needsCompaction(liveHosts: 300 / ratio - 1))

        // Compacted to the 10 hosts still held: one entry each, and read back it holds exactly those.
        try journal.compact(Array(hosts.prefix(10)), timeBase: SystemClock.timeBase())
        #expect(!journal.needsCompaction(liveHosts: 10) && journal.size < JournalFile.compactionMinimumBytes)
        #expect(try journal.reread(timeBase: SystemClock.timeBase()).registrations.count == 10)
    }

    @Test func aLargeJournalReadAgainHoldsEveryHost() throws {
        // Over a mebibyte, with removals at both ends: opened again, it holds exactly the rest.
        let directory = Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let hosts = try Self.hosts(700)
        do {
            let (journal, _) = try JournalFile.open(directory: directory, timeBase: SystemClock.timeBase())
            try journal.append(hosts.map { .put($0) }, timeBase: SystemClock.timeBase())
            try journal.append([.remove(hosts[0].key), .remove(hosts[699].key)], timeBase: SystemClock.timeBase())
            #expect(journal.size >= 1 << 20, "\(journal.size) bytes")
        }
        let (_, replay) = try Self.reopen(directory, timeBase: SystemClock.timeBase())
        #expect(replay.problems.isEmpty && replay.entryCount == 702)
        #expect(replay.registrations.map(\.key) == hosts[1..<699].map(\.key).sorted())
    }

    /// Opens a journal this test had open a moment ago. Its lock goes with the last descriptor of the lock
    /// file, and a process another test is spawning at that instant holds copies of every descriptor until it
    /// execs (close-on-exec acts only then): so "in use" is waited out, for at most five seconds. A journal
    /// still really open fails after that.
    static func reopen(_ directory: URL, timeBase: TimeBase) throws -> (JournalFile, RegistrationJournal.Replay) {
        let deadline = ContinuousClock.now + .seconds(5)
        while true {
            do {
                return try JournalFile.open(directory: directory, timeBase: timeBase)
            } catch {
                guard "\(error)".contains("is in use by another sleepproxyd"), ContinuousClock.now < deadline else {
                    throw error
                }
                usleep(10_000)
            }
        }
    }

    static func directory() -> URL {
        FileManager.default.temporaryDirectory.appendingPathComponent(
            "journal-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
    }

    /// Waits (bounded) until the compaction's own thread is done and the engine's side has finished it.
    static func finish(_ journal: JournalFile) throws -> Bool {
        try waitUntil(timeout: 10, interval: 0.005) { try journal.finishCompaction() }
    }

    /// The new journal is written on a thread of its own while appends go on to the old one; what was appended
    /// meanwhile is in the new journal when it takes the old one's place, on disk as well as through the file.
    @Test func compactionInTheBackgroundKeepsWhatWasAppendedMeanwhile() throws {
        let directory = Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let hosts = try Self.hosts(300)
        let base = SystemClock.timeBase()
        do {
            let (journal, _) = try JournalFile.open(directory: directory, timeBase: base)
            try journal.append(hosts.map { .put($0) }, timeBase: base)
            try journal.startCompaction(Array(hosts.prefix(10)), timeBase: base)
            #expect(journal.isCompacting)
            // Meanwhile: a host leaves, and one comes back.
            try journal.append([.remove(hosts[0].key)], timeBase: base)
            try journal.append([.put(hosts[100])], timeBase: base)
            #expect(try Self.finish(journal), "the compaction never finished")
            #expect(!journal.isCompacting)
            #expect(journal.size < JournalFile.compactionMinimumBytes)
            let held = try journal.reread(timeBase: base).registrations.map(\.key)
            #expect(Set(held) == Set(hosts[1..<10].map(\.key) + [hosts[100].key]))
            // Appends after it go to the new file.
            try journal.append([.put(hosts[200])], timeBase: base)
        }
        #expect(
            !FileManager.default.fileExists(atPath: directory.appendingPathComponent("registrations.journal.new").path))
        let (reopened, replay) = try Self.reopen(directory, timeBase: base)
        _ = reopened
        #expect(
            Set(replay.registrations.map(\.key)) == Set(hosts[1..<10].map(\.key) + [hosts[100].key, hosts[200].key]))
    }

    /// A compaction that cannot start (its new file cannot be created) changes nothing; one abandoned at a stop
    /// leaves the old journal whole and no new file behind.
    @Test func aFailedOrAbandonedCompactionLeavesTheJournalWhole() throws {
        let directory = Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let hosts = try Self.hosts(20)
        let base = SystemClock.timeBase()
        let (journal, _) = try JournalFile.open(directory: directory, timeBase: base)
        try journal.append(hosts.map { .put($0) }, timeBase: base)
        let blocker = directory.appendingPathComponent("registrations.journal.new")
        try FileManager.default.createDirectory(at: blocker, withIntermediateDirectories: false)
        #expect(throws: SystemCallError.self) { try journal.startCompaction(Array(hosts.prefix(2)), timeBase: base) }
        #expect(!journal.isCompacting)
        try journal.append([.remove(hosts[19].key)], timeBase: base)
        #expect(try journal.reread(timeBase: base).registrations.count == 19)

        try FileManager.default.removeItem(at: blocker)
        try journal.startCompaction(Array(hosts.prefix(2)), timeBase: base)
        journal.abandonCompaction()
        #expect(!journal.isCompacting)
        #expect(try !journal.finishCompaction())
        #expect(!FileManager.default.fileExists(atPath: blocker.path))
        #expect(try journal.reread(timeBase: base).registrations.count == 19)
    }
}
