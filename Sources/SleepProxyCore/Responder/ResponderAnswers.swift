import SleepProxyWire

/// Finding answers, their additional records and negative answers, and packing them into packets.
extension Responder {
    /// Every record held at `name` on the interface that `scope` admits: the sleeping hosts' and the proxy's own
    /// (only once probing has finished, unless `includeUnverified`). `uniqueOnly` leaves out hosts that hold only
    /// shared records there (`RecordStore.Holders`).
    func heldRecords(
        named name: DNSName, context: InterfaceContext, store: RecordStore, scope: AnswerScope,
        includeUnverified: Bool, includeSilenced: Bool = false, uniqueOnly: Bool = false
    ) -> [Answer] {
        var result: [Answer] = []
        let silenced = includeSilenced ? [] : self.silenced
        let everyone = scope.isEveryone
        for (owner, record) in store.records(named: name, on: context.name, uniqueOnly: uniqueOnly)
        where (everyone || scope.admits(owner)) && (silenced.isEmpty || !silenced.contains(owner)) {
            result.append(Answer(record: record.record, owner: owner))
        }
        if scope.admitsOwn, let advertisement = self.own[context.index],
            includeUnverified || advertisement.isEstablished
        {
            for record in advertisement.records where record.name == name {
                result.append(Answer(record: record, owner: nil))
            }
        }
        return result
    }

    /// The answers to a set of questions after known-answer suppression (RFC 6762 §7.1), with the NSECs owed
    /// for names the proxy owns uniquely but lacking the asked type (RFC 6762 §6.1). Identical records from
    /// several owners appear once (docs/protocol.md §4.1 step 6).
    mutating func collectAnswers(
        questions: [DNSQuestion], knownAnswers: [DNSResourceRecord], context: InterfaceContext, store: RecordStore,
        scope: AnswerScope
    ) -> (answers: [(question: DNSQuestion, answer: Answer)], negatives: [Answer]) {
        var answers: [(question: DNSQuestion, answer: Answer)] = []
        var negatives: [Answer] = []
        var seen = RecordDeduplicator()
        let known = KnownAnswers(knownAnswers)
        for question in questions where question.qclass == .in || question.qclass == .any {
            let held = self.heldRecords(
                named: question.name, context: context, store: store, scope: scope, includeUnverified: false)
            guard !held.isEmpty else { continue }
            var matched = false
            for answer in held where question.type == .any || answer.record.type == question.type {
                matched = true
                if known.suppresses(answer.record) {
                    self.statistics.suppressedByKnownAnswer += 1
                    continue
                }
                if seen.insert(answer.record) { answers.append((question, answer)) }
            }
            if !matched {
                let unique = held.filter(\.record.cacheFlush)
                for nsec in Self.nsecs(for: unique.map(\.record)) where seen.insert(nsec) {
                    negatives.append(Answer(record: nsec, owner: unique.first?.owner))
                }
            }
        }
        return (answers, negatives)
    }

    /// Additional records (RFC 6763 §12, RFC 6762 §6.1 via docs/protocol.md §8): a PTR brings its target's SRV and
    /// TXT, an SRV its target's addresses, an address record the other family's; a uniquely owned host name
    /// lacking one family gets an NSEC saying so. Records already in `answers` are left out.
    ///
    /// Address records of `family` come first: some resolvers (avahi's) take the first address they see.
    /// `answers`, their additionals and `extra` (negative answers), packed into as many responses as they need
    /// (RFC 6762 §17), each counted and addressed to `destination`.
    mutating func responses(
        _ answers: [DNSResourceRecord], extra: [DNSResourceRecord], to destination: MDNSTransmission.Destination,
        context: InterfaceContext, store: RecordStore, scope: AnswerScope, family: IPFamily
    ) -> [(action: ResponderAction, message: DNSMessage)] {
        let additionals =
            self.additionals(for: answers, context: context, store: store, scope: scope, family: family) + extra
        return Self.pack(answers: answers, additionals: additionals, limit: MDNSRules.maximumResponsePayload).map {
            message, bytes in
            self.statistics.packetsSent += 1
            return (.transmit(MDNSTransmission(destination: destination, message: message, bytes: bytes)), message)
        }
    }

