import SleepProxyWire

/// An RFC 6762 responder for the sleeping hosts' records and the proxy's own `_sleep-proxy._udp` service.
///
/// Pure: packets and time come in, transmissions and decisions go out as `ResponderAction`s; the records of
/// sleeping hosts are read from the `RecordStore` passed in (the registration side owns it). Timers are
/// deadlines: the caller runs `tick` at `nextDeadline()`.
public struct Responder: Sendable {
    public internal(set) var configuration: ResponderConfiguration
    public internal(set) var statistics = ResponderStatistics()

    /// Served interfaces by index, each with the proxy's own records and their probing state.
    var own: [Int: OwnAdvertisement] = [:] {
        didSet { self.ownVersion &+= 1 }
    }
    /// Changes with every change to `own` or `silenced`, for the legacy-answer cache.
    var ownVersion: UInt64 = 0
    /// Hosts the proxy holds but does not speak for: they are awake, or not yet shown to be asleep. Their records
    /// are neither announced nor answered nor defended (docs/coexistence.md: never fight a host that is awake).
    public private(set) var silenced: Set<OwnerKey> = [] {
        didSet { self.ownVersion &+= 1 }
    }
    var legacyCache = LegacyAnswerCache()
    var jitter: Jitter
    /// Multicast answers waiting for their deadline, per interface and family (RFC 6762 §6 delays, §6.2 rate
    /// limit, aggregation).
    var pending: [Channel: PendingResponse] = [:]
    /// Queries with TC set, waiting for their known-answer continuation (RFC 6762 §7.2).
    var held: [QuerySource: HeldQuery] = [:]
    /// Sum of `held[...].bytes`.
    var heldBytes = 0
    /// When each record was last multicast on each interface and family (RFC 6762 §5.4, §6.2).
    var lastMulticast = MulticastHistory()
    /// Records stamped in `lastMulticast` since the I/O layer last said when it sent (`multicastSent(at:)`), at
    /// most `stampsAwaitingSend`.
    var stampedSinceSent: [MulticastKey] = []
    /// Ours: a pass multicasts far fewer records than this (a registration of 24 records announces 24); past it, as
    /// with an engine driven without an I/O layer that reports its sends (benchmarks, the fuzz target), a stamp
    /// stays at the pass's time instead of the list growing.
    static let stampsAwaitingSend = 4096

    mutating func stamp(_ key: MulticastKey, now: Timestamp) {
        self.lastMulticast[key] = now
        if self.stampedSinceSent.count < Self.stampsAwaitingSend { self.stampedSinceSent.append(key) }
    }
    /// Announcements of proxied records, up to two per host (shared records at once, unique ones later).
    var announcements = TimerQueue<AnnouncementKey, Announcement>()
    /// Goodbyes of proxied records, one queue entry per host.
    var goodbyes = TimerQueue<OwnerKey, Goodbye>()
    /// Conflict times of the proxy's own names, for RFC 6762 §8.1's rename-storm back-off.
    var recentConflicts: [Timestamp] = []

    struct Channel: Hashable, Sendable {
        var interfaceIndex: Int
        var family: IPFamily
    }

    /// A record multicast on a channel: a 64-bit digest of (interface, name, data) and the family it went out on;
    /// both families' times share one entry of `MulticastHistory`. The history holds every record multicast in the
    /// last quarter of its TTL, about 240,000 with 10,000 hosts, and whole names and data would cost a hundred bytes
    /// more each (docs/scale.md). Two records sharing a digest (odds of 2^-64 per pair) would only make one of them look
    /// recently sent: an answer held back a second, or sent unicast.
    struct MulticastKey: Hashable, Sendable {
        let digest: Int
        let family: IPFamily

        init(channel: Channel, name: DNSName, rdata: DNSRData) {
            var hasher = Hasher()
            hasher.combine(channel.interfaceIndex)
            hasher.combine(name)
            hasher.combine(rdata)
            self.digest = hasher.finalize()
            self.family = channel.family
        }

        /// The same record on the same interface, on `family` (no second hash of the name and data).
        func on(_ family: IPFamily) -> MulticastKey { MulticastKey(digest: self.digest, family: family) }

