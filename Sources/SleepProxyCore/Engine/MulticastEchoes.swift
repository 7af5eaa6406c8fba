import DequeModule

/// The proxy's own mDNS multicasts, remembered by digest for a few seconds so that their loopback copies are
/// known on arrival and skipped before they are decoded. The sockets keep IP_MULTICAST_LOOP on, because a
/// responder on the proxy's own box (avahi on a NAS) must hear what the proxy announces; the price was that
/// every announcement came back and was decoded and inspected record by record for conflicts, which it can never
/// hold with itself. Taking over 10,000 hosts, that was a fifth of the engine's time (docs/scale.md).
///
/// Only a packet from one of the proxy's own addresses, from port 5353, whose bytes are exactly what the proxy
/// sent is skipped: avahi on the same box sends from the same address and port, but never these bytes, so it is
/// still heard and still checked.
struct MulticastEchoes: Sendable {
    /// How long a sent packet is expected back: the copy is looped back by the kernel at once, then waits in
    /// the mDNS lane for the engine's next batch, which under a registration storm is a few hundred
    /// milliseconds at most. Past it the copy is just inspected as before, which is correct, only slower.
    static let window: Duration = .seconds(5)
    /// Sendings remembered at most (our own bound, on the queue and so on the table): the densest output
    /// measured, taking over 10,000 hosts at once, is a few thousand packets a second; the oldest gives way first.
    /// 16 bytes each in the queue, about 40 in the table.
    static let capacity = 16_384

    private var sent: [Int: Timestamp] = [:]
    private var order: Deque<(digest: Int, at: Timestamp)> = []

    var count: Int { self.sent.count }
    /// Sendings in the queue (repeats of the same bytes included).
    var queued: Int { self.order.count }

    static func digest(_ bytes: [UInt8]) -> Int {
        var hasher = Hasher()
        bytes.withUnsafeBytes { hasher.combine(bytes: $0) }
        hasher.combine(bytes.count)
        return hasher.finalize()
    }

    mutating func remember(_ bytes: [UInt8], now: Timestamp) {
        self.expire(now: now)
        // The same bytes sent again within the window take a place in the queue too, so the bound holds for the
        // queue as well as for the table.
        if self.order.count >= Self.capacity, let oldest = self.order.popFirst(), self.sent[oldest.digest] == oldest.at
        {
            self.sent[oldest.digest] = nil
        }
        let digest = Self.digest(bytes)
        self.sent[digest] = now
        self.order.append((digest, now))
    }

    /// Whether `bytes` is one of ours sent within the window. A copy can come back twice (one per address
    /// family's socket), so a match is not consumed.
    mutating func isEcho(_ bytes: [UInt8], now: Timestamp) -> Bool {
        self.expire(now: now)
        return self.sent[Self.digest(bytes)] != nil
    }

    private mutating func expire(now: Timestamp) {
        while let oldest = self.order.first, now - oldest.at > Self.window {
            self.order.removeFirst()
            // The same bytes sent again later keep their newer time.
            if self.sent[oldest.digest] == oldest.at { self.sent[oldest.digest] = nil }
        }
    }
}