    func additionals(
        for answers: [DNSResourceRecord], context: InterfaceContext, store: RecordStore, scope: AnswerScope,
        family: IPFamily
    ) -> [DNSResourceRecord] {
        var seen = RecordDeduplicator()
        for answer in answers { _ = seen.insert(answer) }
        var result: [DNSResourceRecord] = []
        var hosts: [(name: DNSName, skip: DNSRecordType?)] = []
        func held(_ name: DNSName) -> [Answer] {
            self.heldRecords(named: name, context: context, store: store, scope: scope, includeUnverified: false)
        }
        for answer in answers {
            switch answer.rdata {
            case .ptr(let ptr) where !Self.isReverseMapping(answer):
                for record in held(ptr.target) where record.record.type == .srv || record.record.type == .txt {
                    if seen.insert(record.record) { result.append(record.record) }
                    if case .srv(let srv) = record.record.rdata { hosts.append((srv.target, nil)) }
                }
            case .srv(let srv):
                hosts.append((srv.target, nil))
            case .a:
                hosts.append((answer.name, .a))
            case .aaaa:
                hosts.append((answer.name, .aaaa))
            default:
                break
            }
        }
        var visited: [DNSName] = []
        for (name, skip) in hosts where !visited.contains(name) {
            visited.append(name)
            let preferred: DNSRecordType = family == .v4 ? .a : .aaaa
            let records = held(name).sorted {
                ($0.record.type == preferred ? 0 : 1) < ($1.record.type == preferred ? 0 : 1)
            }
            // Over IPv6, additional A records are left out (they stay answerable when asked for): a resolver that
            // takes the first address it sees would otherwise report an IPv4 address for an IPv6 lookup. avahi
            // behaves the same way by default (publish-a-on-ipv6=no); AAAA over IPv4 stays, as avahi's does.
            for record in records
            where (record.record.type == .a || record.record.type == .aaaa) && record.record.type != skip
                && !(family == .v6 && record.record.type == .a)
            {
                if seen.insert(record.record) { result.append(record.record) }
            }
            let hasBoth =
                records.contains { $0.record.cacheFlush && $0.record.type == .a }
                && records.contains { $0.record.cacheFlush && $0.record.type == .aaaa }
            if !hasBoth, records.contains(where: \.record.cacheFlush) {
                let unique = records.filter(\.record.cacheFlush).map(\.record)
                for nsec in Self.nsecs(for: unique) where seen.insert(nsec) { result.append(nsec) }
            }
        }
        return result
    }

    /// RFC 6762 §6.1: one NSEC per uniquely owned name, naming itself as next, listing the types held there;
    /// cache-flush set, the TTL of the records it speaks for.
    static func nsecs(for uniqueRecords: [DNSResourceRecord]) -> [DNSResourceRecord] {
        // Plain loops over a handful of records: this runs for many answers, and sets and closures cost more than
        // the scans.
        var result: [DNSResourceRecord] = []
        var done: [DNSName] = []
        for first in uniqueRecords where !done.contains(first.name) {
            done.append(first.name)
            var types: [DNSRecordType] = []
            var ttl = UInt32.max
            for record in uniqueRecords where record.name == first.name {
                let type = record.type
                if type != .nsec && type != .opt && !types.contains(type) { types.append(type) }
                ttl = min(ttl, record.ttl)
            }
            types.sort { $0.rawValue < $1.rawValue }
            result.append(
                DNSResourceRecord(
                    name: first.name, cacheFlush: true, ttl: ttl,
                    rdata: .nsec(NSECRecord(nextName: first.name, types: types))))
        }
        return result
    }

