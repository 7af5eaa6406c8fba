import FoundationEssentials

/// Every host's recent history, bounded per host and in all; the oldest records go first. A value with no
/// clock: each record carries its own time. The daemon keeps one on its engine thread and writes each record to
/// the state directory off that thread (docs/status-page.md §3).
///
/// Laid out for a small box's memory: the records sit in one array in arrival order (no allocation per host or
/// per record: a first version with an array per host and MACs as strings cost 12 MB of resident memory at
/// 10,000 hosts for 4 MB of data, the rest small blocks pinning pages), hosts are keyed by their MAC as a number,
/// and a host's name is kept once. A host's own records are found by a scan, about 50 µs at the bound.
public struct HistoryBook: Sendable {
    /// A host's records kept at most: a day of a host that sleeps and wakes every hour is about 150 (registered,
    /// asleep, waking, awake, handed back, and a wake decision or two each time), so 500 keep a busy day whole.
    public static let recordsPerHost = 500
    /// Records kept in all: under 4 MB in memory with 10,000 hosts (sleepproxy-bench status) and at most about
    /// 5 MB on disk (the file is rewritten when it holds twice this many lines), sized for a Raspberry Pi; at
    /// 10,000 hosts it keeps the last two changes of each.
    public static let recordsInAll = 20_000

    private struct Kept: Sendable {
        final class Event: Sendable {
            let entry: WakeLogEntry
            init(_ entry: WakeLogEntry) { self.entry = entry }
        }

        /// The host's slot in `hosts`; `Kept.gone` once its host's own bound let it go.
        var host: UInt32
        var time: Date
        var state: PresenceState?
        /// Short notes (at most 15 bytes) are stored inline by Swift; the engine's are.
        var note: String?
        var event: Event?

        static let gone = UInt32.max

        var enteredState: PresenceState? {
            if let state { return state }
            switch self.event?.entry.kind {
            case .wake: return .waking
            case .awake: return .awake
            case .noResponse: return .asleep
            case .ignored, .declined, nil: return nil
            }
        }
    }

    private struct Host: Sendable {
        var key: UInt64
        var name: String?
        var count = 0
        var lastState: PresenceState?
        /// Where the host stood before its oldest kept record, once one carrying a state was let go.
        var before: PresenceState?
        /// No record of this host sits before this position of `records` (a place to start looking).
        var oldest: Int
    }

    private var records: [Kept] = []
    /// Records before this position are gone.
    private var start = 0
    private var hosts: [Host] = []
    private var slots: [UInt64: UInt32] = [:]
    private var freeSlots: [UInt32] = []
    /// MACs that are not six hex bytes (never ours), by a key of their own, and back.
    private var oddKeys: [String: UInt64] = [:]
    private var oddMACs: [UInt64: String] = [:]
    public private(set) var count = 0
    let perHost: Int
    let inAll: Int

    public init(perHost: Int = Self.recordsPerHost, inAll: Int = Self.recordsInAll) {
        precondition(perHost > 0 && inAll > 0, "history bounds must be positive")
        self.perHost = perHost
        self.inAll = inAll
    }

    /// Room for the bound and a quarter more before the array is compacted (records let go by their host's
    /// bound leave gaps until then).
    private var capacity: Int { self.inAll + self.inAll / 4 + 16 }

    public mutating func append(_ record: HistoryRecord) {
        if self.records.isEmpty { self.records.reserveCapacity(self.capacity) }
        if self.records.count >= self.capacity { self.compact() }
        let slot = self.slot(for: record.mac)
        var kept = Kept(
            host: slot, time: record.time, state: record.state, note: record.note,
            event: record.event.map(Kept.Event.init))
        if record.event != nil { kept.state = nil }
        self.records.append(kept)
        self.count += 1
        if let name = record.hostName { self.hosts[Int(slot)].name = name }
        if let state = kept.enteredState { self.hosts[Int(slot)].lastState = state }
        self.hosts[Int(slot)].count += 1
        if self.hosts[Int(slot)].count > self.perHost { self.letOldestGo(of: slot) }
        while self.count > self.inAll, self.start < self.records.count {
            let host = self.records[self.start].host
            if host != Kept.gone { self.letOldestGo(of: host) } else { self.start += 1 }
        }
    }

