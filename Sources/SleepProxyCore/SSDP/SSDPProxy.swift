import SleepProxyWire

/// SSDP on behalf of sleeping hosts (docs/ssdp.md), as a pure state machine: it learns what each host the
/// proxy holds advertises over SSDP while it is awake, and while the host sleeps answers searches for it and keeps
/// its announcements going, so that TVs and media players keep it in their lists. Beyond Apple, whose proxy
/// speaks only mDNS.
///
/// Which host a packet is from, and whether a host sleeps, is the engine's to say (`owner:`, `speak(for:)`,
/// `silence(_:)`): the rules that tie SSDP to registration and takeover live in `ProxyEngine`.
public struct SSDPProxy: Sendable {
    public internal(set) var statistics = SSDPStatistics()
    /// Grows whenever what is known of a registered host changes: the I/O layer saves a copy when it moved on.
    public internal(set) var revision = 0

    var interfaces: [Int: InterfaceContext] = [:]
    var hosts: [OwnerKey: Host] = [:]
    /// Hosts spoken for, by interface name: a search looks at these only, not at every host held.
    var speaking: [String: Set<OwnerKey>] = [:]
    /// Announcements heard from addresses no registration claims (yet).
    var unclaimed: [Source: Learned] = [:]
    /// The next set of announcements of each host spoken for.
    var announcements = TimerQueue<OwnerKey, Bool>()
    /// Search responses waiting for their random delay (UDA §1.3.2).
    var pending = TimerQueue<PendingKey, PendingResponse>()
    /// Multicast searches answered, until their MX delay is over: a repeat in that time costs one lookup, not a
    /// walk over every sleeping host's entries (an M-SEARCH flood must not become a CPU load).
    var recentSearches = TimerQueue<RecentSearch, Timestamp>()

    struct RecentSearch: Hashable, Sendable {
        var destination: SSDPTransmission.Destination
        var target: String
    }
    /// Group searches waiting for `SSDPRules.groupSearchInterval` to pass, by interface name.
    var groupSearches = TimerQueue<String, Bool>()
    /// When each interface last had a group search.
    var lastGroupSearch: [String: Timestamp] = [:]
    var jitter: Jitter

    struct Host: Sendable {
        var interface: String
        var addresses: [IPAddress]
        var learned = Learned()
        var speaking = false
    }

    /// Entries with their cost, for the bounds of `SSDPRules`.
    struct Learned: Sendable {
        var entries: [SSDPEntryKey: SSDPEntry] = [:]
        var bytes = 0
        var heardAt = Timestamp(nanoseconds: 0)
    }

    struct Source: Hashable, Sendable {
        var interface: String
        var address: IPAddress
    }

    struct PendingKey: Hashable, Sendable {
        var destination: SSDPTransmission.Destination
        var uniqueServiceName: String
        var searchTarget: String
    }

    struct PendingResponse: Sendable {
        var owner: OwnerKey
        var transmission: SSDPTransmission
    }

    /// Bytes of learned text held in all (`SSDPEntry.byteCount`), for hosts and unregistered addresses together.
    public internal(set) var totalBytes = 0
    let maximumTotalBytes: Int

    public init(seed: UInt64, maximumTotalBytes: Int = SSDPRules.maximumTotalBytes) {
        self.jitter = Jitter(state: seed)
        self.maximumTotalBytes = maximumTotalBytes
    }

    /// Sizes the host table for `hosts` hosts (every registered host has an entry; `RecordStore.reserveCapacity`).
    public mutating func reserveCapacity(hosts: Int) { self.hosts.reserveCapacity(hosts) }

    // MARK: - Reading

    /// What the proxy knows the host advertises, in a stable order.
    public func entries(of key: OwnerKey) -> [SSDPEntry] {
        (self.hosts[key]?.learned.entries.values).map { entries in
            entries.sorted {
                ($0.family == .v4 ? 0 : 1, $0.scope == .link ? 0 : 1, $0.uniqueServiceName)
                    < ($1.family == .v4 ? 0 : 1, $1.scope == .link ? 0 : 1, $1.uniqueServiceName)
            }
        } ?? []
    }