    /// The question names whose probe (authority section) is identical to what we hold: our own probe looped
    /// back, or a woken host re-probing the very records we hold for it. docs/protocol.md §8: not answered. The
    /// sleeping hosts whose records those are come back too: a host probing its own names is awake (Apple's
    /// proxy never sends probes for the records it holds, so no other proxy sends these either).
    func identicalProbeNames(_ message: DNSMessage, context: InterfaceContext, store: RecordStore) -> (
        names: Set<DNSName>, owners: Set<OwnerKey>
    ) {
        guard !message.authorities.isEmpty else { return ([], []) }
        // Grouped once by name: a packet can carry hundreds of questions and proposed records.
        var proposedByName: [DNSName: [DNSResourceRecord]] = [:]
        for record in message.authorities { proposedByName[record.name, default: []].append(record) }
        var names: Set<DNSName> = []
        var owners: Set<OwnerKey> = []
        for (name, proposed) in proposedByName where message.questions.contains(where: { $0.name == name }) {
            let held = self.heldRecords(
                named: name, context: context, store: store, scope: .everyone, includeUnverified: true,
                includeSilenced: true)
            let matches = proposed.map { record in held.filter { $0.record.isIdentical(to: record) } }
            guard matches.allSatisfy({ !$0.isEmpty }) else { continue }
            names.insert(name)
            // Unique records only: a shared PTR that many hosts hold says nothing about which one is probing.
            for (record, holders) in zip(proposed, matches) where record.cacheFlush {
                for holder in holders { if let owner = holder.owner { owners.insert(owner) } }
            }
        }
        return (names, owners)
    }

    // MARK: - Answering multicast-port queries (RFC 6762 §5.4, §5.5, §6)

    mutating func answer(
        questions: [DNSQuestion], knownAnswers: [DNSResourceRecord], source: QuerySource, destination: IPAddress,
        context: InterfaceContext,
        store: RecordStore, scope: AnswerScope, delayed: Bool, probing: Bool, now: Timestamp
    ) -> [ResponderAction] {
        let (answers, negatives) = self.collectAnswers(
            questions: questions, knownAnswers: knownAnswers, context: context, store: store, scope: scope)
        guard !answers.isEmpty || !negatives.isEmpty else { return [] }
        self.statistics.answeredQueries += 1
        // docs/waking.md §3: an answer that tells the querier about a sleeping host (a browse answer carries the
        // instance's SRV, TXT and addresses as additionals, and apps resolve from that) vouches for its next
        // connection, as a resolve question does. Suppressed answers are not counted: a cache that already holds
        // them is refreshing, not looking.
        var vouched: [OwnerKey] = []
        for (_, answer) in answers {
            if let owner = answer.owner, !vouched.contains(owner) { vouched.append(owner) }
        }
        let resolved: [ResponderAction] = vouched.map { .resolved($0, by: source.address) }
        let channel = Channel(interfaceIndex: context.index, family: IPFamily(source.address))
        // RFC 6762 §5.5: a query sent to our unicast address is answered by unicast.
        let direct: Bool
        switch destination {
        case .v4(let v4): direct = !v4.isMulticast
        case .v6(let v6): direct = !v6.isMulticast
        }
        var unicast: [DNSResourceRecord] = []
        var multicast: [Answer] = []
        for (question, answer) in answers {
            if direct {
                unicast.append(answer.record)
            } else if question.unicastResponse,
                let last = self.lastMulticast[
                    MulticastKey(channel: channel, name: answer.record.name, rdata: answer.record.rdata)],
                now - last < MDNSRules.quarterTTL(answer.record.ttl)
            {
                // RFC 6762 §5.4: QU is honoured when the record was multicast within a quarter of its TTL;
                // otherwise the answer is multicast so that every cache on the link refreshes.
                unicast.append(answer.record)
            } else {
                multicast.append(answer)
            }
        }
        let wantsUnicast = direct || questions.contains(where: \.unicastResponse)
        var actions: [ResponderAction] = []
        if !unicast.isEmpty || (wantsUnicast && multicast.isEmpty && !negatives.isEmpty) {
            actions += self.responses(
                unicast, extra: multicast.isEmpty ? negatives.map(\.record) : [],
                to: .unicast(address: source.address, port: source.port, interfaceIndex: context.index),
                context: context, store: store, scope: scope, family: channel.family
            ).map(\.action)
        }
        if !multicast.isEmpty || (!wantsUnicast && !negatives.isEmpty) {
            // RFC 6762 §6: unique answers go at once, shared ones after 20–120 ms; a held TC query already waited.
            let allUnique = multicast.allSatisfy(\.record.cacheFlush)
            let delay: Duration = delayed || allUnique ? .zero : self.jitter.milliseconds(MDNSRules.sharedAnswerDelay)
            var response = self.pending[channel] ?? PendingResponse(deadline: now + delay)
            if response.answers.isEmpty && response.negatives.isEmpty { response.deadline = now + delay }
            response.deadline = min(response.deadline, now + delay)
            var seen = RecordDeduplicator()
            for answer in response.answers { _ = seen.insert(answer.record) }
            for answer in multicast where seen.insert(answer.record) { response.answers.append(answer) }
            for negative in negatives where seen.insert(negative.record) { response.negatives.append(negative) }
            if probing { response.probeDefence = true }
            self.pending[channel] = response
        }
        return resolved + actions
    }