    private mutating func slot(for mac: String) -> UInt32 {
        let key = self.key(of: mac)
        if let slot = self.slots[key] { return slot }
        let host = Host(key: key, oldest: self.records.count)
        let slot: UInt32
        if let free = self.freeSlots.popLast() {
            slot = free
            self.hosts[Int(slot)] = host
        } else {
            slot = UInt32(self.hosts.count)
            self.hosts.append(host)
        }
        self.slots[key] = slot
        return slot
    }

    /// Lets the host's oldest record go; the host goes with its last record.
    private mutating func letOldestGo(of slot: UInt32) {
        var position = max(self.hosts[Int(slot)].oldest, self.start)
        while position < self.records.count, self.records[position].host != slot { position += 1 }
        guard position < self.records.count else { return }
        let oldest = self.records[position]
        self.records[position].host = Kept.gone
        self.records[position].note = nil
        self.records[position].event = nil
        if position == self.start { self.start += 1 }
        self.count -= 1
        self.hosts[Int(slot)].count -= 1
        self.hosts[Int(slot)].oldest = position + 1
        if let state = oldest.enteredState { self.hosts[Int(slot)].before = state }
        if self.hosts[Int(slot)].count == 0 {
            let key = self.hosts[Int(slot)].key
            self.slots[key] = nil
            if let mac = self.oddMACs.removeValue(forKey: key) { self.oddKeys[mac] = nil }
            self.hosts[Int(slot)] = Host(key: 0, oldest: 0)
            self.freeSlots.append(slot)
        }
    }

    /// Drops the records let go, in place, keeping the array's one allocation.
    private mutating func compact() {
        var write = 0
        for read in self.start..<self.records.count where self.records[read].host != Kept.gone {
            self.records[write] = self.records[read]
            write += 1
        }
        self.records.removeLast(self.records.count - write)
        self.start = 0
        for index in self.hosts.indices { self.hosts[index].oldest = 0 }
    }

    /// MACs as numbers: `02:53:50:00:00:02` is 0x025350000002.
    private mutating func key(of mac: String) -> UInt64 {
        if let key = Self.number(mac) { return key }
        if let key = self.oddKeys[mac] { return key }
        let key = (1 << 63) | UInt64(self.oddKeys.count + 1)
        self.oddKeys[mac] = key
        self.oddMACs[key] = mac
        return key
    }

    private func existingKey(of mac: String) -> UInt64? { Self.number(mac) ?? self.oddKeys[mac] }

