import FoundationEssentials
import SleepProxyControl
import Testing

/// The history behind the status page's timeline: bounded per host and in all (tested at N and N+1), oldest
/// first, and the state before the window known even when the records that set it are gone.
@Suite("History book")
struct HistoryBookTests {
    static let day = Date(timeIntervalSince1970: 1_790_000_000)

    static func state(_ mac: String, _ state: PresenceState, at seconds: Double, note: String? = nil) -> HistoryRecord {
        HistoryRecord(time: day.addingTimeInterval(seconds), mac: mac, hostName: "h", state: state, note: note)
    }

    static func wake(_ mac: String, at seconds: Double, kind: WakeLogEntry.Kind = .wake, count: Int? = nil)
        -> HistoryRecord
    {
        HistoryRecord(
            WakeLogEntry(
                kind: kind, time: day.addingTimeInterval(seconds), mac: mac, interface: "eth0", hostName: "h",
                trigger: .init(type: .connection, transport: "tcp", client: "192.0.2.9", port: 445), seconds: nil,
                attempts: nil, count: count, summary: "x"))
    }

    @Test func aHostKeepsItsNewestRecordsUpToItsBound() {
        var book = HistoryBook(perHost: 3, inAll: 100)
        for second in 0..<3 { book.append(Self.wake("a", at: Double(second), kind: .declined)) }
        #expect(book.records(of: "a").count == 3, "at N every record is kept")
        book.append(Self.wake("a", at: 3, kind: .declined))
        #expect(book.records(of: "a").map(\.time) == (1...3).map { Self.day.addingTimeInterval(Double($0)) })
        #expect(book.count == 3)
    }

    /// A wake log rebuilt from the history (after a reboot emptied the runtime directory) holds the same events as
    /// the history's records do, in their order, and none of a host whose own bound let them go.
    @Test func theEventsAreTheRecordsEventsInTheirOrder() {
        var book = HistoryBook(perHost: 3, inAll: 100)
        book.append(Self.state("a", .asleep, at: 0))
        book.append(Self.wake("a", at: 1))
        book.append(Self.state("b", .asleep, at: 2, note: "quiet"))
        book.append(Self.wake("b", at: 3, kind: .declined, count: 2))
        for second in 4..<8 { book.append(Self.wake("c", at: Double(second), kind: .declined)) }
        var events: [WakeLogEntry] = []
        book.forEachEvent { events.append($0) }
        var fromRecords: [WakeLogEntry] = []
        book.forEach { if let event = $0.event { fromRecords.append(event) } }
        #expect(events == fromRecords)
        #expect(events.map(\.mac) == ["a", "b", "c", "c", "c"], "c's oldest went with its own bound")
    }

    @Test func theBookKeepsItsNewestRecordsInAllUpToItsBound() {
        var book = HistoryBook(perHost: 10, inAll: 4)
        for (index, mac) in ["a", "b", "c", "d"].enumerated() {
            book.append(Self.state(mac, .asleep, at: Double(index)))
        }
        #expect(book.count == 4 && book.hostCount == 4, "at N every record is kept")
        book.append(Self.state("e", .asleep, at: 4))
        #expect(book.count == 4 && book.records(of: "a").isEmpty && book.hostCount == 4, "the oldest went first")
    }

    /// A noisy host whose own bound lets records go must not make the book let a quiet host's records go early,
    /// nor grow its bookkeeping without bound.
    @Test func aNoisyHostDoesNotPushAQuietOneOut() {
        var book = HistoryBook(perHost: 5, inAll: 10)
        book.append(Self.state("quiet", .asleep, at: 0))
        for second in 1...10_000 { book.append(Self.wake("noisy", at: Double(second), kind: .declined)) }
        #expect(book.records(of: "quiet").count == 1)
        #expect(book.records(of: "noisy").count == 5 && book.count == 6)
    }

