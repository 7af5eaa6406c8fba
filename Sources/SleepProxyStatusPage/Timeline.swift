import FoundationEssentials
import SleepProxyControl

#if canImport(Glibc)
    import Glibc
#endif

/// Times as the box's local clock shows them (its time zone, as `date` prints it), fixed at the zone's offset
/// when the page is built: a day's page spanning a daylight-saving change is off by an hour on one side of it.
public struct LocalTime: Sendable, Hashable {
    public var offsetSeconds: Int
    public var zone: String

    public init(offsetSeconds: Int, zone: String) {
        self.offsetSeconds = offsetSeconds
        self.zone = zone
    }

    /// The machine's zone at `date` (TZ, /etc/localtime).
    public static func current(at date: Date) -> LocalTime {
        var seconds = time_t(date.timeIntervalSince1970)
        var parts = tm()
        guard localtime_r(&seconds, &parts) != nil else { return LocalTime(offsetSeconds: 0, zone: "UTC") }
        let zone = parts.tm_zone.map { String(cString: $0) } ?? "UTC"
        return LocalTime(offsetSeconds: Int(parts.tm_gmtoff), zone: zone)
    }

    /// Seconds since midnight, local.
    func secondOfDay(_ date: Date) -> Int {
        let local = Int(date.timeIntervalSince1970.rounded(.down)) + self.offsetSeconds
        return ((local % 86_400) + 86_400) % 86_400
    }

    /// "07:42".
    public func clock(_ date: Date) -> String {
        let second = self.secondOfDay(date)
        return Self.twoDigits(second / 3600) + ":" + Self.twoDigits(second / 60 % 60)
    }

    /// "07:42:05".
    public func clockSeconds(_ date: Date) -> String {
        self.clock(date) + ":" + Self.twoDigits(self.secondOfDay(date) % 60)
    }

    static func twoDigits(_ value: Int) -> String { value < 10 ? "0\(value)" : "\(value)" }
}

/// A host's day drawn as SVG (docs/status-page.md): a band per stretch in one state, a marker above it for every
/// wake (with its reason) and a tick below it for every declined or ignored connection (with its source). Each
/// mark carries a `<title>`, which browsers show on hover and screen readers read.
public enum Timeline {
    static let width = 1000.0
    /// Room at each end, so that a wake at this very moment is drawn whole.
    static let margin = 8.0
    static let bandTop = 26.0
    static let bandHeight = 30.0
    static let height = 92.0

    public static func svg(_ history: HostHistory, time: LocalTime) -> HTML {
        let hours = Int((history.to.timeIntervalSince(history.from) / 3600).rounded())
        let start = history.from.timeIntervalSince1970
        let length = max(1, history.to.timeIntervalSince1970 - start)
        let inner = Self.width - 2 * Self.margin
        func place(_ date: Date) -> Double {
            Self.margin + min(max(0, (date.timeIntervalSince1970 - start) / length), 1) * inner
        }
        func x(_ date: Date) -> String { Self.number(place(date)) }
        var parts: [HTML] = []
        for span in history.spans {
            let name = span.state?.rawValue ?? "unknown"
            let from = place(span.from)
            let to = place(span.to)
            let what = span.state.map { Self.describe($0) } ?? "nothing recorded"
            parts.append(
                """
                <rect class="band \(name)" x="\(Self.number(from))" y="\(Self.number(Self.bandTop))" \
                width="\(Self.number(max(0.5, to - from)))" height="\(Self.number(Self.bandHeight))">\
                <title>\(time.clock(span.from))–\(time.clock(span.to)): \(what)</title></rect>
                """)
        }
        // Ticks on the local clock: every hour with a label every three over a day, every five minutes with a
        // label every quarter of an hour over an hour.
        let step = length > 4 * 3600 ? 3600 : 300
        let labelEvery = length > 4 * 3600 ? 3 * 3600 : 900
        let first = (step - (time.secondOfDay(history.from) % step)) % step
        var tick = start + Double(first)
        while tick <= start + length {
            let date = Date(timeIntervalSince1970: tick)
            let position = x(date)
            parts.append(
                """
                <line class="tick" x1="\(position)" x2="\(position)" y1="20" y2="62"/>
                """)
            // A label is drawn only where it fits whole (not under the window's own start and end labels).
            let room = place(date)
            if time.secondOfDay(date) % labelEvery == 0, room > 40, room < Self.width - 40 {
                parts.append(
                    """
                    <text x="\(position)" y="14" text-anchor="middle">\(time.clock(date))</text>
                    """)
            }
            tick += Double(step)
        }
        for event in history.decisions {
            let position = x(event.time)
            let label = "\(time.clock(event.time)) \(Self.describe(event))"
            switch event.kind {
            case .wake:
                parts.append(
                    """
                    <circle class="wake" cx="\(position)" cy="20" r="5"><title>\(label)</title></circle>
                    """)
            case .declined, .ignored:
                parts.append(
                    """
                    <rect class="declined" x="\(position)" y="64" width="2" height="12"><title>\(label)</title></rect>
                    """)
            case .awake, .noResponse:
                continue
            }
        }
        return """
            <svg class="timeline" viewBox="0 0 \(Int(Self.width)) \(Int(Self.height))" role="img" \
            aria-label="The last \(hours == 1 ? "hour" : "\(hours) hours") of \(history.hostName ?? history.mac)" xmlns="http://www.w3.org/2000/svg">\
            \(parts)<text x="\(Int(Self.margin))" y="88">\(time.clock(history.from))</text>\
            <text x="\(Int(Self.width - Self.margin))" y="88" text-anchor="end">now</text></svg>
            """
    }

