import FoundationEssentials

/// Where a host stood at a moment of its day, as the status page's timeline draws it (docs/status-page.md).
/// The JSON keeps the words.
public enum PresenceState: String, Codable, Hashable, Sendable, CaseIterable {
    /// Registered, not yet shown to be asleep.
    case starting
    /// The proxy answered for it.
    case asleep
    /// It spoke for itself; the proxy held its records silently.
    case awake
    /// Magic packets were going out.
    case waking
    /// Another sleep proxy answered for it.
    case standby
    /// It woke and got everything back: up on its own, not held.
    case handedBack = "handed-back"
    /// Not held for another reason: its lease ended, it was forgotten, released or transferred.
    case gone
}

/// One line of a host's history: a change of its presence, or a wake decision (a wake, its outcome, a declined
/// or ignored connection, as in the wake log). Stored one per line in `history.jsonl`; the field names are the
/// stable schema.
public struct HistoryRecord: Codable, Hashable, Sendable {
    public var time: Date
    /// The host's primary MAC: histories are kept by MAC, so a host that re-registers, even under a new name,
    /// keeps its day.
    public var mac: String
    public var hostName: String?
    /// A presence change: the state the host entered, and why.
    public var state: PresenceState?
    public var note: String?
    /// A wake decision or outcome.
    public var event: WakeLogEntry?

    public init(time: Date, mac: String, hostName: String?, state: PresenceState, note: String?) {
        self.time = time
        self.mac = mac
        self.hostName = hostName
        self.state = state
        self.note = note
        self.event = nil
    }

    public init(_ event: WakeLogEntry) {
        self.time = event.time
        self.mac = event.mac
        self.hostName = event.hostName
        self.state = nil
        self.note = nil
        self.event = event
    }

    /// The presence this record moves the host into: a state change, or a wake and its outcome (a wake makes it
    /// `waking`; seen up, `awake`; no answer, back to `asleep`). Declines change nothing.
    public var enteredState: PresenceState? {
        if let state { return state }
        switch self.event?.kind {
        case .wake: return .waking
        case .awake: return .awake
        case .noResponse: return .asleep
        case .ignored, .declined, nil: return nil
        }
    }
}

/// A host's history over a window, as the status page and `/api/v1/hosts/MAC` give it.
public struct HostHistory: Codable, Hashable, Sendable {
    public var mac: String
    public var hostName: String?
    public var from: Date
    public var to: Date
    /// Where the host stood at `from`, when a record before the window says (nil: nothing is known).
    public var stateAtStart: PresenceState?
    /// The records inside the window, oldest first.
    public var records: [HistoryRecord]

    public init(
        mac: String, hostName: String?, from: Date, to: Date, stateAtStart: PresenceState?, records: [HistoryRecord]
    ) {
        self.mac = mac
        self.hostName = hostName
        self.from = from
        self.to = to
        self.stateAtStart = stateAtStart
        self.records = records
    }

    /// A stretch of time in one state.
    public struct Span: Hashable, Sendable {
        public var from: Date
        public var to: Date
        /// nil: nothing is known (before the first record).
        public var state: PresenceState?
    }

    /// The window cut into stretches of one state each, in order, covering it without gaps or overlaps.
    public var spans: [Span] {
        var spans: [Span] = []
        var start = self.from
        var state = self.stateAtStart
        for record in self.records {
            guard let next = record.enteredState, next != state else { continue }
            let at = min(max(record.time, self.from), self.to)
            if at > start { spans.append(Span(from: start, to: at, state: state)) }
            start = at
            state = next
        }
        if self.to > start { spans.append(Span(from: start, to: self.to, state: state)) }
        return spans
    }

    /// The same history over its last `seconds` only.
    public func window(lastSeconds seconds: Double) -> HostHistory {
        let from = max(self.from, self.to.addingTimeInterval(-seconds))
        var state = self.stateAtStart
        var inside: [HistoryRecord] = []
        for record in self.records {
            if record.time < from {
                if let entered = record.enteredState { state = entered }
            } else {
                inside.append(record)
            }
        }
        return HostHistory(
            mac: self.mac, hostName: self.hostName, from: from, to: self.to, stateAtStart: state, records: inside)
    }

