import FoundationEssentials
import NIOConcurrencyHelpers

/// A thread-safe count of bytes in flight against a limit: producers `take` before queueing, the consumer
/// `give`s back after handling. Counting frames alone would let a flood of 64 KiB frames pin hundreds of MB.
final class ByteBudget: @unchecked Sendable {
    // @unchecked: `used` is guarded by `lock`.
    let limit: Int
    private let lock = NIOLock()
    private var used = 0

    init(limit: Int) { self.limit = limit }

    /// Reserves `count` bytes; false (nothing reserved) when that would pass the limit.
    func take(_ count: Int) -> Bool {
        self.lock.withLock {
            guard self.used + count <= self.limit else { return false }
            self.used += count
            return true
        }
    }

    func give(_ count: Int) {
        self.lock.withLock { self.used = max(0, self.used - count) }
    }

    var inUse: Int { self.lock.withLock { self.used } }
}
