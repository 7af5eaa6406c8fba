import SleepProxyWire

/// A token bucket per source address (RFC 9664 §8: servers MUST rate-limit updates).
///
/// The table of sources is bounded: when it is full, idle sources (whose bucket has refilled) are forgotten
/// first, so an attacker cycling through addresses cannot make it grow.
public struct RateLimiter: Sendable {
    /// Sources tracked at once; one small entry each.
    public static let maximumTrackedSources = 4096

    private struct Bucket {
        var tokens: Double
        var updated: Timestamp
    }

    private var buckets: [IPAddress: Bucket] = [:]
    public let burst: Int
    public let perSecond: Int

    public init(burst: Int, perSecond: Int) {
        self.burst = max(1, burst)
        self.perSecond = max(0, perSecond)
    }

    /// Takes one token for `source`; false when it has none left.
    public mutating func allow(_ source: IPAddress, now: Timestamp) -> Bool {
        var bucket = self.buckets[source] ?? Bucket(tokens: Double(self.burst), updated: now)
        bucket.tokens = self.refilled(bucket, now: now)
        bucket.updated = now
        guard bucket.tokens >= 1 else {
            self.buckets[source] = bucket
            return false
        }
        bucket.tokens -= 1
        if self.buckets[source] == nil, self.buckets.count >= RateLimiter.maximumTrackedSources {
            self.evict(now: now)
        }
        self.buckets[source] = bucket
        return true
    }

    private func refilled(_ bucket: Bucket, now: Timestamp) -> Double {
        let elapsed = Double(max(0, (now - bucket.updated).nanosecondsClamped)) / 1e9
        return min(Double(self.burst), bucket.tokens + elapsed * Double(self.perSecond))
    }

    private mutating func evict(now: Timestamp) {
        let full = self.buckets.filter { self.refilled($0.value, now: now) >= Double(self.burst) }.map(\.key)
        for key in full { self.buckets[key] = nil }
        // Everyone is active: forget the source seen longest ago.
        if self.buckets.count >= RateLimiter.maximumTrackedSources,
            let oldest = self.buckets.min(by: { $0.value.updated < $1.value.updated })?.key
        {
            self.buckets[oldest] = nil
        }
    }

    public var trackedSources: Int { self.buckets.count }
}