    /// Wake decisions in the window: wakes, their outcomes, declined and ignored connections.
    public var decisions: [WakeLogEntry] { self.records.compactMap(\.event) }
}

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
        self.records[self.start...].filter { $0.host != Kept.gone }.map { kept in
            let host = self.hosts[Int(kept.host)]
            return self.record(kept, mac: self.mac(of: host.key), name: host.name)
        }
    }

    /// One host's history over `from...to`.
    public func history(of mac: String, from: Date, to: Date) -> HostHistory? {
        guard let (slot, host) = self.host(mac) else { return nil }
        var stateAtStart = host.before
        var inside: [HistoryRecord] = []
        for kept in self.records[max(host.oldest, self.start)...] where kept.host == slot {
            if kept.time < from {
                if let state = kept.enteredState { stateAtStart = state }
            } else if kept.time <= to {
                inside.append(self.record(kept, mac: mac, name: host.name))
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

extension HistoryRecord {
    /// The record as one line of `history.jsonl`, the same JSON `ControlProtocol.frame` writes (keys sorted, time
    /// in ISO 8601 to the second) and any JSON decoder reads. A state change is written by hand: JSONEncoder cost
    /// about 30 µs a record, and a storm of 10,000 registrations makes 20,000 of them (docs/status-page.md §3).
    /// A wake decision, rarer and richer, goes through JSONEncoder.
    public func jsonLine() throws -> [UInt8] {
        guard self.event == nil, let state = self.state else { return try ControlProtocol.frame(self) }
        var line: [UInt8] = []
        line.reserveCapacity(160)
        func key(_ name: String) {
            line += Array("\"\(name)\":".utf8)
        }
        func string(_ value: String) {
            line.append(UInt8(ascii: "\""))
            for byte in value.utf8 {
                switch byte {
                case UInt8(ascii: "\""): line += [UInt8(ascii: "\\"), UInt8(ascii: "\"")]
                case UInt8(ascii: "\\"): line += [UInt8(ascii: "\\"), UInt8(ascii: "\\")]
                // JSONEncoder escapes the slash too; either form decodes the same.
                case 0..<0x20:
                    let digits = Array("0123456789abcdef".utf8)
                    line += Array("\\u00".utf8) + [digits[Int(byte >> 4)], digits[Int(byte & 0x0F)]]
                default: line.append(byte)
                }
            }
            line.append(UInt8(ascii: "\""))
        }
        line.append(UInt8(ascii: "{"))
        if let hostName = self.hostName {
            key("hostName")
            string(hostName)
            line.append(UInt8(ascii: ","))
        }
        key("mac")
        string(self.mac)
        if let note = self.note {
            line.append(UInt8(ascii: ","))
            key("note")
            string(note)
        }
        line.append(UInt8(ascii: ","))
        key("state")
        string(state.rawValue)
        line.append(UInt8(ascii: ","))
        key("time")
        string(Self.iso8601(self.time))
        line += [UInt8(ascii: "}"), 0x0A]
        return line
    }

    /// "2026-11-25T19:20:11Z": UTC to the second, as JSONEncoder's `.iso8601` writes it (days from the civil
    /// calendar's algorithm, no time-zone tables needed).
    static func iso8601(_ date: Date) -> String {
        let seconds = Int(date.timeIntervalSince1970.rounded(.down))
        let days = seconds >= 0 ? seconds / 86_400 : (seconds - 86_399) / 86_400
        let second = seconds - days * 86_400
        // Howard Hinnant's days-to-civil.
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let monthIndex = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
        let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
        let year = yearOfEra + era * 400 + (month <= 2 ? 1 : 0)
        func two(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
        return "\(year)-\(two(month))-\(two(day))T\(two(second / 3600)):\(two(second / 60 % 60)):\(two(second % 60))Z"
    }
}

extension HistoryRecord {
    /// Reads a state change's line as `jsonLine()` writes it, without JSONDecoder (which cost about 40 µs and
    /// much short-lived memory a line at start, for up to 40,000 lines); nil for anything else (a wake decision's
    /// line, another key, a malformed line), which the caller hands to JSONDecoder.
    public init?<Bytes: RandomAccessCollection>(stateLine line: Bytes)
    where Bytes.Element == UInt8, Bytes.Index == Int {
        var index = line.startIndex
        func skipSpaces() {
            while index < line.endIndex, line[index] == 0x20 || line[index] == 0x09 { index += 1 }
        }
        func expect(_ byte: UInt8) -> Bool {
            skipSpaces()
            guard index < line.endIndex, line[index] == byte else { return false }
            index += 1
            return true
        }
        func string() -> String? {
            guard expect(UInt8(ascii: "\"")) else { return nil }
            // Most strings hold no escape: taken as they are, with no copy of their own.
            var end = index
            while end < line.endIndex, line[end] != UInt8(ascii: "\""), line[end] != UInt8(ascii: "\\"),
                line[end] >= 0x20
            {
                end += 1
            }
            if end < line.endIndex, line[end] == UInt8(ascii: "\"") {
                defer { index = end + 1 }
                return String(validating: line[index..<end], as: UTF8.self)
            }
            var bytes: [UInt8] = []
            var utf16: [UInt16] = []
            func flushUTF16() -> Bool {
                guard !utf16.isEmpty else { return true }
                guard let text = String(validating: utf16, as: UTF16.self) else { return false }
                bytes += Array(text.utf8)
                utf16.removeAll()
                return true
            }
            while index < line.endIndex {
                let byte = line[index]
                index += 1
                if byte == UInt8(ascii: "\"") {
                    guard flushUTF16() else { return nil }
                    return String(validating: bytes, as: UTF8.self)
                }
                guard byte == UInt8(ascii: "\\") else {
                    guard flushUTF16(), byte >= 0x20 else { return nil }
                    bytes.append(byte)
                    continue
                }
                guard index < line.endIndex else { return nil }
                let escape = line[index]
                index += 1
                if escape == UInt8(ascii: "u") {
                    guard line.endIndex - index >= 4,
                        let unit = UInt16(String(decoding: line[index..<index + 4], as: UTF8.self), radix: 16)
                    else { return nil }
                    index += 4
                    utf16.append(unit)
                    continue
                }
                guard flushUTF16() else { return nil }
                switch escape {
                case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): bytes.append(escape)
                case UInt8(ascii: "n"): bytes.append(0x0A)
                case UInt8(ascii: "t"): bytes.append(0x09)
                case UInt8(ascii: "r"): bytes.append(0x0D)
                case UInt8(ascii: "b"): bytes.append(0x08)
                case UInt8(ascii: "f"): bytes.append(0x0C)
                default: return nil
                }
            }
            return nil
        }
        guard expect(UInt8(ascii: "{")) else { return nil }
        var fields: [String: String] = [:]
        repeat {
            guard let key = string(), expect(UInt8(ascii: ":")), let value = string() else { return nil }
            guard ["hostName", "mac", "note", "state", "time"].contains(key), fields[key] == nil else { return nil }
            fields[key] = value
        } while expect(UInt8(ascii: ","))
        guard expect(UInt8(ascii: "}")) else { return nil }
        skipSpaces()
        guard index == line.endIndex, let mac = fields["mac"], let state = fields["state"].flatMap(PresenceState.init),
            let time = fields["time"].flatMap(Self.date(iso8601:))
        else { return nil }
        self.init(time: time, mac: mac, hostName: fields["hostName"], state: state, note: fields["note"])
    }

    /// "2026-11-25T19:20:11Z" (UTC to the second, as written) back to a date; nil for any other form.
    static func date(iso8601 text: String) -> Date? {
        let bytes = Array(text.utf8)
        guard bytes.count == 20, bytes[4] == UInt8(ascii: "-"), bytes[7] == UInt8(ascii: "-"),
            bytes[10] == UInt8(ascii: "T"), bytes[13] == UInt8(ascii: ":"), bytes[16] == UInt8(ascii: ":"),
            bytes[19] == UInt8(ascii: "Z")
        else { return nil }
        func number(_ range: Range<Int>) -> Int? {
            var value = 0
            for byte in bytes[range] {
                guard (0x30...0x39).contains(byte) else { return nil }
                value = value * 10 + Int(byte - 0x30)
            }
            return value
        }
        guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10),
            let hour = number(11..<13), let minute = number(14..<16), let second = number(17..<19),
            (1...12).contains(month), (1...31).contains(day), hour < 24, minute < 60, second < 61
        else { return nil }
        // Howard Hinnant's days-from-civil.
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        let days = era * 146_097 + dayOfEra - 719_468
        return Date(timeIntervalSince1970: Double(days * 86_400 + hour * 3600 + minute * 60 + second))
    }
}
