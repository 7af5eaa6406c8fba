/// Where each host's time goes, day by day: asleep under the proxy's watch, awake, or neither (docs/savings.md).
/// Durations come from the monotonic clock alone, so an NTP step or `date -s` can neither lengthen nor shorten
/// them; the wall clock only says which local day a span belongs to, and where midnight cut it (`LocalDayTime`,
/// read by the I/O layer with the box's time zone). No clock and no I/O here.
public struct SavingsLedger: Sendable {
    /// Ours: the "at least 13 months" is 396 days; a few more so that a whole month a year ago is still
    /// there on the last day of the month.
    public static let daysKept = 400
    /// Ours: a home has tens of hosts; each costs at most `daysKept` days of 32 bytes (about 12.5 KiB). Past it the
    /// host heard of longest ago is forgotten for the new one.
    public static let maximumHosts = 1_024
    /// The most one day holds in one state: a day, and once more for a wall clock stepped back over it (ours).
    public static let maximumMillisecondsADay: Int64 = 2 * 86_400_000
    /// The longest name kept, in UTF-8 bytes: a DNS name of 255 bytes as the engine writes it, each byte escaped
    /// (`\DDD`) at worst, with its dots (ours). Longer is cut at a character, so the file always reads back.
    public static let maximumNameBytes = 1_024

    /// One host's day.
    public struct Day: Hashable, Sendable {
        /// Days since 1970-01-01 in the box's time zone.
        public var day: Int
        public var asleepMilliseconds: Int64 = 0
        public var awakeMilliseconds: Int64 = 0
        /// Magic packets sent for it (a wake that began), and wakes the gate declined (scans, monitors).
        public var wakes = 0
        public var declinedWakes = 0

        public init(day: Int) { self.day = day }
    }

    /// One host: its latest name, how its time counts now, and its days, oldest first.
    public struct Host: Hashable, Sendable {
        public var name: String?
        public var counts: SavingsState
        public var days: [Day]
        /// The last local day anything happened to it (for `maximumHosts`).
        public var lastDay: Int
        /// Up to when its time is counted (nil: not since this ledger was read: the time the daemon was stopped
        /// counts for nobody).
        public var countedAt: Timestamp? = nil
        public var countedLocal: LocalDayTime? = nil

        public init(name: String?, counts: SavingsState, days: [Day], lastDay: Int) {
            self.name = name
            self.counts = counts
            self.days = days
            self.lastDay = lastDay
        }
    }

    public internal(set) var hosts: [String: Host] = [:]
    /// The proxy's own days: `awakeMilliseconds` is the time it ran (for the net saving, with its own draw).
    public internal(set) var running: [Day] = []
    /// Where the last `advance` stood; nil before the first.
    public private(set) var last: (monotonic: Timestamp, local: LocalDayTime)? = nil
    /// Each host's time asleep since this ledger was made (the daemon's start), never cut or pruned: what
    /// Prometheus' counters count. Not written to the file.
    public private(set) var asleepSinceStart: [String: Int64] = [:]
    /// The days changed since the last `takeChanges()`, by host; `runningChanged` for the proxy's own.
    private var changed: [String: Set<Int>] = [:]
    private var runningChanged: Set<Int> = []
    /// Read from a file whose last append was cut short (`init(decodingAppends:)`): that line was left out.
    public internal(set) var tornTail = false

    public init() {}

    // MARK: - Time

    /// Credits the time since the last call to the proxy's own running time and to each host's current state. A
    /// span that crossed local midnight is cut there: what came after it goes to the new day, the rest to the day
    /// before. A wall clock stepped back puts the whole span on the day it now shows.
    public mutating func advance(now: Timestamp, local: LocalDayTime) {
        guard let last = self.last else {
            self.last = (now, local)
            return
        }
        // The monotonic clock never goes back; a caller that did would otherwise count a span twice.
        guard now >= last.monotonic else { return }
        self.last = (now, local)
        for span in Self.spans(from: last.monotonic, last.local, to: now, local) {
            let index = Self.dayIndex(span.day, in: &self.running)
            self.running[index].awakeMilliseconds = min(
                Self.maximumMillisecondsADay, self.running[index].awakeMilliseconds + span.milliseconds)
            self.runningChanged.insert(span.day)
        }
        if let oldest = self.running.first?.day, oldest < local.day - Self.daysKept + 1 {
            self.running.removeAll { $0.day < local.day - Self.daysKept + 1 }
        }
        for key in Array(self.hosts.keys) { self.credit(key, now: now, local: local) }
        self.prune(today: local.day)
    }

