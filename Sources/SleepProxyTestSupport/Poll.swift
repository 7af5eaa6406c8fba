#if canImport(Glibc)
    import Glibc
#endif

/// Asks `condition` every `interval` seconds until it holds or `timeout` seconds pass, and says whether it held:
/// how tests wait for a fact (a daemon's answer, a host's state, a packet seen) instead of sleeping a fixed time.
/// The condition is asked once more at the deadline, so a fact that turns true at the last moment counts.
@discardableResult
public func waitUntil(timeout: Double, interval: Double = 0.1, _ condition: () throws -> Bool) rethrows -> Bool {
    var start = timespec()
    clock_gettime(CLOCK_MONOTONIC, &start)
    func elapsed() -> Double {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return Double(now.tv_sec - start.tv_sec) + Double(now.tv_nsec - start.tv_nsec) / 1e9
    }
    while elapsed() < timeout {
        if try condition() { return true }
        usleep(useconds_t(max(0.001, interval) * 1_000_000))
    }
    return try condition()
}
