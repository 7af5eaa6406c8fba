import Foundation
import NIOConcurrencyHelpers
import SleepProxyCore
import SleepProxyTestSupport
import Testing

@testable import SleepProxyIO

/// The journal's fdatasync on its own thread, and the engine's wait for it that answers the mDNS lane meanwhile.
@Suite("Journal sync thread")
struct JournalSyncTests {
    @Test func syncsReportsAndWakesTheMailbox() throws {
        let mailbox = try Mailbox<Int>(capacity: 8, lanes: 2) { $0 < 0 ? 1 : 0 }
        let pokes = NIOLockedValueBox(0)
        let sync = JournalSync(finished: {
            pokes.withLockedValue { $0 += 1 }
            mailbox.poke()
        })
        try sync.start()
        defer { sync.stop() }
        let path = FileManager.default.temporaryDirectory.appendingPathComponent(
            "sync-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        ).path
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        defer {
            close(fd)
            unlink(path)
        }
        #expect(fd >= 0)
        #expect(write(fd, "entry", 5) == 5)

        // A query already waiting is handed over at once; then the wait lasts until the sync has ended.
        mailbox.post(-1)
        sync.begin(JournalWrite(fd: fd))
        var answered: [Int] = []
        var finished = false
        for _ in 0..<100 where !finished {
            let (events, done) = mailbox.take(lane: 1, waitingUntil: { sync.isFinished })
            answered += events
            finished = done
        }
        #expect(finished && answered == [-1])
        #expect(throws: Never.self) { try sync.take()?.get() }
        #expect(sync.take() == nil, "the outcome is taken once")
        // The poke follows the outcome, outside the lock: wait (bounded) for it.
        #expect(waitUntil(timeout: 1, interval: 0.001) { pokes.withLockedValue { $0 } > 0 })
        #expect(pokes.withLockedValue { $0 } == 1)

        // A sync that fails says why, and the next one can start.
        sync.begin(JournalWrite(fd: -1))
        for _ in 0..<100 where !sync.isFinished { _ = mailbox.take(lane: 1, waitingUntil: { sync.isFinished }) }
        #expect(throws: SystemCallError.self) { try sync.take()?.get() }
    }

    /// An append whose sync fails is not counted and leaves the file as it was.
    @Test func anAppendWhoseSyncFailsChangesNothing() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "journal-sync-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        defer { try? FileManager.default.removeItem(at: directory) }
        let hosts = try JournalFileTests.hosts(3)
        let base = SystemClock.timeBase()
        let (journal, _) = try JournalFile.open(directory: directory, timeBase: base)
        try journal.append([.put(hosts[0])], timeBase: base)
        let size = journal.size
        let bytes = RegistrationJournal.encode(.put(hosts[1]), timeBase: base)
        #expect(throws: SystemCallError.self) {
            try journal.append(encoded: bytes, entries: 1) { _ in
                throw SystemCallError(function: "fdatasync", errno: EIO)
            }
        }
        #expect(journal.size == size)
        // …and so does one whose write is carried out but whose sync fails.
        #expect(throws: SystemCallError.self) {
            try journal.append(encoded: bytes, entries: 1) { write in
                try write.perform(sync: false)
                throw SystemCallError(function: "fdatasync", errno: EIO)
            }
        }
        #expect(journal.size == size)
        #expect(try journal.reread(timeBase: base).registrations.map(\.key) == [hosts[0].key])
        try journal.append(encoded: RegistrationJournal.encode(.put(hosts[2]), timeBase: base), entries: 1) { write in
            try write.perform(sync: true)
        }
        #expect(Set(try journal.reread(timeBase: base).registrations.map(\.key)) == [hosts[0].key, hosts[2].key])
    }
}