    @Test func theStateBeforeTheWindowIsKnownAfterItsRecordWent() throws {
        var book = HistoryBook(perHost: 2, inAll: 100)
        book.append(Self.state("a", .asleep, at: 0))
        book.append(Self.wake("a", at: 100, kind: .declined))
        book.append(Self.wake("a", at: 200, kind: .declined))
        #expect(book.lastState(of: "a") == .asleep, "the asleep record went, its state stays known")
        let history = try #require(
            book.history(of: "a", from: Self.day.addingTimeInterval(50), to: Self.day.addingTimeInterval(300)))
        #expect(history.stateAtStart == .asleep)
        #expect(history.spans.map(\.state) == [.asleep])
    }

    @Test func spansCoverTheWindowWithWakesAndTheirOutcomes() throws {
        var book = HistoryBook()
        book.append(Self.state("a", .starting, at: 0))
        book.append(Self.state("a", .asleep, at: 10))
        book.append(Self.wake("a", at: 100, kind: .declined))
        book.append(Self.wake("a", at: 200))
        book.append(Self.wake("a", at: 203, kind: .awake))
        book.append(Self.state("a", .handedBack, at: 205))
        let history = try #require(
            book.history(of: "a", from: Self.day.addingTimeInterval(-100), to: Self.day.addingTimeInterval(400)))
        #expect(history.spans.map(\.state) == [nil, .starting, .asleep, .waking, .awake, .handedBack])
        #expect(history.spans.first?.from == history.from && history.spans.last?.to == history.to)
        for (earlier, later) in zip(history.spans, history.spans.dropFirst()) { #expect(earlier.to == later.from) }
        #expect(history.decisions.map(\.kind) == [.declined, .wake, .awake])
        let hour = history.window(lastSeconds: 250)
        #expect(
            hour.stateAtStart == .asleep && hour.records.count == 3, "the decline at 100 s is before the last 250 s")
        let activity = book.activity(since: Self.day)
        #expect(activity.wakes == 1 && activity.declined == 1 && activity.wakesByReason == ["connection": 1])
    }

    /// Lines the fast reader does not take are left to JSONDecoder: a wake decision's, another key, junk.
    @Test func theFastReaderTakesOnlyStateLines() throws {
        let wake = try ControlProtocol.frame(Self.wake("a", at: 1)).dropLast()
        #expect(HistoryRecord(stateLine: wake) == nil)
        for junk in [
            "", "{}", "{\"mac\":\"m\",\"state\":\"asleep\",\"time\":\"2026-11-25T19:20:11Z\",\"x\":\"y\"}",
            "{\"mac\":\"m\",\"state\":\"sleepy\",\"time\":\"2026-11-25T19:20:11Z\"}",
            "{\"mac\":\"m\",\"state\":\"asleep\",\"time\":\"2026-11-25 19:20\"}",
            "{\"mac\":\"m\",\"state\":\"asleep\",\"time\":\"2026-11-25T19:20:11Z\"", "{\"mac\":\"\\q\"}",
        ] {
            #expect(HistoryRecord(stateLine: Array(junk.utf8)[...]) == nil, "\(junk)")
        }
    }

    /// The overview's "not held now" list: newest first, only hosts not held, only within the window, at most
    /// the limit (at N all, at N + 1 the oldest left out).
    @Test func recentHostsAreTheNewestNotHeld() {
        var book = HistoryBook()
        for (index, mac) in ["a", "b", "c", "d"].enumerated() {
            book.append(Self.state(mac, .asleep, at: Double(index * 10)))
            book.append(Self.wake(mac, at: Double(index * 10 + 1)))
            book.append(Self.state(mac, .handedBack, at: Double(index * 10 + 2)))
        }
        let since = Self.day.addingTimeInterval(5)
        let all = book.recentHosts(since: since, limit: 3, isHeld: { $0 == "c" })
        #expect(all.map(\.mac) == ["d", "b"], "a is older than the window, c is held")
        #expect(all.first?.state == .handedBack && all.first?.lastWake?.kind == .wake)
        #expect(book.recentHosts(since: since, limit: 3, isHeld: { _ in false }).map(\.mac) == ["d", "c", "b"])
        #expect(book.recentHosts(since: since, limit: 2, isHeld: { _ in false }).map(\.mac) == ["d", "c"])
    }

    @Test func recordsRoundTripAsJSONLines() throws {
        let record = Self.state("02:53:50:00:00:02", .standby, at: 5, note: "192.0.2.7 answers for it")
        let line = try ControlProtocol.frame(record)
        #expect(try ControlProtocol.decode(HistoryRecord.self, from: Array(line.dropLast())) == record)
        let text = String(decoding: line, as: UTF8.self)
        #expect(text.contains("\"state\":\"standby\"") && !text.contains("\"event\""))
    }
}

extension HistoryBookTests {
    /// The hand-written line is what JSONEncoder would write, as far as any decoder can tell, for every string
    /// a host can send and for times across the calendar.
    @Test func theHandWrittenLineDecodesAsTheRecord() throws {
        let names = ["vm.local.", "quote\"back\\slash", "tab\tnew\nline\u{1}", "ünïcode ☕", "</script>"]
        let times: [Double] = [0, 951_782_400, 1_790_000_000.75, 4_102_444_800, -86_401]
        for (name, seconds) in zip(names, times) {
            let record = HistoryRecord(
                time: Date(timeIntervalSince1970: seconds), mac: "02:53:50:00:00:02", hostName: name, state: .waking,
                note: name)
            let line = try record.jsonLine()
            #expect(line.last == 0x0A && !line.dropLast().contains(0x0A))
            let decoded = try ControlProtocol.decode(HistoryRecord.self, from: Array(line.dropLast()))
            var expected = record
            expected.time = Date(timeIntervalSince1970: seconds.rounded(.down))
            #expect(decoded == expected, "\(String(decoding: line, as: UTF8.self))")
            #expect(HistoryRecord(stateLine: line.dropLast()) == expected, "read back without JSONDecoder")
            let encoderLine = try ControlProtocol.frame(record).dropLast()
            #expect(HistoryRecord(stateLine: encoderLine) == expected, "JSONEncoder's own line reads back too")
            #expect(
                try ControlProtocol.decode(HistoryRecord.self, from: Array(ControlProtocol.frame(record).dropLast()))
                    == expected, "JSONEncoder agrees")
        }
        let bare = HistoryRecord(
            time: Date(timeIntervalSince1970: 5), mac: "m", hostName: nil, state: .gone, note: nil)
        #expect(
            String(decoding: try bare.jsonLine(), as: UTF8.self)
                == "{\"mac\":\"m\",\"state\":\"gone\",\"time\":\"1970-01-01T00:00:05Z\"}\n")
    }
}
