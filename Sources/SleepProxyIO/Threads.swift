import CSleepProxyLinux

#if canImport(Glibc)
    import Glibc
#endif

// The daemon's own threads and their one wait, on pthreads directly: Foundation's `Thread` and `NSCondition`
// were all that tied the daemon to libFoundation, whose code and ICU tables were a third of its idle resident
// memory (docs/memory.md).

/// A mutex and a condition variable whose timed wait runs on the monotonic clock, so a step of the wall clock
/// (NTP at boot on a Raspberry Pi with no RTC) neither cuts a wait short nor stretches it.
final class Condition: @unchecked Sendable {
    // @unchecked: the pthread objects are used only through pthread calls, which are thread-safe.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    init() {
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        let made = pthread_mutex_init(self.mutex, nil) == 0 && pthread_cond_init(self.condition, &attributes) == 0
        pthread_condattr_destroy(&attributes)
        // Only fails for lack of memory or bad attributes, neither of which a packet can cause.
        precondition(made, "pthread mutex or condition could not be created")
    }

    deinit {
        pthread_cond_destroy(self.condition)
        pthread_mutex_destroy(self.mutex)
        self.condition.deallocate()
        self.mutex.deallocate()
    }

    func lock() { pthread_mutex_lock(self.mutex) }
    func unlock() { pthread_mutex_unlock(self.mutex) }
    func signal() { pthread_cond_signal(self.condition) }

    /// Waits (the lock held) until signalled or `seconds` pass; spurious wake-ups return early, as with any
    /// condition variable, so callers re-check what they wait for.
    func wait(seconds: Double) {
        var deadline = timespec()
        clock_gettime(CLOCK_MONOTONIC, &deadline)
        let nanoseconds = Int(max(0, min(seconds, 86_400)) * 1e9) + deadline.tv_nsec
        deadline.tv_sec += nanoseconds / 1_000_000_000
        deadline.tv_nsec = nanoseconds % 1_000_000_000
        _ = pthread_cond_timedwait(self.condition, self.mutex, &deadline)
    }
}

/// Starts a detached thread named `name` (the kernel keeps 15 bytes of it; `ps -T` and `top -H` show it); throws
/// when the system has no thread to give (RLIMIT_NPROC, memory).
func startThread(name: String, _ body: @escaping @Sendable () -> Void) throws(SystemCallError) {
    final class Box: Sendable {
        let body: @Sendable () -> Void
        let name: String
        init(_ body: @escaping @Sendable () -> Void, name: String) {
            self.body = body
            self.name = name
        }
    }
    let box = Unmanaged.passRetained(Box(body, name: name)).toOpaque()
    var thread = pthread_t()
    let created = pthread_create(
        &thread, nil,
        { argument in
            let box = Unmanaged<Box>.fromOpaque(argument!).takeRetainedValue()
            csp_set_thread_name(box.name)
            box.body()
            return nil
        }, box)
    guard created == 0 else {
        Unmanaged<AnyObject>.fromOpaque(box).release()
        throw SystemCallError(function: "pthread_create (\(name))", errno: created)
    }
    pthread_detach(thread)
}