    /// The TCP ports of the host's description URLs: a control point opening the server connects there.
    public func wakePorts(of key: OwnerKey) -> Set<UInt16> {
        guard let host = self.hosts[key] else { return [] }
        return Set(host.learned.entries.values.compactMap { $0.locationPort(on: host.addresses) })
    }

    /// Entries held for registered hosts, and for addresses not registered.
    public var entryCount: Int { self.hosts.values.reduce(0) { $0 + $1.learned.entries.count } }
    public var unclaimedEntryCount: Int { self.unclaimed.values.reduce(0) { $0 + $1.entries.count } }

    public func isSpeaking(for key: OwnerKey) -> Bool { self.hosts[key]?.speaking ?? false }

    /// What is known of every registered host, for the copy kept across restarts: without it, a proxy restarted
    /// while a server sleeps could neither answer for it nor wake it on its description port until it
    /// announced again, which a sleeping server never does.
    public var learnedByHost: [OwnerKey: [SSDPEntry]] {
        var result: [OwnerKey: [SSDPEntry]] = [:]
        for (key, host) in self.hosts where !host.learned.entries.isEmpty { result[key] = self.entries(of: key) }
        return result
    }

    /// Entries saved before a restart, for a host registered again from the journal (`registered` first). The
    /// bounds apply as to anything heard.
    public mutating func restore(_ entries: [SSDPEntry], for key: OwnerKey) {
        guard var host = self.hosts[key] else { return }
        let old = host.learned
        for entry in entries
        where Self.isValidType(entry.notificationType) && SSDPLocation(entry.location)?.isUsable == true {
            if !Self.merge(entry, into: &host.learned) { self.statistics.overLimit += 1 }
        }
        guard self.fits(host.learned, replacing: old) else {
            self.statistics.overLimit += 1
            return
        }
        self.put(host, for: key)
        self.revision += 1
    }

    public mutating func nextDeadline() -> Timestamp? {
        var deadline = self.announcements.nextDeadline()
        Timestamp.keepEarlier(self.pending.nextDeadline(), in: &deadline)
        Timestamp.keepEarlier(self.groupSearches.nextDeadline(), in: &deadline)
        return deadline
    }

    // MARK: - Interfaces and hosts

    public mutating func setInterfaces(_ contexts: [InterfaceContext]) {
        self.interfaces = Dictionary(contexts.map { ($0.index, $0) }, uniquingKeysWith: { first, _ in first })
    }

    /// A registration was accepted (or restored): what was heard from its addresses before is now the host's.
    /// With `search`, the host is also asked for everything it advertises (an `ssdp:all` search to its address,
    /// UDA §1.3.2, and one through the group, `SSDPRules.groupSearchInterval`), so that a host whose last
    /// announcement predates the proxy is known too: real hosts register seconds before they sleep, and minidlna
    /// announces every 15 minutes.
    public mutating func registered(
        _ key: OwnerKey, addresses: [IPAddress], search: Bool, now: Timestamp
    ) -> [SSDPTransmission] {
        var host = self.hosts[key] ?? Host(interface: key.interface, addresses: addresses)
        host.addresses = addresses
        for address in addresses {
            let source = Source(interface: key.interface, address: address)
            guard let heard = self.unclaimed[source] else { continue }
            self.putUnclaimed(nil, for: source)
            self.revision += 1
            for entry in heard.entries.values where entry.family == IPFamily(address) {
                if !Self.merge(entry, into: &host.learned) { self.statistics.overLimit += 1 }
            }
        }
        self.put(host, for: key)
        guard search, let context = self.context(named: key.interface) else { return [] }
        var searches: [SSDPTransmission] = []
        for family in Responder.families(of: context) {
            guard let address = addresses.first(where: { IPFamily($0) == family }) else { continue }
            let hostHeader = family == .v4 ? "\(address):\(SSDPRules.port)" : "[\(address)]:\(SSDPRules.port)"
            searches.append(
                SSDPTransmission(
                    destination: .unicast(address: address, port: SSDPRules.port, interfaceIndex: context.index),
                    bytes: Self.search(host: hostHeader)))
            self.statistics.hostSearchesSent += 1
        }
        if self.groupSearches[context.name] == nil {
            let due = self.lastGroupSearch[context.name].map { $0 + SSDPRules.groupSearchInterval } ?? now
            if due <= now {
                searches += self.groupSearch(on: context, now: now)
            } else {
                self.groupSearches.schedule(true, for: context.name, at: due)
            }
        }
        return searches
    }