    /// The time from one moment to another, by local day.
    private static func spans(
        from then: Timestamp, _ thenLocal: LocalDayTime, to now: Timestamp, _ local: LocalDayTime
    ) -> [(day: Int, milliseconds: Int64)] {
        let elapsed = (now - then).nanosecondsClamped / 1_000_000
        guard elapsed > 0 else { return [] }
        guard local.day > thenLocal.day else { return [(local.day, elapsed)] }
        let today = min(elapsed, max(0, local.millisecondsIntoDay))
        return [(thenLocal.day, elapsed - today), (local.day, today)].filter { $0.milliseconds > 0 }
    }

    /// Credits one host's time since it was last counted to how it counts: a change of one host's state costs
    /// that host, not every host (a storm of registrations changes thousands).
    private mutating func credit(_ key: String, now: Timestamp, local: LocalDayTime) {
        guard let host = self.hosts[key] else { return }
        if let then = host.countedAt, let thenLocal = host.countedLocal {
            guard now >= then else { return }
            let counts = host.counts
            if counts != .neither {
                for span in Self.spans(from: then, thenLocal, to: now, local) {
                    if counts == .asleep { self.asleepSinceStart[key, default: 0] += span.milliseconds }
                    self.update(key, day: span.day) {
                        // Saturating at `maximumMillisecondsADay`: only a wall clock stepped back again and again
                        // files more than a day on one day, and the file must always read back.
                        if counts == .asleep {
                            $0.asleepMilliseconds = min(
                                Self.maximumMillisecondsADay, $0.asleepMilliseconds + span.milliseconds)
                        } else {
                            $0.awakeMilliseconds = min(
                                Self.maximumMillisecondsADay, $0.awakeMilliseconds + span.milliseconds)
                        }
                    }
                }
            }
        }
        self.hosts[key]!.countedAt = now
        self.hosts[key]!.countedLocal = local
    }

    // MARK: - Events

    /// The host's state changed (`host`: its MAC, the key every other view of it uses). The time before counts
    /// as it counted until now.
    public mutating func hostEntered(
        _ state: HostState, host: String, name: String?, now: Timestamp, local: LocalDayTime
    ) {
        if self.last == nil { self.last = (now, local) }
        let counts = SavingsState(state)
        let name = name.map(Self.fileSafe)
        if self.hosts[host] == nil {
            guard counts != .neither, self.hasRoom else { return }
            self.hosts[host] = Host(name: name, counts: counts, days: [], lastDay: local.day)
        } else {
            self.credit(host, now: now, local: local)
        }
        self.hosts[host]!.counts = counts
        self.hosts[host]!.lastDay = local.day
        if self.hosts[host]!.countedAt == nil || self.hosts[host]!.countedAt! <= now {
            self.hosts[host]!.countedAt = now
            self.hosts[host]!.countedLocal = local
        }
        if let name { self.hosts[host]!.name = name }
    }

    /// A wake began for the host (`declined`: the gate said no, docs/waking.md).
    public mutating func woke(host: String, declined: Bool, now: Timestamp, local: LocalDayTime) {
        guard self.hosts[host] != nil else { return }
        self.update(host, day: local.day) {
            if declined { $0.declinedWakes += 1 } else { $0.wakes += 1 }
        }
    }

    // MARK: - Bounds

    /// A name as one line of the file can hold it: a name comes from the wire, and one with a line break, or longer
    /// than the file takes, would make the whole file unreadable at the next start. Breaks become spaces, and the
    /// name is cut at a character within `maximumNameBytes`.
    static func fileSafe(_ name: String) -> String {
        var safe = String(name.map { $0 == "\n" || $0 == "\r" || $0 == "\r\n" ? " " : $0 })
        while safe.utf8.count > Self.maximumNameBytes { safe.removeLast() }
        return safe
    }

    private mutating func update(_ host: String, day: Int, _ body: (inout Day) -> Void) {
        var days = self.hosts[host]!.days
        let index = Self.dayIndex(day, in: &days)
        body(&days[index])
        self.hosts[host]!.days = days
        self.changed[host, default: []].insert(day)
    }

    /// Where `day` is in `days` (kept in order), inserted if missing. Almost always the last day, or a new last
    /// one; a clock stepped back may ask for an earlier one.
    private static func dayIndex(_ day: Int, in days: inout [Day]) -> Int {
        if let lastIndex = days.indices.last, days[lastIndex].day == day { return lastIndex }
        if let found = days.firstIndex(where: { $0.day >= day }) {
            if days[found].day != day { days.insert(Day(day: day), at: found) }
            return found
        }
        days.append(Day(day: day))
        return days.count - 1
    }

