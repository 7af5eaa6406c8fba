import FoundationEssentials
import SleepProxyControl
import SleepProxyCore
import SleepProxyWire

/// What the admin CLI sees, built on the engine thread from the state it owns.
extension EngineRunner {
    /// The daemon's version, shown by `sleepproxyctl status`.
    public static let version = SleepProxyVersion.current

    /// Answers an admin request on the engine thread; changes go through the engine, whose actions (journal
    /// entries first of all) the caller carries out before the reply is sent.
    func handleControl(_ request: ControlRequest, now: Timestamp, actions: inout [EngineAction]) -> ControlResponse {
        guard request.version == ControlProtocol.version else {
            return .failure(
                "sleepproxyctl speaks control protocol \(request.version), this daemon \(ControlProtocol.version): use the sleepproxyctl that came with it",
                .invalid)
        }
        switch request.command {
        case .status:
            return ControlResponse(status: self.daemonStatus(now: now))
        case .hosts:
            return self.listing(request, now: now)
        case .host:
            guard let registration = self.find(request.target) else { return self.notFound(request.target) }
            return ControlResponse(host: self.detail(of: registration, now: now))
        case .history:
            guard let target = request.target, !target.isEmpty else { return self.notFound(request.target) }
            let mac = self.find(target)?.key.primaryMAC.description ?? MACAddress(target)?.description
            guard let mac, let history = self.dayOf(mac) else {
                return .failure(
                    "no history for \"\(target)\": the proxy has held no host by that name or MAC in the last \(HistoryBook.recordsInAll) records",
                    .notFound)
            }
            return ControlResponse(history: history)
        case .wake:
            guard let registration = self.find(request.target) else { return self.notFound(request.target) }
            guard self.engine.canWake else {
                return .failure("this daemon runs with --no-takeover: it cannot send magic packets")
            }
            actions += self.engine.wake(registration.key, trigger: .administrator, now: now)
            guard self.engine.state(of: registration.key) == .waking else {
                return .failure(
                    "\(registration.hostName?.description ?? registration.key.description) was woken less than \(TakeoverRules.wakeHoldoff) ago without answering; try again shortly",
                    .unavailable)
            }
            return ControlResponse(host: self.detail(of: registration, now: now))
        case .forget:
            guard let registration = self.find(request.target) else { return self.notFound(request.target) }
            let summary = self.summary(of: registration, now: now)
            actions += self.engine.forget(registration.key, goodbyes: request.goodbyes == true, now: now)
            return ControlResponse(hosts: [summary])
        case .sync:
            return self.syncState()
        case .savings:
            return self.savingsReport(month: request.month, now: now)
        case .releaseAll:
            let summaries = self.engine.registrations.values.sorted { $0.key < $1.key }.map {
                self.summary(of: $0, now: now)
            }
            actions += self.engine.releaseAll(now: now)
            return ControlResponse(hosts: summaries)
        case .neighbours:
            guard let neighbours = self.engine.neighbours(now: now) else {
                return .failure(
                    "this daemon runs with --no-takeover: without capturing ARP and neighbour discovery it cannot tell machines apart by MAC"
                )
            }
            var response = ControlResponse()
            let wall = Date()
            response.neighbours = neighbours.map { neighbour in
                NeighbourSummary(
                    interface: neighbour.interface, mac: neighbour.mac.description,
                    addresses: neighbour.addresses.map(\.description), names: neighbour.names.map(\.description),
                    services: neighbour.services.map(\.description),
                    lastHeard: wall.addingTimeInterval(-Double((now - neighbour.lastHeard).nanosecondsClamped) / 1e9),
                    registered: self.engine.registration(neighbour.key).map { !$0.isAdopted } ?? false,
                    adopted: self.engine.adoptedMACs.contains(neighbour.mac))
            }
            return response
        case .adopt, .unadopt, .adopted:
            return self.handleAdoption(request, now: now, actions: &actions)
        case .events:
            var events = self.wakeLog.recent
            if let since = request.since { events = events.filter { $0.time >= since } }
            if let target = request.target {
                let mac = MACAddress(target)?.description
                let name = Self.normalisedName(target)
                events = events.filter { $0.mac == mac || $0.hostName.map(Self.normalisedName) == name }
            }
            return ControlResponse(events: events)
        }
    }

