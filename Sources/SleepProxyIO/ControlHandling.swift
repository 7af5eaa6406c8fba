import FoundationEssentials
import SleepProxyControl
import SleepProxyCore
import SleepProxyWire

/// What the admin CLI sees, built on the engine thread from the state it owns.
extension RegistrationEngine {
    /// The daemon's version, shown by `sleepproxyctl status`.
    public static let version = SleepProxyVersion.current

    /// Answers an admin request on the engine thread; changes go through the engine, whose actions (journal
    /// entries first of all) the caller carries out before the reply is sent.
    func handleControl(_ request: ControlRequest, now: Timestamp, actions: inout [EngineAction]) -> ControlResponse {
        guard request.version == ControlProtocol.version else {
            return .failure(
                "sleepproxyctl speaks control protocol \(request.version), this daemon \(ControlProtocol.version): use the sleepproxyctl that came with it"
            )
        }
        switch request.command {
        case .status:
            return ControlResponse(status: self.daemonStatus(now: now))
        case .hosts:
            let hosts = self.engine.registrar.store.owners.values.sorted { $0.key < $1.key }.map {
                self.summary(of: $0, now: now)
            }
            return ControlResponse(hosts: hosts)
        case .host:
            guard let registration = self.find(request.target) else { return self.notFound(request.target) }
            return ControlResponse(host: self.detail(of: registration, now: now))
        case .wake:
            guard let registration = self.find(request.target) else { return self.notFound(request.target) }
            guard self.engine.takeover != nil else {
                return .failure("this daemon runs with --no-takeover: it cannot send magic packets")
            }
            let (started, wakeActions) = self.engine.wake(registration.key, trigger: .administrator, now: now)
            actions += wakeActions
            guard started else {
                return .failure(
                    "\(registration.hostName?.description ?? registration.key.description) was woken less than \(TakeoverRules.wakeHoldoff) ago without answering; try again shortly"
                )
            }
            return ControlResponse(host: self.detail(of: registration, now: now))
        case .forget:
            guard let registration = self.find(request.target) else { return self.notFound(request.target) }
            let summary = self.summary(of: registration, now: now)
            actions += self.engine.forget(registration.key, goodbyes: request.goodbyes == true, now: now)
            return ControlResponse(hosts: [summary])
        case .releaseAll:
            let summaries = self.engine.registrar.store.owners.values.sorted { $0.key < $1.key }.map {
                self.summary(of: $0, now: now)
            }
            let (released, releaseActions) = self.engine.releaseAll(now: now)
            actions += releaseActions
            actions.append(
                .log(
                    .notice,
                    "admin: released all \(released.count) sleeping hosts (woken and forgotten) for decommissioning"))
            return ControlResponse(hosts: summaries)
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

    private func notFound(_ target: String?) -> ControlResponse {
        .failure(
            "no sleeping host named \(target.map { "\"\($0)\"" } ?? "(none given)"); `sleepproxyctl hosts` lists them by name and MAC"
        )
    }

    /// "vm", "vm.local", "VM.local." all mean `vm.local`.
    static func normalisedName(_ text: String) -> String {
        var name = text.lowercased()
        while name.hasSuffix(".") { name.removeLast() }
        if !name.contains(".") { name += ".local" }
        return name
    }

    func find(_ target: String?) -> OwnerRegistration? {
        guard let target, !target.isEmpty else { return nil }
        let owners = self.engine.registrar.store.owners.values.sorted { $0.key < $1.key }
        if let mac = MACAddress(target) {
            return owners.first { $0.key.primaryMAC == mac || $0.owner.wakeMAC == mac }
        }
        let name = Self.normalisedName(target)
        return owners.first { $0.hostName.map { Self.normalisedName($0.description) } == name }
    }

    func summary(of registration: OwnerRegistration, now: Timestamp) -> HostSummary {
        let summary = registration.summary
        let state = HostSummary.State(self.engine.state(of: registration.key) ?? .starting)
        let awake = self.engine.lastAwake(of: registration.key)
        let mac = registration.key.primaryMAC.description
        let lastWake = self.wakeLog.recent.last { $0.mac == mac && $0.kind == .wake }
        return HostSummary(
            name: summary.hostName?.description, mac: mac, interface: registration.key.interface,
            addresses: summary.addresses.map(\.description),
            services: summary.services.map { "\($0.type.labelStrings.prefix(2).joined(separator: ".")):\($0.port)" },
            leaseSeconds: Double((registration.leaseExpiry - now).nanosecondsClamped) / 1e9, state: state,
            lastWake: lastWake,
            lastSeenAwake: awake?.what,
            lastSeenAwakeSecondsAgo: awake.map { Double((now - $0.at).nanosecondsClamped) / 1e9 })
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
            addressStates: self.engine.takeover?.state(of: registration.key)?.addresses.map {
                HostDetail.AddressState(address: $0.0.description, state: HostDetail.AddressState.Phase($0.1))
            },
            upnp: self.engine.ssdp?.entries(of: registration.key).map { entry in
                HostDetail.UPnPEntry(
                    type: entry.notificationType, usn: entry.uniqueServiceName, location: entry.location,
                    server: entry.server, maxAge: entry.maximumAge, bootID: entry.bootID, configID: entry.configID,
                    heardSecondsAgo: Double((now - entry.refreshedAt).nanosecondsClamped) / 1e9)
            })
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
        let statistics = self.engine.registrar.statistics
        var refusals: [String: Int] = [:]
        for (reason, count) in statistics.refused { refusals[reason.rawValue] = count }
        for (problem, count) in statistics.malformed { refusals["malformed-\(problem.rawValue)"] = count }
        let uptime = Date().timeIntervalSince(self.startedAt)
        return DaemonStatus(
            version: Self.version, startedAt: self.startedAt, uptimeSeconds: uptime,
            interfaces: self.servedContexts.map(\.name),
            advertisedName: self.engine.responder?.configuration.instanceLabel,
            hosts: self.engine.registrar.store.hostCount,
            records: self.engine.registrar.store.recordCount, registrationsAccepted: statistics.accepted,
            refusals: refusals,
            queriesAnswered: self.engine.responder?.statistics.answeredQueries ?? 0,
            wakes: self.engine.takeover?.statistics.wakes ?? 0,
            magicPackets: self.engine.takeover?.statistics.magicPackets ?? 0,
            hostsByState: Dictionary(
                uniqueKeysWithValues: HostState.allCases.map {
                    (HostSummary.State($0), self.engine.hostsByState[$0] ?? 0)
                }),
            upnp: self.engine.ssdp.map { ssdp in
                DaemonStatus.UPnPStatus(
                    hosts: ssdp.learnedByHost.count, entries: ssdp.entryCount,
                    responses: ssdp.statistics.responsesSent, announcements: ssdp.statistics.notifiesSent)
            },
            otherProxies: self.engine.takeover.map { takeover in
                self.servedContexts.flatMap { takeover.peers(on: $0.name) }.map { peer in
                    DaemonStatus.OtherProxy(
                        interface: peer.interface, address: peer.address.description, label: peer.label,
                        mac: peer.mac?.description,
                        heardSecondsAgo: Double((now - peer.lastHeard).nanosecondsClamped) / 1e9)
                }
            })
    }
}

extension HostSummary.State {
    /// The engine's state in the control protocol's words.
    init(_ state: HostState) {
        switch state {
        case .starting: self = .starting
        case .asleep: self = .asleep
        case .awake: self = .awake
        case .waking: self = .waking
        case .standby: self = .standby
        }
    }
}

extension HostDetail.AddressState.Phase {
    init(_ phase: Takeover.HostStatus.Phase) {
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