    /// An `ssdp:all` search through the group of each family the interface has.
    private mutating func groupSearch(on context: InterfaceContext, now: Timestamp) -> [SSDPTransmission] {
        self.lastGroupSearch[context.name] = now
        return Responder.families(of: context).map { family in
            self.statistics.hostSearchesSent += 1
            return SSDPTransmission(
                destination: .multicast(interfaceIndex: context.index, family: family),
                bytes: Self.search(
                    host: family == .v4 ? "239.255.255.250:\(SSDPRules.port)" : "[FF02::C]:\(SSDPRules.port)"))
        }
    }

    static func search(host: String) -> [UInt8] {
        SSDPMessage(
            kind: .search,
            headers: [
                .init("HOST", host), .init("MAN", "\"ssdp:discover\""),
                .init("MX", "\(SSDPRules.registrationSearchWait)"), .init("ST", "ssdp:all"),
            ]
        ).encoded()
    }

    /// The host sleeps: answer for it and announce it from now on, at its own cadence.
    public mutating func speak(for key: OwnerKey, now: Timestamp) {
        guard var host = self.hosts[key], !host.speaking else { return }
        // Entries the host stopped announcing while it was awake (its server went away) are not brought back.
        let stale = host.learned.entries.values.filter { now - $0.refreshedAt > .seconds($0.maximumAge) }
        for entry in stale { Self.remove(entry.key, from: &host.learned) }
        host.speaking = true
        self.put(host, for: key)
        self.speaking[host.interface, default: []].insert(key)
        guard !host.learned.entries.isEmpty else { return }
        // A first set at once (`SSDPRules.firstAnnouncementDelay`), then the host's own cadence.
        self.announcements.schedule(
            true, for: key, at: now + self.jitter.milliseconds(SSDPRules.firstAnnouncementDelay))
    }

    /// The host is awake (or not yet shown asleep): it speaks for itself.
    public mutating func silence(_ key: OwnerKey) {
        guard var host = self.hosts[key], host.speaking else { return }
        host.speaking = false
        self.put(host, for: key)
        self.speaking[host.interface]?.remove(key)
        self.announcements.remove(key)
    }