        private init(digest: Int, family: IPFamily) {
            self.digest = digest
            self.family = family
        }
    }

    struct QuerySource: Hashable, Sendable {
        var address: IPAddress
        var port: UInt16
        var interfaceIndex: Int
    }

    /// A record to send, with the sleeping host it belongs to (nil for the proxy's own).
    struct Answer: Hashable, Sendable {
        var record: DNSResourceRecord
        var owner: OwnerKey?
    }

    struct PendingResponse: Sendable {
        var deadline: Timestamp
        var answers: [Answer] = []
        /// NSECs owed for names held uniquely without the asked type (additional section).
        var negatives: [Answer] = []
        /// Answers a probe: the rate limit is 250 ms instead of one second (RFC 6762 §6.2).
        var probeDefence = false
    }

    struct HeldQuery: Sendable {
        var deadline: Timestamp
        /// Packet bytes taken in, counted against `MDNSRules.maximumHeldBytes`.
        var bytes: Int
        var questions: [DNSQuestion]
        var knownAnswers: [DNSResourceRecord]
        var destination: IPAddress
    }

    struct AnnouncementKey: Hashable, Sendable {
        var owner: OwnerKey
        var unique: Bool
    }

    struct Announcement: Sendable {
        var owner: OwnerKey
        var interfaceIndex: Int
        /// The records to announce; nil: every record of the host that is announced, read from the store when
        /// it is sent. A host that falls asleep announces everything, and a restart resumes or claims thousands
        /// at once: a copy of each host's records for its announcement held about 2 KB a host at the same moment,
        /// 20 MB at 10,000 hosts above what registering them live ever held (docs/memory.md).
        var records: [DNSResourceRecord]?
        var next: Timestamp
        var sent = 0
    }

    struct Goodbye: Sendable {
        var owner: OwnerKey
        var interfaceIndex: Int
        var records: [DNSResourceRecord]
        var next: Timestamp
        var sent = 0
    }

    public init(configuration: ResponderConfiguration) {
        self.configuration = configuration
        self.jitter = Jitter(state: configuration.seed)
    }

    // MARK: - Interfaces

    /// Sets the interfaces to serve. New ones start probing for the proxy's own names; ones whose addresses
    /// changed re-announce; ones that went away are forgotten (their pending output with them).
    public mutating func setInterfaces(_ contexts: [InterfaceContext], now: Timestamp) -> [ResponderAction] {
        var actions: [ResponderAction] = []
        let indexes = Set(contexts.map(\.index))
        for index in self.own.keys where !indexes.contains(index) {
            self.own[index] = nil
            self.pending = self.pending.filter { $0.key.interfaceIndex != index }
            self.held = self.held.filter { $0.key.interfaceIndex != index }
            self.heldBytes = self.held.values.reduce(0) { $0 + $1.bytes }
            self.announcements.removeAll { $1.interfaceIndex == index }
            self.goodbyes.removeAll { $1.interfaceIndex == index }
        }
        for context in contexts {
            let records = OwnAdvertisement.records(
                for: context, instanceLabel: self.configuration.instanceLabel, hostLabel: self.configuration.hostLabel,
                port: self.configuration.registrationPort)
            if var existing = self.own[context.index] {
                guard existing.context != context else { continue }
                let old = existing.records
                existing.context = context
                existing.records = records
                if existing.isEstablished {
                    // RFC 6762 §8.4: changed data is announced again; vanished addresses get goodbyes.
                    existing.phase = .announcing(sent: 0)
                    existing.next = now
                    let gone = old.filter { record in !records.contains { $0.isIdentical(to: record) } }
                    if !gone.isEmpty {
                        actions += self.transmitEverywhere(
                            context: context, answers: gone.map { self.goodbyeCopy($0) }, additionals: [])
                    }
                }
                self.own[context.index] = existing
            } else {
                self.own[context.index] = OwnAdvertisement(
                    context: context, phase: .probing(sent: 0),
                    next: now + self.jitter.milliseconds(MDNSRules.initialProbeDelay), records: records)
            }
        }
        return actions
    }

    // MARK: - Registration events