    // MARK: - Changes, for the file

    /// The days changed since the last call, as a ledger of their own (each host's name with them), or nil when
    /// nothing changed: what the file appends (docs/savings.md, "On disk"). Once a minute a home changes one day
    /// for each host it holds, so an append is tens of lines, not the ledger.
    public mutating func takeChanges() -> SavingsLedger? {
        guard !self.changed.isEmpty || !self.runningChanged.isEmpty else { return nil }
        var fragment = SavingsLedger()
        for (key, days) in self.changed {
            guard let host = self.hosts[key] else { continue }
            let kept = host.days.filter { days.contains($0.day) }
            guard !kept.isEmpty else { continue }
            fragment.hosts[key] = Host(name: host.name, counts: .neither, days: kept, lastDay: host.lastDay)
        }
        fragment.running = self.running.filter { self.runningChanged.contains($0.day) }
        self.changed = [:]
        self.runningChanged = []
        return fragment
    }

    /// Takes in what `other` holds: its days replace the same days here, its names replace names; the bounds hold
    /// afterwards (the oldest days, and the hosts heard of longest ago, go first). How each host counts is left as
    /// it is. Reading the file merges its appends in order.
    public mutating func merge(_ other: SavingsLedger) {
        Self.merge(other.running, into: &self.running)
        for key in other.hosts.keys.sorted() {
            let incoming = other.hosts[key]!
            if var host = self.hosts[key] {
                Self.merge(incoming.days, into: &host.days)
                if let name = incoming.name { host.name = name }
                host.lastDay = max(host.lastDay, incoming.lastDay, host.days.last?.day ?? host.lastDay)
                self.hosts[key] = host
            } else {
                guard self.hasRoom else { continue }
                var host = incoming
                host.counts = .neither
                host.days = []
                Self.merge(incoming.days, into: &host.days)
                host.lastDay = max(incoming.lastDay, host.days.last?.day ?? incoming.lastDay)
                self.hosts[key] = host
            }
        }
    }

    private static func merge(_ incoming: [Day], into days: inout [Day]) {
        for day in incoming {
            let index = Self.dayIndex(day.day, in: &days)
            days[index] = day
        }
        if days.count > Self.daysKept { days.removeFirst(days.count - Self.daysKept) }
    }

    /// Days older than `daysKept` go, and hosts left with none that count as neither.
    private mutating func prune(today: Int) {
        let oldest = today - Self.daysKept + 1
        for key in Array(self.hosts.keys) {
            var host = self.hosts[key]!
            guard let first = host.days.first, first.day < oldest else { continue }
            host.days.removeAll { $0.day < oldest }
            if host.days.isEmpty, host.counts == .neither {
                self.hosts[key] = nil
                self.asleepSinceStart[key] = nil
            } else {
                self.hosts[key] = host
            }
        }
    }

    /// Room for one more host: the one heard of longest ago goes.
    /// Whether a new host can be kept: below the bound only. A host leaves the ledger once it is neither held nor
    /// counted on any day kept (`prune`), so a home, which never comes near the bound, always has room; a proxy
    /// holding 10,000 hosts keeps the first 1,024 it met rather than trade one for another at every registration
    /// (making room by the oldest host cost a pass over every host each time, and a 10,000-host storm took half as
    /// long again: sleepproxy-bench scale).
    private var hasRoom: Bool { self.hosts.count < Self.maximumHosts }
}

/// A moment in the box's calendar: which local day, and how far into it. What the wall clock is good for here.
public struct LocalDayTime: Hashable, Sendable {
    /// Days since 1970-01-01 in the box's time zone.
    public var day: Int
    /// Milliseconds since that day's local midnight.
    public var millisecondsIntoDay: Int64

    public init(day: Int, millisecondsIntoDay: Int64) {
        self.day = day
        self.millisecondsIntoDay = millisecondsIntoDay
    }
}

/// How a host's time counts for the savings.
public enum SavingsState: Hashable, Sendable {
    case asleep
    case awake
    case neither

    /// Asleep while the proxy answers for it or wakes it; awake while it is held but up, and once handed back (it
    /// is up on its own); neither when it is gone (its lease ended, it was forgotten, or it is off or away) or
    /// stood by for (the other proxy answers for it and counts it: docs/several-proxies.md).
    public init(_ state: HostState) {
        switch state {
        case .asleep, .waking: self = .asleep
        case .starting, .awake, .handedBack: self = .awake
        case .standby, .gone: self = .neither
        }
    }
}
