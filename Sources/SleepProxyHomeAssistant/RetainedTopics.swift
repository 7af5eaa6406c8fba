/// The retained messages the proxy wants the broker to hold, and which of them the current connection still has
/// to carry: the newest payload per topic wins, a topic no longer wanted is cleared with an empty retained
/// message (MQTT §3.3.1.3; Home Assistant removes the entity), and a reconnection carries everything again, since
/// a broker that restarted without persistence has forgotten it all.
///
/// Bounded by the topics themselves: nothing queues beyond one payload per topic, so a broker that is slow or gone
/// costs memory only in proportion to the hosts shown (`HomeAssistantRules.maximumHosts`).
public struct RetainedTopics: Sendable {
    /// Wanted payloads; an empty one is a removal not yet carried.
    private(set) var desired: [String: [UInt8]] = [:]
    /// What this connection carried already.
    private var carried: [String: [UInt8]] = [:]
    /// Topics to carry, oldest first, and the same as a set.
    private var queue: [String] = []
    private var queued: Set<String> = []
    /// Payloads replaced by a newer one before the connection carried them.
    public private(set) var superseded = 0
    /// Leftovers found but not cleared because `maximumStale` were waiting already; the next connection finds
    /// them again.
    public private(set) var staleLeftFor = 0

    /// Leftovers of a previous run waiting to be cleared at most: what 128 hosts' entities and states come to
    /// several times over. Anyone who may write our topics could leave millions retained; each is cleared as the
    /// connection carries the removals, and no more than this wait at once.
    public static let maximumStale = 4096
    /// Leftovers found and not yet cleared.
    private var stale: Set<String> = []

    public init() {}

    /// Topics waiting for the connection.
    public var waiting: Int { self.queued.count }
    /// Topics wanted, removals not yet carried left out.
    public var held: Int { self.desired.values.count { !$0.isEmpty } }

    /// What the broker should hold now: every topic with its payload. Topics wanted before and missing now are
    /// cleared.
    public mutating func want(_ topics: [String: [UInt8]]) {
        for (topic, payload) in topics where !payload.isEmpty {
            self.stale.remove(topic)
            self.set(topic, payload)
        }
        for (topic, payload) in self.desired where topics[topic] == nil && !payload.isEmpty { self.set(topic, []) }
    }

    /// A retained message the broker holds on a topic of ours (seen through our own subscription at connection):
    /// one we no longer want, from before a restart, is cleared; our own removals and echoes change nothing.
    public mutating func found(_ topic: String, _ payload: [UInt8]) {
        guard !payload.isEmpty, self.desired[topic] == nil else { return }
        guard self.stale.count < Self.maximumStale else {
            self.staleLeftFor += 1
            return
        }
        self.stale.insert(topic)
        self.set(topic, [])
    }

    /// A new connection: it has carried nothing yet.
    public mutating func reconnected() {
        self.carried = [:]
        self.queue = self.desired.keys.sorted()
        self.queued = Set(self.queue)
    }

    /// Up to `limit` messages for the connection to carry now, oldest wish first. A removal once carried is
    /// forgotten.
    public mutating func next(_ limit: Int) -> [(topic: String, payload: [UInt8])] {
        var taken: [(String, [UInt8])] = []
        var index = 0
        while taken.count < limit, index < self.queue.count {
            let topic = self.queue[index]
            index += 1
            self.queued.remove(topic)
            guard let payload = self.desired[topic] else { continue }
            taken.append((topic, payload))
            if payload.isEmpty {
                self.desired[topic] = nil
                self.carried[topic] = nil
                self.stale.remove(topic)
            } else {
                self.carried[topic] = payload
            }
        }
        self.queue.removeFirst(index)
        return taken
    }

    private mutating func set(_ topic: String, _ payload: [UInt8]) {
        guard self.desired[topic] != payload else { return }
        self.desired[topic] = payload
        if self.queued.contains(topic) {
            self.superseded += 1
        } else if self.carried[topic] != payload {
            self.queue.append(topic)
            self.queued.insert(topic)
        }
    }
}