    /// A registration was accepted: announce what is new (docs/protocol.md §4.2: twice, a second apart; shared
    /// records at once, unique ones after Apple's silent probing). Reverse-mapping PTRs are never announced.
    public mutating func registered(_ registration: OwnerRegistration, previous: OwnerRegistration?, now: Timestamp) {
        // The host back under the proxy's wing: goodbyes still queued for its earlier records are moot.
        self.goodbyes.remove(registration.key)
        guard !self.silenced.contains(registration.key) else { return }
        guard let index = self.interfaceIndex(named: registration.key.interface) else { return }
        let fresh = registration.records.map(\.record).filter { record in
            guard Self.isAnnounced(record) else { return false }
            return !(previous?.records.contains { $0.record.isIdentical(to: record) } ?? false)
        }
        self.cancelAnnouncements(of: registration.key)
        let shared = fresh.filter { !$0.cacheFlush }
        let unique = fresh.filter(\.cacheFlush)
        if !shared.isEmpty {
            self.schedule(Announcement(owner: registration.key, interfaceIndex: index, records: shared, next: now))
        }
        if !unique.isEmpty {
            self.schedule(
                Announcement(
                    owner: registration.key, interfaceIndex: index, records: unique,
                    next: now + MDNSRules.proxiedUniqueAnnouncementDelay))
        }
    }

    /// Stops speaking for a host that is awake (or not yet known to sleep): nothing of it is announced,
    /// answered or defended until `speak(for:now:)`.
    public mutating func silence(_ key: OwnerKey) {
        guard !self.silenced.contains(key) else { return }
        self.silenced.insert(key)
        self.cancelAnnouncements(of: key)
        for channel in Array(self.pending.keys) {
            self.pending[channel]?.answers.removeAll { $0.owner == key }
            self.pending[channel]?.negatives.removeAll { $0.owner == key }
        }
    }

    /// Starts speaking for a host that went quiet: its records are announced at once, twice a second apart
    /// (docs/protocol.md §4.2). Apple delays unique records by its 0.9 s of silent probing; here the host has
    /// already been shown to be asleep, so there is nothing left to wait for.
    public mutating func speak(for registration: OwnerRegistration, now: Timestamp) {
        guard self.silenced.remove(registration.key) != nil else { return }
        self.goodbyes.remove(registration.key)
        self.cancelAnnouncements(of: registration.key)
        guard let index = self.interfaceIndex(named: registration.key.interface),
            registration.records.contains(where: { Self.isAnnounced($0.record) })
        else { return }
        // One announcement of everything, filed as unique (it replaces both kinds).
        self.schedule(Announcement(owner: registration.key, interfaceIndex: index, records: nil, next: now))
    }

    /// A host's records are no longer proxied. `farewell` (decided by `HostPresence.end`): goodbyes for them
    /// (docs/protocol.md §8: three, two seconds apart), at a lease's end or an administrator's removal; never on a
    /// hand-back, which is silent (docs/protocol.md §5.1).
    public mutating func removed(_ registration: OwnerRegistration, farewell: Bool, now: Timestamp) {
        let key = registration.key
        self.cancelAnnouncements(of: key)
        self.goodbyes.remove(key)
        for channel in Array(self.pending.keys) {
            self.pending[channel]?.answers.removeAll { $0.owner == key }
            self.pending[channel]?.negatives.removeAll { $0.owner == key }
        }
        // Goodbyes only for records the proxy was speaking for: a silenced host is awake and answers for itself,
        // and a goodbye would flush its live records from every cache (docs/coexistence.md).
        guard self.silenced.remove(key) == nil else { return }
        guard farewell, let index = self.interfaceIndex(named: key.interface)
        else { return }
        let records = registration.records.map(\.record).filter {
            !ProxiedRecord(record: $0, registeredAt: now).isKeepalive
        }
        if !records.isEmpty {
            self.goodbyes.schedule(
                Goodbye(owner: key, interfaceIndex: index, records: records, next: now), for: key, at: now)
        }
    }

