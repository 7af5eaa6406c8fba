import SleepProxyWire

/// Responses heard from others (conflicts, duplicate answers) and the proxy's announcements and goodbyes of proxied records.
extension Responder {
    // MARK: - Responses: conflicts and duplicate answers

    mutating func inspectResponse(
        _ message: DNSMessage, from source: IPAddress, context: InterfaceContext, store: RecordStore,
        scope: AnswerScope, now: Timestamp
    ) -> [ResponderAction] {
        var actions: [ResponderAction] = []
        var reported: Set<OwnerKey> = []
        var ownConflict: DNSName? = nil
        let channel = Channel(interfaceIndex: context.index, family: IPFamily(source))
        for record in message.answers + message.additionals where record.type != .opt && record.type != .nsec {
            // RFC 6762 §7.4: another responder multicast an answer we were about to give; ours is redundant.
            if record.ttl > 0, var response = self.pending[channel] {
                let before = response.answers.count
                response.answers.removeAll {
                    $0.record.isIdentical(to: record)
                        && MDNSRules.knownAnswerSuppresses(knownTTL: record.ttl, ourTTL: $0.record.ttl)
                }
                if response.answers.count != before {
                    self.statistics.suppressedAsDuplicate += before - response.answers.count
                    self.pending[channel] = response
                }
            }
            if record.name == OwnAdvertisement.serviceType, case .ptr(let pointer) = record.rdata,
                let label = pointer.target.labelStrings.first, !context.isOwnAddress(source)
            {
                // Announcements and answers carry the instance's SRV beside the PTR: its port takes registrations.
                let port = (message.answers + message.additionals).lazy.compactMap { other -> UInt16? in
                    guard other.name == pointer.target, case .srv(let srv) = other.rdata else { return nil }
                    return srv.port
                }.first
                actions.append(
                    .proxyAdvertised(
                        label: label, port: port, ttl: record.ttl, from: source, interfaceIndex: context.index))
            }
            guard record.ttl > 0 else { continue }  // A goodbye claims nothing.
            // RFC 6762 §9: only unique records can conflict, so only hosts holding a unique record at the name are
            // looked at: a response for a shared name (a service type every host registers) costs one lookup.
            let held = self.heldRecords(
                named: record.name, context: context, store: store, scope: scope, includeUnverified: true,
                uniqueOnly: true)
            // RFC 6762 §9: identical is no conflict.
            if held.isEmpty || held.contains(where: { $0.record.isIdentical(to: record) }) { continue }
            for answer in held
            where answer.record.cacheFlush && answer.record.type == record.type
                && answer.record.rrclass == record.rrclass
            {
                if let owner = answer.owner {
                    if reported.insert(owner).inserted {
                        self.statistics.conflicts += 1
                        actions.append(.conflict(owner, record: record, from: source))
                    }
                } else {
                    ownConflict = record.name
                }
            }
            // RFC 6762 §8.1: while probing, any record of the name in a response is a conflict, whatever its type.
            if ownConflict == nil, let advertisement = self.own[context.index], advertisement.isProbing,
                advertisement.records.contains(where: { $0.cacheFlush && $0.name == record.name })
            {
                ownConflict = record.name
            }
            if ownConflict != nil { break }
        }
        if let name = ownConflict { actions += self.rename(conflictingName: name, now: now) }
        return actions
    }

    /// RFC 6762 §9: a conflicting name is changed and probed again, on every interface (one name everywhere).
    mutating func rename(conflictingName: DNSName, now: Timestamp) -> [ResponderAction] {
        self.recentConflicts = self.recentConflicts.filter { now - $0 < .seconds(10) } + [now]
        if conflictingName == OwnAdvertisement.hostName(self.configuration.hostLabel) {
            self.configuration.hostLabel = OwnAdvertisement.renamedHost(self.configuration.hostLabel)
        } else {
            self.configuration.instanceLabel = OwnAdvertisement.renamedInstance(self.configuration.instanceLabel)
        }
        self.statistics.renames += 1
        // RFC 6762 §8.1: after 15 conflicts in ten seconds, wait five seconds before probing again.
        let delay =
            self.recentConflicts.count >= MDNSRules.conflictStormCount
            ? MDNSRules.conflictStormDelay : self.jitter.milliseconds(MDNSRules.initialProbeDelay)
        for (index, var advertisement) in self.own {
            advertisement.records = OwnAdvertisement.records(
                for: advertisement.context, instanceLabel: self.configuration.instanceLabel,
                hostLabel: self.configuration.hostLabel,
                port: self.configuration.registrationPort)
            advertisement.phase = .probing(sent: 0)
            advertisement.next = now + delay
            self.own[index] = advertisement
        }
        return [.renamed(instanceLabel: self.configuration.instanceLabel, hostLabel: self.configuration.hostLabel)]
    }