    /// The legend under a timeline.
    public static let legend: HTML = """
        <div class="legend"><span><i class="asleep"></i>asleep (proxy answers)</span>\
        <span><i class="waking"></i>waking</span><span><i class="awake"></i>awake, held silently</span>\
        <span><i class="handed-back"></i>handed back</span><span><i class="starting"></i>registering</span>\
        <span><i class="standby"></i>another proxy answers</span><span><i class="gone"></i>not held</span>\
        <span><i class="wake"></i>wake</span><span><i class="declined"></i>declined wake</span></div>
        """

    static func describe(_ state: PresenceState) -> String {
        switch state {
        case .starting: "registered, not yet asleep"
        case .asleep: "asleep: the proxy answers for it"
        case .awake: "awake: the proxy holds its records silently"
        case .waking: "waking: magic packets going out"
        case .standby: "another sleep proxy answers for it"
        case .handedBack: "awake: handed back"
        case .gone: "not held"
        }
    }

    /// "wake: connection from 192.0.2.5 to port 445 (resolved-first)", "declined: 12 from 192.0.2.9 (scanner)".
    public static func describe(_ event: WakeLogEntry) -> String {
        let trigger = event.trigger
        var what: String
        switch trigger.type {
        case .connection:
            what = "connection"
            if let client = trigger.client { what += " from \(client)" }
            if let port = trigger.port { what += " to \(trigger.transport ?? "") port \(port)" }
        case .mdnsConflict: what = "mDNS conflict for \(trigger.name ?? "?") from \(trigger.from ?? "?")"
        case .netbiosConflict: what = "NetBIOS name \(trigger.name ?? "?") registered by \(trigger.from ?? "?")"
        case .addressConflict: what = "address conflict for \(trigger.address ?? "?") from \(trigger.from ?? "?")"
        case .leaseExpired: what = "lease ended"
        case .administrator: what = "sleepproxyctl wake"
        case .addressRequest: what = "\(trigger.client ?? "?") asked for \(trigger.address ?? "?") after resolving it"
        }
        let rule = event.rule.map { " (\($0))" } ?? ""
        switch event.kind {
        case .wake: return "wake: \(what)\(rule)"
        case .awake: return "awake" + (event.seconds.map { " after \(Self.number($0)) s" } ?? "")
        case .noResponse: return "no answer to \(event.attempts ?? 0) magic packets"
        case .declined, .ignored:
            let count = (event.count ?? 1) > 1 ? " ×\(event.count!)" : ""
            return "not woken: \(what)\(rule)\(count)"
        }
    }

    /// At most one decimal: "12.5", "300".
    static func number(_ value: Double) -> String {
        let tenths = (value * 10).rounded()
        return tenths.truncatingRemainder(dividingBy: 10) == 0 ? String(Int(tenths / 10)) : String(tenths / 10)
    }
}
