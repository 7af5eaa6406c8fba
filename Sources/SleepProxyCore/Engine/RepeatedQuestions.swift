import SleepProxyWire

/// What the proxy does with a device that asks the same mDNS question over and over (a misbehaving TV or speaker
/// asking hundreds of times a second; docs/busy-lan.md): a multicast question that repeats, byte for byte, the last
/// one from the same address and port on the same link within `window` is dropped before it is decoded, and
/// counted. Its first copy was answered, and its copies could not change that answer: the record it asks for goes
/// on the link at most once a second anyway (RFC 6762 §6.2).
///
/// A device that follows RFC 6762 never repeats a question that soon (§5.2: at least one second between the
/// first two queries, then growing), so no well-behaved querier loses anything. Probes (questions with records in
/// their authority section, RFC 6762 §8.1, sent three times 250 ms apart) are never dropped: each is defended.
/// Responses (a sleeping host's sign of life), legacy questions (from a port other than 5353, each wanting its
/// own reply, §6.7) and a held host's own questions (a sign that it woke) never come here.
struct RepeatedQuestions: Sendable {
    /// RFC 6762 §5.2: a querier waits at least one second between the first two queries of a question.
    static let window: Duration = .seconds(1)
    /// Sources remembered at most (ours): one entry each, the last question it asked, by digest and length (about
    /// 60 bytes an entry plus the table's own, so a flood of forged sources holds under 100 KB here, not packets). A LAN
    /// of 500 devices that each ask now and then fits; past it the table starts over, which only means a repeat is
    /// answered once more.
    static let capacity = 1_024

    struct Source: Hashable, Sendable {
        var address: IPAddress
        var port: UInt16
        var interfaceIndex: Int
    }

    /// A question's bytes are known by their digest (`MulticastEchoes.digest`, seeded per process, so a forged
    /// collision cannot be chosen) and their length.
    private var last: [Source: (digest: Int, length: Int, at: Timestamp)] = [:]
    /// Questions dropped as repeats since the start.
    private(set) var coalesced = 0

    var count: Int { self.last.count }

    /// True when `bytes` (a multicast question, not a probe) repeats the last question from `source` within
    /// `window`; then it is counted and must be dropped. Otherwise it becomes the source's last question.
    mutating func isRepeat(_ bytes: [UInt8], from source: Source, now: Timestamp) -> Bool {
        // Header (RFC 1035 §4.1.1): QR is the top bit of byte 2; NSCOUNT is bytes 8-9.
        guard bytes.count >= 12, bytes[2] & 0x80 == 0, bytes[8] == 0, bytes[9] == 0 else { return false }
        let digest = MulticastEchoes.digest(bytes)
        if let previous = self.last[source], now - previous.at < Self.window, previous.length == bytes.count,
            previous.digest == digest
        {
            self.coalesced += 1
            return true
        }
        if self.last.count >= Self.capacity, self.last[source] == nil { self.last.removeAll(keepingCapacity: true) }
        self.last[source] = (digest, bytes.count, now)
        return false
    }
}
