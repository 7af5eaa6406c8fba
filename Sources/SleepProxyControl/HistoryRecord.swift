import FoundationEssentials

/// Where a host stands or stood: the wire's mirror of the engine's `HostState` (the one mapping is
/// `PresenceState(_:)` in the I/O layer), for the control protocol, the JSON API, the history and the status page.
/// The JSON keeps the words, which 0.5.0 wrote too.
public enum PresenceState: String, Codable, Hashable, Sendable, CaseIterable {
    /// Held, not yet shown to be asleep.
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

    /// The states of a host the proxy holds, in the order status and filters list them.
    public static let held: [PresenceState] = [.starting, .asleep, .awake, .waking, .standby]

    /// One of the held states by its word (a filter by state asks for these; no host is held `gone`).
    public init?(held word: String) {
        guard let state = PresenceState(rawValue: word), Self.held.contains(state) else { return nil }
        self = state
    }
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
    /// The same for the bytes the history file's reader hands over: a concrete type, so that the parser is
    /// specialised for it inside this module instead of run generically from another (a factor of several at
    /// start, where up to 40,000 lines are read).
    public init?(stateLine line: UnsafeBufferPointer<UInt8>) {
        self.init(bytes: line)
    }

    public init?<Bytes: RandomAccessCollection>(stateLine line: Bytes)
    where Bytes.Element == UInt8, Bytes.Index == Int {
        self.init(bytes: line)
    }

    private init?<Bytes: RandomAccessCollection>(bytes line: Bytes)
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
        // One slot a field, in the order `jsonLine` writes them; a key twice or any other key is not a state line.
        // (A dictionary of the fields cost most of the reading: 20,000 lines took 0.4 s at start.)
        var fields: [String?] = [nil, nil, nil, nil, nil]
        repeat {
            guard let key = string(), expect(UInt8(ascii: ":")), let value = string() else { return nil }
            let slot: Int
            switch key {
            case "hostName": slot = 0
            case "mac": slot = 1
            case "note": slot = 2
            case "state": slot = 3
            case "time": slot = 4
            default: return nil
            }
            guard fields[slot] == nil else { return nil }
            fields[slot] = value
        } while expect(UInt8(ascii: ","))
        guard expect(UInt8(ascii: "}")) else { return nil }
        skipSpaces()
        guard index == line.endIndex, let mac = fields[1],
            let state = fields[3].flatMap(PresenceState.init(rawValue:)),
            let time = fields[4].flatMap(Self.date(iso8601:))
        else { return nil }
        self.init(time: time, mac: mac, hostName: fields[0], state: state, note: fields[2])
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
