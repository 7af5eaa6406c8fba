import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A listening socket served by a plain thread: poll (so that `stop` is noticed within a quarter second),
/// accept, hand the client to `handle`, which owns it from then on. For the admin socket and the metrics
/// endpoint: a handful of local connections, where a thread is simpler than an event loop.
final class AcceptLoop: @unchecked Sendable {
    // @unchecked: `stopped` is guarded by `lock`; `fd` is immutable and closed only after the thread ends.
    private let fd: Int32
    private let lock = NSLock()
    private var stopped = false
    private let finished = DispatchSemaphore(value: 0)

    init(fd: Int32, name: String, handle: @escaping @Sendable (Int32) -> Void) {
        self.fd = fd
        let thread = Thread { [self] in
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            while !self.isStopped {
                guard poll(&descriptor, 1, 250) > 0 else { continue }
                let client = accept(fd, nil, nil)
                guard client >= 0 else { continue }
                _ = fcntl(client, F_SETFD, FD_CLOEXEC)
                handle(client)
            }
            self.finished.signal()
        }
        thread.name = name
        thread.start()
    }

    var isStopped: Bool { self.lock.withLock { self.stopped } }

    /// Stops accepting, waits for the thread, closes the listening socket. Safe to call more than once.
    func stop() {
        let wasRunning = self.lock.withLock { () -> Bool in
            defer { self.stopped = true }
            return !self.stopped
        }
        guard wasRunning else { return }
        self.finished.wait()
        close(self.fd)
    }
}
