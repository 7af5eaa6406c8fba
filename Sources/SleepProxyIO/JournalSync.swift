#if canImport(Glibc)
    import Glibc
#endif

/// The journal's write and fdatasync (`JournalWrite`), on a thread of its own, so that the engine thread can answer queries while the disk
/// catches up: a batch's sync was 0.4-0.9 ms of waiting in a registration storm (sleepproxy-bench scale), about an
/// eighth of the time, and every query that arrived meanwhile waited with it. The engine still sends no reply
/// before the sync has ended (`EngineRunner.syncAnsweringQueries`); only mDNS is answered meanwhile.
final class JournalSync: @unchecked Sendable {
    // @unchecked: `requested`, `result` and `stopped` are guarded by `condition`.
    private let condition = Condition()
    private var requested: JournalWrite?
    private var result: Result<Void, SystemCallError>?
    private var stopped = false
    /// Called on the sync thread after each sync, outside the lock (the engine pokes its mailbox with it).
    private let finished: @Sendable () -> Void

    init(finished: @escaping @Sendable () -> Void) {
        self.finished = finished
    }

    func start() throws(SystemCallError) {
        try startThread(name: "journal-sync") { [self] in self.loop() }
    }

    /// Ends the thread once the sync under way, if any, has ended.
    func stop() {
        self.condition.lock()
        self.stopped = true
        self.condition.signal()
        self.condition.unlock()
    }

    /// Starts carrying out `write` and syncing it; one at a time.
    func begin(_ write: JournalWrite) {
        self.condition.lock()
        precondition(self.requested == nil && self.result == nil, "one journal sync at a time")
        self.requested = write
        self.condition.signal()
        self.condition.unlock()
    }

    var isFinished: Bool {
        self.condition.lock()
        defer { self.condition.unlock() }
        return self.result != nil
    }

    /// The sync's outcome, once `isFinished`; clears it for the next one.
    func take() -> Result<Void, SystemCallError>? {
        self.condition.lock()
        defer { self.condition.unlock() }
        defer { self.result = nil }
        return self.result
    }

    private func loop() {
        while true {
            self.condition.lock()
            while self.requested == nil, !self.stopped { self.condition.wait(seconds: 1) }
            guard let write = self.requested else {
                self.condition.unlock()
                return
            }
            self.condition.unlock()
            let synced = outcome(of: "fdatasync") { () throws -> Void in try write.perform(sync: true) }
            self.condition.lock()
            self.requested = nil
            self.result = synced
            self.condition.unlock()
            self.finished()
        }
    }
}