    /// `hosts`: every held host, or the page and filter asked for, in name order (then MAC).
    private func listing(_ request: ControlRequest, now: Timestamp) -> ControlResponse {
        if let offset = request.offset, offset < 0 {
            return .failure("the offset must be 0 or more, not \(offset)", .invalid)
        }
        if let limit = request.limit, !(1...ControlRequest.maximumPageSize).contains(limit) {
            return .failure("a page holds 1 to \(ControlRequest.maximumPageSize) hosts, not \(limit)", .invalid)
        }
        let search = request.search.map { Array($0.lowercased().utf8) }.flatMap { $0.isEmpty ? nil : $0 }
        // A word the engine has no state for (from a newer client) matches no host rather than every host.
        let inState = request.state.map { word in HostState(word).map { self.engine.hosts(in: $0) } ?? [] }
        let owners = self.engine.registrations
        if self.listingTexts.count > 2 * owners.count + 64 {
            self.listingTexts = self.listingTexts.filter { owners[$0.key] != nil }
        }
        var matches: [(name: String, registration: OwnerRegistration)] = []
        matches.reserveCapacity(owners.count)
        for registration in owners.values {
            if let inState, !inState.contains(registration.key) { continue }
            let texts = self.listingText(of: registration)
            if let search, !Self.contains(texts.text, search) { continue }
            matches.append((texts.name, registration))
        }
        matches.sort { ($0.name, $0.registration.key) < ($1.name, $1.registration.key) }
        let start = min(request.offset ?? 0, matches.count)
        let end = request.limit.map { min(start + $0, matches.count) } ?? matches.count
        let lastWakes = self.lastWakes()
        let hosts = matches[start..<end].map { self.summary(of: $0.registration, lastWakes: lastWakes, now: now) }
        return ControlResponse(hosts: hosts, total: matches.count)
    }