    static func number(_ mac: String) -> UInt64? {
        let parts = mac.split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 6 else { return nil }
        var value: UInt64 = 0
        for part in parts {
            guard part.count == 2, part.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }),
                let byte = UInt8(part, radix: 16)
            else { return nil }
            value = value << 8 | UInt64(byte)
        }
        return value
    }

    private func mac(of key: UInt64) -> String {
        if let odd = self.oddMACs[key] { return odd }
        return (0..<6).reversed().map { shift in
            let byte = UInt8(truncatingIfNeeded: key >> (UInt64(shift) * 8))
            return byte < 0x10 ? "0" + String(byte, radix: 16) : String(byte, radix: 16)
        }.joined(separator: ":")
    }

    private func record(_ kept: Kept, mac: String, name: String?) -> HistoryRecord {
        if let entry = kept.event?.entry { return HistoryRecord(entry) }
        return HistoryRecord(time: kept.time, mac: mac, hostName: name, state: kept.state ?? .gone, note: kept.note)
    }

    private func host(_ mac: String) -> (slot: UInt32, host: Host)? {
        guard let key = self.existingKey(of: mac), let slot = self.slots[key] else { return nil }
        return (slot, self.hosts[Int(slot)])
    }

    /// The last state a host's records put it in.
    public func lastState(of mac: String) -> PresenceState? {
        guard let (_, host) = self.host(mac) else { return nil }
        return host.lastState ?? host.before
    }

    public func records(of mac: String) -> [HistoryRecord] {
        guard let (slot, host) = self.host(mac) else { return [] }
        return self.records[max(host.oldest, self.start)...].filter { $0.host == slot }.map {
            self.record($0, mac: mac, name: host.name)
        }
    }

    /// Hosts with records.
    public var hostCount: Int { self.slots.count }

    /// Every kept record in arrival order (for rewriting the file).
    public var all: [HistoryRecord] {
        var all: [HistoryRecord] = []
        self.forEach { all.append($0) }
        return all
    }

    /// The wake and decline events kept, oldest first: what a wake log rebuilt from the history holds. Unlike
    /// `forEach`, no record is built for the rest (10,000 hosts' lines at a restart after a reboot were 30 ms of
    /// MACs spelled out for nothing; docs/scale.md).
    public func forEachEvent(_ body: (WakeLogEntry) -> Void) {
        for kept in self.records[self.start...] where kept.host != Kept.gone {
            if let event = kept.event { body(event.entry) }
        }
    }

    /// Every kept record in arrival order, one at a time: merging a book read back at start into the one kept
    /// since, without a copy of every record at once (a few MB at 10,000 hosts, over what the proxy holds
    /// otherwise, at the moment a restart's memory peaks; docs/memory.md).
    public func forEach(_ body: (HistoryRecord) -> Void) {
        for kept in self.records[self.start...] where kept.host != Kept.gone {
            let host = self.hosts[Int(kept.host)]
            body(self.record(kept, mac: self.mac(of: host.key), name: host.name))
        }
    }

    /// One host's history over `from...to`.
    public func history(of mac: String, from: Date, to: Date) -> HostHistory? {
        guard let (slot, host) = self.host(mac) else { return nil }
        var stateAtStart = host.before
        var inside: [HistoryRecord] = []
        // A wall clock stepped back (NTP correcting a clock that ran ahead: a Raspberry Pi has no clock of its own
        // while off) leaves records dated after the ones that came after them. The order they came in is the truth:
        // a record counts as no later than the next one, so a day is never drawn backwards or twice (docs/time.md).
        var hostRecords = self.records[max(host.oldest, self.start)...].filter { $0.host == slot }
        var next = Date.distantFuture
        for index in hostRecords.indices.reversed() {
            if hostRecords[index].time > next { hostRecords[index].time = next }
            next = hostRecords[index].time
        }
        for kept in hostRecords {
            if kept.time < from {
                if let state = kept.enteredState { stateAtStart = state }
            } else if kept.time <= to {
                var record = self.record(kept, mac: mac, name: host.name)
                record.time = kept.time
                inside.append(record)
            }
        }
        return HostHistory(
            mac: mac, hostName: host.name, from: from, to: to, stateAtStart: stateAtStart, records: inside)
    }

    /// Hosts with a record since `from` that `isHeld` says the proxy does not hold now (woken and handed back,
    /// expired, forgotten), newest first, at most `limit`: the overview's answer to "my Mac woke up, where is it?".
    public func recentHosts(since from: Date, limit: Int, isHeld: (String) -> Bool) -> [DaemonStatus.RecentHost] {
        var seen = Set<UInt32>()
        var hosts: [DaemonStatus.RecentHost] = []
        for kept in self.records[self.start...].reversed() {
            guard kept.time >= from, hosts.count < limit else { break }
            guard kept.host != Kept.gone, seen.insert(kept.host).inserted else { continue }
            let host = self.hosts[Int(kept.host)]
            let mac = self.mac(of: host.key)
            guard !isHeld(mac) else { continue }
            let lastWake = self.records[max(host.oldest, self.start)...].last {
                $0.host == kept.host && $0.event?.entry.kind == .wake
            }?.event?.entry
            hosts.append(
                DaemonStatus.RecentHost(
                    mac: mac, name: host.name, state: host.lastState ?? host.before ?? .gone, since: kept.time,
                    lastWake: lastWake))
        }
        return hosts
    }

    /// Wakes started and connections declined (or ignored) since `from`, for the overview.
    public func activity(since from: Date) -> DaemonStatus.Activity {
        var activity = DaemonStatus.Activity(wakes: 0, declined: 0, wakesByReason: [:])
        for kept in self.records[self.start...].reversed() {
            guard kept.time >= from else { break }
            guard kept.host != Kept.gone, let event = kept.event?.entry else { continue }
            switch event.kind {
            case .wake:
                activity.wakes += 1
                activity.wakesByReason[event.trigger.type.rawValue, default: 0] += 1
            case .declined, .ignored: activity.declined += event.count ?? 1
            case .awake, .noResponse: break
            }
        }
        return activity
    }
}