    /// The registration ended. With `byebye` (a lease that ran out, `forget --goodbyes`), a host the proxy spoke
    /// for is withdrawn as its mDNS records are, with `ssdp:byebye`; never for a hand-back, when the host speaks
    /// again itself and a byebye would make control points drop it. Entries not withdrawn are kept as heard from
    /// its addresses, for its next registration.
    public mutating func removed(_ key: OwnerKey, byebye: Bool) -> [SSDPTransmission] {
        let wasSpeaking = self.hosts[key]?.speaking ?? false
        self.silence(key)
        guard let host = self.hosts[key] else { return [] }
        self.put(nil, for: key)
        if !host.learned.entries.isEmpty { self.revision += 1 }
        if byebye, wasSpeaking, let context = self.context(named: host.interface) {
            // On the group, as the host announced there (`SSDPScope`).
            let entries = host.learned.entries.values.filter { $0.scope == .link }.sorted {
                $0.uniqueServiceName < $1.uniqueServiceName
            }
            self.statistics.byebyesSent += entries.count
            return entries.map { entry in
                SSDPTransmission(
                    destination: .multicast(interfaceIndex: context.index, family: entry.family),
                    bytes: Self.announcement(entry, byebye: true).encoded())
            }
        }
        if !byebye {
            for entry in host.learned.entries.values {
                guard
                    let address = host.addresses.first(where: {
                        IPFamily($0) == entry.family && SSDPScope(of: $0) == entry.scope
                    }) ?? host.addresses.first(where: { IPFamily($0) == entry.family })
                else { continue }
                let source = Source(interface: host.interface, address: address)
                var heard = self.unclaimedSlot(source)
                if Self.merge(entry, into: &heard) { self.putUnclaimed(heard, for: source) }
            }
        }
        return []
    }

    // MARK: - Packets

    /// One datagram on an SSDP socket of a served interface. `owner` is the registered host whose address
    /// `source` is, if any; `destination` tells a multicast search from a unicast one.
    public mutating func receive(
        _ bytes: [UInt8], from source: IPAddress, port: UInt16, destination: IPAddress?, interfaceIndex: Int,
        owner: OwnerKey?, now: Timestamp
    ) -> [SSDPTransmission] {
        self.statistics.received += 1
        guard let context = self.interfaces[interfaceIndex], context.isOnLink(source), !context.isOwnAddress(source),
            port != 0
        else {
            self.statistics.ignored += 1
            return []
        }
        let message: SSDPMessage
        do {
            message = try SSDPMessage(decoding: bytes)
        } catch {
            self.statistics.malformed += 1
            return []
        }
        switch message.kind {
        case .search:
            let multicast = destination.map { $0.isMulticast } ?? true
            return self.answer(message, from: source, port: port, multicast: multicast, context: context, now: now)
        case .notify:
            self.learnAnnouncement(message, from: source, interface: context.name, owner: owner, now: now)
        case .response:
            // Only a response to the proxy's own search arrives unicast; one sent to a group is not SSDP.
            guard destination.map({ !$0.isMulticast }) ?? true else {
                self.statistics.malformed += 1
                return []
            }
            self.learn(
                message, type: message.searchTarget, from: source, interface: context.name, owner: owner,
                announcement: false, now: now)
        }
        return []
    }

    // MARK: - Time

    /// Announcements and delayed search responses that are due.
    public mutating func tick(now: Timestamp) -> [SSDPTransmission] {
        var out: [SSDPTransmission] = []
        for (key, _) in self.announcements.takeDue(now: now) {
            guard let host = self.hosts[key], host.speaking, let context = self.context(named: host.interface) else {
                continue
            }
            // Only what the host announced on the group itself: what it told searchers at its global addresses
            // is not announced (it announces that on FF05::C, which the proxy does not serve).
            let announced = host.learned.entries.values.filter { $0.scope == .link }
            for entry in announced.sorted(by: { $0.uniqueServiceName < $1.uniqueServiceName }) {
                out.append(
                    SSDPTransmission(
                        destination: .multicast(interfaceIndex: context.index, family: entry.family),
                        bytes: Self.announcement(entry, byebye: false).encoded()))
            }
            self.statistics.notifiesSent += announced.count
            if !host.learned.entries.isEmpty {
                self.announcements.schedule(true, for: key, at: now + Self.cadence(host.learned))
            }
        }
        for (name, _) in self.groupSearches.takeDue(now: now) {
            guard let context = self.context(named: name) else { continue }
            out += self.groupSearch(on: context, now: now)
        }
        for (_, response) in self.pending.takeDue(now: now) where self.hosts[response.owner]?.speaking == true {
            out.append(response.transmission)
            self.statistics.responsesSent += 1
        }
        return out
    }
}