    /// Sends the multicast responses that are due, holding back any record multicast less than a second ago
    /// (RFC 6762 §6.2; 250 ms when defending against a probe) and dropping answers whose owner went away.
    mutating func flushPending(store: RecordStore, now: Timestamp) -> [ResponderAction] {
        var actions: [ResponderAction] = []
        for (channel, response) in self.pending where response.deadline <= now {
            guard let advertisement = self.own[channel.interfaceIndex],
                Self.families(of: advertisement.context).contains(channel.family)
            else {
                self.pending[channel] = nil
                continue
            }
            let context = advertisement.context
            func stillHeld(_ answer: Answer) -> Bool {
                if let owner = answer.owner {
                    guard let registration = store[owner] else { return false }
                    return answer.record.type == .nsec
                        || registration.records.contains { $0.record.isIdentical(to: answer.record) }
                }
                return advertisement.isEstablished
                    && (answer.record.type == .nsec
                        || advertisement.records.contains { $0.isIdentical(to: answer.record) })
            }
            let limit = response.probeDefence ? MDNSRules.probeDefenceRateLimit : MDNSRules.multicastRateLimit
            var ready: [DNSResourceRecord] = []
            var later = PendingResponse(deadline: now + limit)
            for answer in response.answers where stillHeld(answer) {
                if let last = self.lastMulticast[
                    MulticastKey(channel: channel, name: answer.record.name, rdata: answer.record.rdata)],
                    now - last < limit
                {
                    later.answers.append(answer)
                    later.deadline = min(later.deadline, last + limit)
                } else {
                    ready.append(answer.record)
                }
            }
            let negatives = response.negatives.filter(stillHeld).map(\.record)
            if !ready.isEmpty || !negatives.isEmpty {
                let sent = self.responses(
                    ready, extra: negatives,
                    to: .multicast(interfaceIndex: channel.interfaceIndex, family: channel.family),
                    context: context, store: store, scope: .everyone, family: channel.family)
                for (action, message) in sent {
                    actions.append(action)
                    for record in message.answers + message.additionals {
                        self.stamp(MulticastKey(channel: channel, name: record.name, rdata: record.rdata), now: now)
                    }
                }
            }
            self.pending[channel] = later.answers.isEmpty ? nil : later
        }
        return actions
    }

}
