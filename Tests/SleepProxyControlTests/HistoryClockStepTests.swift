import FoundationEssentials
import SleepProxyControl
import Testing

/// A host's day when the wall clock was stepped between its records (NTP on a box with no clock of its own,
/// `date -s`): never a stretch drawn backwards, none twice, the window covered without gaps, the host's state as
/// its newest record says (docs/time.md).
@Suite("History across wall clock steps")
struct HistoryClockStepTests {
    typealias Book = HistoryBookTests

    static let steps: [Double] = [3_600, -3_600, 86_400, -86_400, 315_576_000, -315_576_000]

    /// The day's stretches in order, touching, none negative, from the window's start to its end.
    func expectWellDrawn(_ history: HostHistory, sourceLocation: SourceLocation = #_sourceLocation) {
        let spans = history.spans
        #expect(spans.first?.from == history.from, sourceLocation: sourceLocation)
        #expect(spans.last?.to == history.to, sourceLocation: sourceLocation)
        for span in spans { #expect(span.to > span.from, "\(span)", sourceLocation: sourceLocation) }
        for (earlier, later) in zip(spans, spans.dropFirst()) {
            #expect(earlier.to == later.from, sourceLocation: sourceLocation)
        }
        for (earlier, later) in zip(history.records, history.records.dropFirst()) {
            #expect(earlier.time <= later.time, "records out of order", sourceLocation: sourceLocation)
        }
    }

    @Test(arguments: steps)
    func aStepBetweenRecordsDrawsTheDayOnceInOrder(step: Double) throws {
        // Asleep, a wake at 100 s, awake at 103 s; then the clock steps; then handed back and asleep again.
        var book = HistoryBook()
        book.append(Book.state("a", .asleep, at: 0))
        book.append(Book.wake("a", at: 100))
        book.append(Book.wake("a", at: 103, kind: .awake))
        book.append(Book.state("a", .handedBack, at: 105 + step))
        book.append(Book.state("a", .asleep, at: 600 + step))
        // The page's window: the last day as the (stepped) clock reads it now.
        let now = Book.day.addingTimeInterval(700 + step)
        let history = try #require(book.history(of: "a", from: now.addingTimeInterval(-86_400), to: now))
        self.expectWellDrawn(history)
        #expect(history.spans.last?.state == .asleep, "the newest record says asleep")
        #expect(book.lastState(of: "a") == .asleep)
        if step < 0 {
            // Dated after the clock's new "now", the wake and its outcome are still on the day, at the step.
            #expect(history.decisions.map(\.kind) == [.wake, .awake])
        }
        // The hour view too.
        self.expectWellDrawn(history.window(lastSeconds: 3_600))
    }

    @Test func recordsArrivingOutOfOrderAreTakenInTheOrderTheyCame() throws {
        // Dated a day ahead, then corrected: the ahead records count as no later than the first correct one.
        var book = HistoryBook()
        book.append(Book.state("a", .asleep, at: 86_400))
        book.append(Book.wake("a", at: 86_500))
        book.append(Book.state("a", .awake, at: 86_510))
        book.append(Book.state("a", .asleep, at: 200))
        let history = try #require(
            book.history(of: "a", from: Book.day, to: Book.day.addingTimeInterval(300)))
        self.expectWellDrawn(history)
        #expect(history.records.map(\.time).allSatisfy { $0 <= Book.day.addingTimeInterval(200) })
        #expect(history.spans.map(\.state) == [nil, .asleep])
    }

    @Test func aHistoryBuiltElsewhereStillDrawsNoStretchBackwards() {
        // The API's HostHistory decoded as it came: its spans hold whatever order its records are in.
        let records = [
            Book.state("a", .asleep, at: 50), Book.state("a", .awake, at: 20), Book.state("a", .asleep, at: 80),
        ]
        let history = HostHistory(
            mac: "a", hostName: "h", from: Book.day, to: Book.day.addingTimeInterval(100), stateAtStart: nil,
            records: records)
        for span in history.spans { #expect(span.to > span.from) }
        for (earlier, later) in zip(history.spans, history.spans.dropFirst()) { #expect(earlier.to == later.from) }
    }
}