    /// Whether `text` holds `part`, byte for byte (both lower case already): String's own `contains` compares
    /// by Unicode rules and cost 2 µs a host, 20 ms a search at 10,000 hosts.
    static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty else { return true }
        guard haystack.count >= needle.count else { return false }
        let first = needle[0]
        for start in 0...(haystack.count - needle.count) where haystack[start] == first {
            var index = 1
            while index < needle.count, haystack[start + index] == needle[index] { index += 1 }
            if index == needle.count { return true }
        }
        return false
    }

    private func listingText(of registration: OwnerRegistration) -> ListingText {
        if let kept = self.listingTexts[registration.key], kept.updatedAt == registration.updatedAt { return kept }
        let name = registration.hostName?.description.lowercased() ?? ""
        let text =
            ([name, registration.key.primaryMAC.description] + registration.addresses.map(\.description))
            .joined(separator: " ").lowercased().utf8
        let made = ListingText(updatedAt: registration.updatedAt, name: name, text: Array(text))
        self.listingTexts[registration.key] = made
        return made
    }

    /// Each host's newest wake in the wake log, by MAC: one pass, instead of a search of the log per host.
    func lastWakes() -> [String: WakeLogEntry] {
        var wakes: [String: WakeLogEntry] = [:]
        for entry in self.wakeLog.recent where entry.kind == .wake { wakes[entry.mac] = entry }
        return wakes
    }

    /// Hosts of the last day the proxy no longer holds, by their history.
    func recentHosts() -> [DaemonStatus.RecentHost] {
        var held = Set<String>()
        for key in self.engine.registrations.keys { held.insert(key.primaryMAC.description) }
        return self.history.recentHosts(
            since: Date().addingTimeInterval(-Self.historyWindow), limit: DaemonStatus.recentHostsLimit,
            isHeld: { held.contains($0) })
    }

    /// How long the status page looks back: a day.
    static let historyWindow: Double = 86_400

    /// A host's last day from the history.
    func dayOf(_ mac: String) -> HostHistory? {
        let now = Date()
        return self.history.history(of: mac, from: now.addingTimeInterval(-Self.historyWindow), to: now)
    }

    private func notFound(_ target: String?) -> ControlResponse {
        .failure(
            "no sleeping host named \(target.map { "\"\($0)\"" } ?? "(none given)"); `sleepproxyctl hosts` lists them by name and MAC",
            .notFound)
    }

    /// "vm", "vm.local", "VM.local." all mean `vm.local`.
    static func normalisedName(_ text: String) -> String {
        var name = text.lowercased()
        while name.hasSuffix(".") { name.removeLast() }
        if !name.contains(".") { name += ".local" }
        return name
    }

    /// The host named by MAC (primary, then wake MAC) or host name; of several (one name on two interfaces), the
    /// first in key order. A primary MAC is looked up directly: sorting every host for each lookup took 2-4 ms of
    /// the engine thread at 10,000 hosts for every host page (sleepproxy-bench status).
    func find(_ target: String?) -> OwnerRegistration? {
        guard let target, !target.isEmpty else { return nil }
        let store = self.engine.registrations
        func first(_ matches: (OwnerRegistration) -> Bool) -> OwnerRegistration? {
            var found: OwnerRegistration? = nil
            for registration in store.values where matches(registration) {
                if found == nil || registration.key < found!.key { found = registration }
            }
            return found
        }
        if let mac = MACAddress(target) {
            let direct = self.engine.servedInterfaces.map(\.name).sorted().lazy.compactMap {
                store[OwnerKey(interface: $0, primaryMAC: mac)]
            }.first
            return direct ?? first { $0.key.primaryMAC == mac || $0.owner.wakeMAC == mac }
        }
        let name = Self.normalisedName(target)
        return first { $0.hostName.map { Self.normalisedName($0.description) } == name }
    }

    func summary(of registration: OwnerRegistration, lastWakes: [String: WakeLogEntry]? = nil, now: Timestamp)
        -> HostSummary
    {
        let summary = registration.summary
        let state = PresenceState(self.engine.state(of: registration.key) ?? .starting)
        let awake = self.engine.lastAwake(of: registration.key)
        let mac = registration.key.primaryMAC.description
        let lastWake = lastWakes.map { $0[mac] } ?? self.wakeLog.recent.last { $0.mac == mac && $0.kind == .wake }
        return HostSummary(
            name: summary.hostName?.description, mac: mac, interface: registration.key.interface,
            addresses: registration.addresses.map(\.description),
            services: summary.services.map { "\($0.type.labelStrings.prefix(2).joined(separator: ".")):\($0.port)" },
            leaseSeconds: Double((registration.leaseExpiry - now).nanosecondsClamped) / 1e9, state: state,
            lastWake: lastWake,
            lastSeenAwake: awake?.what,
            lastSeenAwakeSecondsAgo: awake.map { Double((now - $0.at).nanosecondsClamped) / 1e9 },
            addressStates: self.addressStates(of: registration.key))
    }

    private func addressStates(of key: OwnerKey) -> [HostDetail.AddressState]? {
        self.engine.addressStates(of: key)?.map {
            HostDetail.AddressState(address: $0.0.description, state: HostDetail.AddressState.Phase($0.1))
        }
    }

    func detail(of registration: OwnerRegistration, now: Timestamp) -> HostDetail {
        let mac = registration.key.primaryMAC.description
        return HostDetail(
            summary: self.summary(of: registration, now: now), sequence: Int(registration.owner.sequence),
            wakeMAC: (registration.owner.wakeMAC ?? registration.key.primaryMAC).description,
            hasPassword: registration.owner.password != nil,
            registeredSecondsAgo: Double((now - registration.registeredAt).nanosecondsClamped) / 1e9,
            records: registration.records.map { proxied in
                let record = proxied.record
                return HostDetail.Record(
                    name: record.name.description, type: record.type.description, ttl: record.ttl,
                    unique: record.cacheFlush, data: Self.describe(record.rdata))
            },
            wakeHistory: self.wakeLog.recent.filter { $0.mac == mac },
            addressStates: self.addressStates(of: registration.key),
            upnp: self.engine.upnpEntries(of: registration.key)?.map { entry in
                HostDetail.UPnPEntry(
                    type: entry.notificationType, usn: entry.uniqueServiceName, location: entry.location,
                    server: entry.server, maxAge: entry.maximumAge, bootID: entry.bootID, configID: entry.configID,
                    heardSecondsAgo: Double((now - entry.refreshedAt).nanosecondsClamped) / 1e9)
            },
            history: self.dayOf(mac))
    }

    static func describe(_ rdata: DNSRData) -> String {
        switch rdata {
        case .a(let a): return a.address.description
        case .aaaa(let aaaa): return aaaa.address.description
        case .ptr(let ptr): return ptr.target.description
        case .srv(let srv): return "\(srv.priority) \(srv.weight) \(srv.port) \(srv.target)"
        case .txt(let txt):
            return txt.keyValuePairs.map { pair in
                pair.value.map { "\(pair.key)=\(String(decoding: $0, as: UTF8.self))" } ?? pair.key
            }.joined(separator: " ")
        case .nsec(let nsec): return "\(nsec.nextName) \(nsec.types.map(\.description).joined(separator: " "))"
        default: return "\(rdata.uncompressedBytes.count) bytes"
        }
    }

    func daemonStatus(now: Timestamp) -> DaemonStatus {
        let counts = self.engine.counts
        let statistics = counts.registrations
        var refusals: [String: Int] = [:]
        for (reason, count) in statistics.refused { refusals[reason.rawValue] = count }
        for (problem, count) in statistics.malformed { refusals["malformed-\(problem.rawValue)"] = count }
        // The start as the wall clock reads now: a step of it moves the start with it, never the uptime.
        let uptime = Double((now - self.startedAtBoot).nanosecondsClamped) / 1e9
        return DaemonStatus(
            version: Self.version, startedAt: Date().addingTimeInterval(-uptime), uptimeSeconds: uptime,
            interfaces: self.engine.servedInterfaces.map(\.name), advertisedName: counts.instanceLabel,
            hosts: counts.hosts,
            records: counts.records, registrationsAccepted: statistics.accepted, refusals: refusals,
            queriesAnswered: counts.responder?.answeredQueries ?? 0, wakes: counts.takeover?.wakes ?? 0,
            magicPackets: counts.takeover?.magicPackets ?? 0,
            hostsByState: Dictionary(
                uniqueKeysWithValues: HostState.held.map {
                    (PresenceState($0), self.engine.hostsByState[$0] ?? 0)
                }),
            upnp: self.engine.upnpSummary.map { upnp in
                DaemonStatus.UPnPStatus(
                    hosts: upnp.hosts, entries: upnp.entries, responses: upnp.responses,
                    announcements: upnp.announcements)
            },
            otherProxies: self.engine.otherProxies.map { peers in
                peers.map { peer in
                    DaemonStatus.OtherProxy(
                        interface: peer.interface, address: peer.address.description, label: peer.label,
                        mac: peer.mac?.description,
                        heardSecondsAgo: Double((now - peer.lastHeard).nanosecondsClamped) / 1e9)
                }
            },
            lastDay: self.history.activity(since: Date().addingTimeInterval(-Self.historyWindow)),
            recentHosts: self.recentHosts(),
            lastReload: self.statusLock.withLock { self.status.lastReload },
            warnings: self.statusLock.withLock {
                self.status.warnings + (self.status.journalProblem.map { [$0] } ?? [])
                    + (self.status.mqtt.flatMap { $0.connected ? nil : $0.problem }.map { ["Home Assistant: \($0)"] }
                        ?? [])
            },
            mqtt: self.statusLock.withLock { self.status.mqtt },
            savings: self.statusLock.withLock { self.status.savings })
    }
}

/// The one mapping between the engine's vocabulary (`HostState`, `AddressState`) and the wire's mirrors
/// (`PresenceState`, `HostDetail.AddressState.Phase`): the same words, checked case by case by the compiler here
/// and nowhere else.
extension PresenceState {
    init(_ state: HostState) {
        switch state {
        case .starting: self = .starting
        case .asleep: self = .asleep
        case .awake: self = .awake
        case .waking: self = .waking
        case .standby: self = .standby
        case .handedBack: self = .handedBack
        case .gone: self = .gone
        }
    }
}

extension HostState {
    /// The reverse of `PresenceState(_:)`, derived from it; nil for a word that names no engine state (the request
    /// comes off the wire, and the two enums are checked in one direction only).
    init?(_ state: PresenceState) {
        guard let found = HostState.allCases.first(where: { PresenceState($0) == state }) else { return nil }
        self = found
    }
}

extension HostDetail.AddressState.Phase {
    init(_ phase: AddressState) {
        switch phase {
        case .starting: self = .starting
        case .probing: self = .probing
        case .answering: self = .answering
        case .ownerSeen: self = .ownerSeen
        case .stopped: self = .stopped
        case .standby: self = .standby
        }
    }
}