    // MARK: - Announcements and goodbyes of proxied records

    mutating func runAnnouncements(store: RecordStore, now: Timestamp, limit: Int) -> [ResponderAction] {
        var actions: [ResponderAction] = []
        for (key, var announcement) in self.announcements.takeDue(now: now, limit: limit) {
            guard let context = self.own[announcement.interfaceIndex]?.context,
                let registration = store[announcement.owner]
            else { continue }
            let current =
                announcement.records?.filter { record in
                    registration.records.contains { $0.record.isIdentical(to: record) }
                } ?? registration.records.map(\.record).filter(Self.isAnnounced)
            guard !current.isEmpty else { continue }
            // docs/protocol.md §4.2 / RFC 6762 §8.3: the first announcement of unique records carries their NSEC.
            let nsecs =
                announcement.sent == 0
                ? Self.nsecs(
                    for: registration.records.map(\.record).filter { record in
                        record.cacheFlush && current.contains { $0.name == record.name }
                    }) : []
            actions += self.transmitEverywhere(context: context, answers: current, additionals: nsecs)
            self.noteMulticast(current, interfaceIndex: announcement.interfaceIndex, context: context, now: now)
            announcement.sent += 1
            if announcement.sent < MDNSRules.announcementCount {
                announcement.next = now + MDNSRules.announcementInterval
                if announcement.records != nil { announcement.records = current }
                self.announcements.schedule(announcement, for: key, at: announcement.next)
            }
        }
        return actions
    }

    mutating func schedule(_ announcement: Announcement) {
        // Everything (nil) is filed as unique: it replaces both kinds.
        let unique = announcement.records?.contains(where: \.cacheFlush) ?? true
        self.announcements.schedule(
            announcement, for: AnnouncementKey(owner: announcement.owner, unique: unique), at: announcement.next)
    }

    /// Whether a proxied record is ever announced: reverse-mapping PTRs are only answered, and keepalive records
    /// are the proxy's own business (docs/protocol.md §6).
    static func isAnnounced(_ record: DNSResourceRecord) -> Bool {
        !Self.isReverseMapping(record)
            && !ProxiedRecord(record: record, registeredAt: Timestamp(nanoseconds: 0)).isKeepalive
    }

    mutating func cancelAnnouncements(of key: OwnerKey) {
        self.announcements.remove(AnnouncementKey(owner: key, unique: false))
        self.announcements.remove(AnnouncementKey(owner: key, unique: true))
    }

    mutating func runGoodbyes(store: RecordStore, now: Timestamp, limit: Int) -> [ResponderAction] {
        var actions: [ResponderAction] = []
        for (key, var goodbye) in self.goodbyes.takeDue(now: now, limit: limit) {
            guard let context = self.own[goodbye.interfaceIndex]?.context else { continue }
            // A record another host (or the proxy itself) still holds must not be flushed from caches: the
            // `_services._dns-sd._udp` PTRs most hosts register are the usual case.
            let own = self.own[goodbye.interfaceIndex]?.records ?? []
            let withdrawn = goodbye.records.filter { record in
                !store.holdsIdentical(record, on: context.name)
                    && !own.contains {
                        $0.name == record.name && $0.rrclass == record.rrclass && $0.rdata == record.rdata
                    }
            }
            if !withdrawn.isEmpty {
                actions += self.transmitEverywhere(
                    context: context, answers: withdrawn.map { self.goodbyeCopy($0) }, additionals: [])
            }
            goodbye.sent += 1
            goodbye.records = withdrawn
            if goodbye.sent < MDNSRules.goodbyeCount, !withdrawn.isEmpty {
                goodbye.next = now + MDNSRules.goodbyeInterval
                self.goodbyes.schedule(goodbye, for: key, at: goodbye.next)
            }
        }
        return actions
    }

    func goodbyeCopy(_ record: DNSResourceRecord) -> DNSResourceRecord {
        var copy = record
        copy.ttl = 0
        return copy
    }
}
