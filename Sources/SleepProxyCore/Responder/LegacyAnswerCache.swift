import SleepProxyWire

/// Ready-made legacy unicast responses (RFC 6762 §6.7), by question.
///
/// A one-shot resolver asking for a sleeping host's address is the busiest query a proxy gets (every
/// `ping host.local`, every app resolving before it connects), and its answer depends only on the question, the
/// interface, the querier's address family and payload size, and what the proxy holds. So the response is built
/// once and reused with the new ID patched in, until the record store or the proxy's own records change.
///
/// Only plain queries use it: one question, no known answers, no authority records, and no EDNS options (an
/// Owner option may mean a hand-back, which must go through the full path).
struct LegacyAnswerCache: Sendable {
    struct Key: Hashable, Sendable {
        var interfaceIndex: Int
        /// Compared case-insensitively here; `Entry.questionName` pins the exact case echoed.
        var question: DNSQuestion
        var family: IPFamily
        var limit: Int
    }

    struct Entry: Sendable {
        /// The question's name exactly as the querier wrote it: the response echoes it byte for byte.
        var questionName: [UInt8]
        var message: DNSMessage
        var bytes: [UInt8]
    }

    private var entries: [Key: Entry] = [:]
    private var bytes = 0
    private var storeVersion: RecordStore.Version? = nil
    private var ownVersion: UInt64 = 0

    var count: Int { self.entries.count }
    var byteCount: Int { self.bytes }

    /// Empties the cache when what the answers came from has changed.
    mutating func validate(store: RecordStore, ownVersion: UInt64) {
        guard self.storeVersion !== store.version || self.ownVersion != ownVersion else { return }
        self.removeAll()
        self.storeVersion = store.version
        self.ownVersion = ownVersion
    }

    mutating func removeAll() {
        self.entries.removeAll(keepingCapacity: true)
        self.bytes = 0
    }

    /// The cached response for `key`, with `id` in place, if the question's case matches too.
    func response(for key: Key, id: UInt16) -> (DNSMessage, [UInt8])? {
        guard let entry = self.entries[key], entry.questionName == key.question.name.storage else { return nil }
        var message = entry.message
        message.id = id
        var bytes = entry.bytes
        bytes[0] = UInt8(id >> 8)
        bytes[1] = UInt8(id & 0xFF)
        return (message, bytes)
    }

    mutating func insert(_ message: DNSMessage, bytes: [UInt8], for key: Key) {
        if self.entries.count >= MDNSRules.maximumCachedLegacyAnswers
            || self.bytes + bytes.count > MDNSRules.maximumCachedLegacyBytes
        {
            self.removeAll()
        }
        if let old = self.entries.updateValue(
            Entry(questionName: key.question.name.storage, message: message, bytes: bytes), forKey: key)
        {
            self.bytes -= old.bytes.count
        }
        self.bytes += bytes.count
    }
}