    /// Goodbyes for the proxy's own records on every interface (RFC 6762 §10.1), for a clean shutdown. The
    /// sleeping hosts' records are not withdrawn: they are kept for the next start.
    public mutating func shutdown() -> [ResponderAction] {
        var actions: [ResponderAction] = []
        for advertisement in self.own.values where advertisement.isEstablished {
            actions += self.transmitEverywhere(
                context: advertisement.context, answers: advertisement.records.map { self.goodbyeCopy($0) },
                additionals: [])
        }
        self.own.removeAll()
        self.pending.removeAll()
        self.held.removeAll()
        self.heldBytes = 0
        self.announcements.removeAll()
        self.goodbyes.removeAll()
        return actions
    }

    // MARK: - Timers

    public mutating func nextDeadline() -> Timestamp? {
        var deadline: Timestamp? = nil
        func consider(_ time: Timestamp?) {
            guard let time else { return }
            if deadline == nil || time < deadline! { deadline = time }
        }
        for response in self.pending.values where !response.answers.isEmpty || !response.negatives.isEmpty {
            consider(response.deadline)
        }
        for query in self.held.values { consider(query.deadline) }
        for advertisement in self.own.values { consider(advertisement.next) }
        consider(self.announcements.nextDeadline())
        consider(self.goodbyes.nextDeadline())
        return deadline
    }

    /// Runs everything due at `now`; of the announcements and of the goodbyes, `limit` at most (the rest stay due
    /// for the next call).
    public mutating func tick(
        store: RecordStore, now: Timestamp, limit: Int = MDNSRules.maximumAnnouncementsPerTick
    ) -> [ResponderAction] {
        var actions: [ResponderAction] = []
        // Held TC queries first: their answers may join a pending response due now.
        for (source, query) in self.held where query.deadline <= now {
            self.held[source] = nil
            self.heldBytes -= query.bytes
            guard let context = self.own[source.interfaceIndex]?.context else { continue }
            actions += self.answer(
                questions: query.questions, knownAnswers: query.knownAnswers, source: source,
                destination: query.destination,
                context: context, store: store, scope: .everyone, delayed: true, probing: false, now: now)
        }
        actions += self.runOwnAdvertisements(now: now)
        actions += self.runAnnouncements(store: store, now: now, limit: limit)
        actions += self.runGoodbyes(store: store, now: now, limit: limit)
        actions += self.flushPending(store: store, now: now)
        return actions
    }

    // MARK: - Helpers

    func interfaceIndex(named name: String) -> Int? {
        self.own.first { $0.value.context.name == name }?.key
    }

    static func isReverseMapping(_ record: DNSResourceRecord) -> Bool {
        record.type == .ptr && ReverseMapping.address(from: record.name) != nil
    }

    /// The families the interface can multicast on: IPv4 needs an IPv4 address (the group is joined by
    /// address), IPv6 any IPv6 address (link-local at least).
    public static func families(of context: InterfaceContext) -> [IPFamily] {
        var families: [IPFamily] = []
        if context.prefixes.contains(where: { if case .v4 = $0.address { return true } else { return false } }) {
            families.append(.v4)
        }
        if context.prefixes.contains(where: { if case .v6 = $0.address { return true } else { return false } }) {
            families.append(.v6)
        }
        return families
    }

    mutating func noteMulticast(
        _ records: [DNSResourceRecord], interfaceIndex: Int, context: InterfaceContext, now: Timestamp
    ) {
        let families = Self.families(of: context)
        guard let first = families.first else { return }
        for record in records {
            let key = MulticastKey(
                channel: Channel(interfaceIndex: interfaceIndex, family: first), name: record.name, rdata: record.rdata)
            for family in families { self.stamp(key.on(family), now: now) }
        }
    }

    /// The records decided at a batch's time went out at `time`, later by the rest of the batch's work (up to a
    /// few milliseconds here, more on a small box): RFC 6762 §6.2 counts its second from the last time a record
    /// was multicast, so their stamps move to when they left. Stamped at the decision, two answers a busy batch
    /// apart left 0.987 s apart in an hour of a query storm (docs/busy-lan.md).
    mutating func multicastSent(at time: Timestamp) {
        for key in self.stampedSinceSent {
            if let stamped = self.lastMulticast[key], stamped < time { self.lastMulticast[key] = time }
        }
        self.stampedSinceSent.removeAll(keepingCapacity: true)
    }
}
