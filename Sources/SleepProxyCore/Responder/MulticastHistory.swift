import SleepProxyWire

/// When each record was last multicast, per interface and family. Only the last quarter of the longest TTL
/// matters (RFC 6762 §5.4 looks back a quarter TTL, §6.2 one second), so entries live in two generations, each
/// as long as that horizon: a lookup reads the current one, then the previous one, and when the current one has
/// covered the horizon the previous one is dropped whole. Every entry is kept at least the horizon and at most
/// twice it. Before, a sweep filtered the whole table each time it had doubled: taking over 10,000 hosts (half a
/// million entries) one sweep held the engine thread about 20 ms, while queries waited (docs/scale.md).
///
/// An entry is 16 bytes: the record's digest, and its IPv4 and IPv6 times as milliseconds since the start of its
/// generation (a generation spans the horizon, 1,126 s, well within 32 bits), rounded up, so that a time read back
/// is never earlier than the real one and no rate limit is cut short. At 10,000 hosts that is 240,000 entries,
/// 8 MB, where one 16-byte entry per family took 16 MB.
struct MulticastHistory: Sendable {
    static let horizon = Duration.seconds(Int64(MDNSRules.otherRecordTTL) / 4 + 1)

    private struct Generation: Sendable {
        var since: Timestamp
        var times: [Int: UInt64] = [:]

        /// 0 in a half means "not multicast on that family in this generation".
        func time(_ key: Responder.MulticastKey) -> Timestamp? {
            guard let packed = self.times[key.digest] else { return nil }
            let offset = key.family == .v4 ? packed >> 32 : packed & 0xFFFF_FFFF
            guard offset > 0 else { return nil }
            return self.since + .milliseconds(Int64(offset - 1))
        }

        mutating func set(_ key: Responder.MulticastKey, _ now: Timestamp) {
            let nanoseconds = max(0, (now - self.since).nanosecondsClamped)
            let milliseconds = (nanoseconds + 999_999) / 1_000_000
            // A generation ends at the horizon, so the offset fits; clamped all the same (our own invariant).
            let offset = UInt64(min(milliseconds, Int64(UInt32.max) - 1)) + 1
            let packed = self.times[key.digest] ?? 0
            self.times[key.digest] =
                key.family == .v4 ? (packed & 0xFFFF_FFFF) | offset << 32 : (packed & ~0xFFFF_FFFF) | offset
        }
    }

    private var current: Generation?
    private var previous: Generation?

    var count: Int { (self.current?.times.count ?? 0) + (self.previous?.times.count ?? 0) }

    subscript(key: Responder.MulticastKey) -> Timestamp? {
        get { self.current?.time(key) ?? self.previous?.time(key) }
        set {
            guard let now = newValue else { return }
            if self.current == nil || now - self.current!.since >= Self.horizon {
                // Dropping a table of plain integers is one free, whatever its size.
                self.previous = self.current
                self.current = Generation(since: now)
            }
            self.current!.set(key, now)
        }
    }
}
