import Dispatch
import SleepProxyCore
import Synchronization

/// The replay at open: the journal decoded on a thread of its own while the opening thread restores each host as
/// soon as the journal's last entry for it is read (docs/scale.md, "0.8.0: restoring beside the decoding").
extension JournalFile {
    /// Hosts handed over from the decoding thread this many at a time: few enough that the first are restored
    /// within a millisecond of being read, enough that the hand-over costs nothing beside restoring them.
    static let restoreChunk = 64

    /// Decodes on a thread of its own while this one restores what it has settled (`restoring`); without a thread,
    /// here, then restores.
    static func replay(
        _ bytes: ReadBytes, timeBase: TimeBase, restoring: ([OwnerRegistration]) -> Void
    ) -> RegistrationJournal.Replay {
        let handOver = HandOver()
        // A thread of its own, not one of the global pool: the pool ran it after the history's read, on the one
        // thread, and the restoring waited for both.
        do {
            try startThread(name: "journal-replay") { Self.decode(bytes.take(), timeBase: timeBase, into: handOver) }
        } catch {
            let replay = RegistrationJournal.replay(bytes.take(), timeBase: timeBase)
            restoring(replay.registrations)
            return replay
        }
        while let chunk = handOver.take() { restoring(chunk) }
        return handOver.replay!
    }

    /// The file's bytes, owned by whoever decodes them: freed as soon as the decoding is over, not once the
    /// restoring that goes on beside it is (at 10,000 hosts, 9 MB that the restart's peak no longer holds).
    final class ReadBytes: @unchecked Sendable {
        // @unchecked: taken once, by one thread, before anything else reads it.
        private var bytes: [UInt8]?
        init(_ bytes: [UInt8]) { self.bytes = bytes }
        func take() -> [UInt8] {
            defer { self.bytes = nil }
            return self.bytes ?? []
        }
    }

    private static func decode(_ bytes: consuming [UInt8], timeBase: TimeBase, into handOver: HandOver) {
        var chunk: [OwnerRegistration] = []
        let replay = RegistrationJournal.replay(consume bytes, timeBase: timeBase) { registration in
            chunk.append(registration)
            if chunk.count == Self.restoreChunk {
                handOver.put(chunk)
                chunk = []
            }
        }
        if !chunk.isEmpty { handOver.put(chunk) }
        handOver.finish(replay)
    }

    /// Chunks of settled hosts from the decoding thread, then the replay; one signal for each.
    final class HandOver: Sendable {
        private let state = Mutex<(chunks: [[OwnerRegistration]], replay: RegistrationJournal.Replay?)>(([], nil))
        private let ready = DispatchSemaphore(value: 0)

        func put(_ chunk: [OwnerRegistration]) {
            self.state.withLock { $0.chunks.append(chunk) }
            self.ready.signal()
        }

        func finish(_ replay: RegistrationJournal.Replay) {
            self.state.withLock { $0.replay = replay }
            self.ready.signal()
        }

        /// The next chunk, waiting for it; nil once the replay is done and every chunk taken.
        func take() -> [OwnerRegistration]? {
            self.ready.wait()
            return self.state.withLock { state in state.chunks.isEmpty ? nil : state.chunks.removeFirst() }
        }

        var replay: RegistrationJournal.Replay? { self.state.withLock { $0.replay } }
    }
}
