import SleepProxyWire

/// Receiving: a packet decoded once, then answered or learned from (RFC 6762 §6, §7, §8, §9).
extension Responder {
    /// One mDNS packet received on `interfaceIndex` from `source`:`sourcePort`, sent to `destination` (the group
    /// or one of the proxy's addresses, from packet info): decoded, then handled within `scope` (by default every
    /// host). The engine decodes and handles in two steps, deciding hand-backs in between
    /// (`ProxyEngine.receiveMDNS`).
    public mutating func receive(
        _ bytes: [UInt8], from source: IPAddress, port sourcePort: UInt16, destination: IPAddress?, interfaceIndex: Int,
        scope: AnswerScope = .everyone, store: RecordStore, now: Timestamp
    ) -> [ResponderAction] {
        guard
            let packet = self.decode(
                bytes, from: source, port: sourcePort, destination: destination, interfaceIndex: interfaceIndex)
        else { return [] }
        return self.receive(packet, scope: scope, store: store, now: now)
    }

    /// The packet as mDNS, or nil for what the responder does not take (counted): not on a served interface, from
    /// off the link, not a DNS message, not a standard query or response.
    public mutating func decode(
        _ bytes: [UInt8], from source: IPAddress, port sourcePort: UInt16, destination: IPAddress?, interfaceIndex: Int
    ) -> ReceivedMDNS? {
        guard let context = self.own[interfaceIndex]?.context else { return nil }
        // RFC 6762 §11: only on-link peers (NIO cannot report the received TTL, so the source decides).
        guard context.isOnLink(source) else {
            self.statistics.offLink += 1
            return nil
        }
        let message: DNSMessage
        do {
            message = try DNSMessage(decoding: bytes)
        } catch {
            self.statistics.malformed += 1
            return nil
        }
        // RFC 6762 §18.3: only standard queries (and their responses) are mDNS; anything else is ignored.
        guard message.flags.opcode == .query else { return nil }
        return ReceivedMDNS(
            message: message, source: source, port: sourcePort, destination: destination,
            interfaceIndex: interfaceIndex, context: context, size: bytes.count)
    }

    /// A decoded packet handled: answered, or learned from, within `scope` (`AnswerScope`).
    public mutating func receive(
        _ packet: ReceivedMDNS, scope: AnswerScope, store: RecordStore, now: Timestamp
    ) -> [ResponderAction] {
        let (message, source, sourcePort, context) = (packet.message, packet.source, packet.port, packet.context)
        let (interfaceIndex, destination) = (packet.interfaceIndex, packet.destination)
        var actions: [ResponderAction] = []
        if message.flags.isResponse {
            // RFC 6762 §6: responses not from port 5353 are ignored (§6.7: they are no mDNS responses).
            guard sourcePort == MDNSRules.port else { return actions }
            self.statistics.responsesSeen += 1
            actions += self.inspectResponse(
                message, from: source, context: context, store: store, scope: scope, now: now)
            return actions
        }

        self.statistics.queries += 1
        actions += self.resolves(message, from: source, context: context, store: store, scope: scope)
        let querySource = QuerySource(address: source, port: sourcePort, interfaceIndex: interfaceIndex)
        let legacy = sourcePort != MDNSRules.port
        if legacy {
            self.statistics.legacyQueries += 1
            actions += self.answerLegacy(
                message, source: querySource, context: context, store: store, scope: scope)
            return actions
        }
        actions += self.checkSimultaneousProbe(message, context: context, now: now)

        // RFC 6762 §7.2: a query with TC, or a continuation of one, waits for the rest of its known answers. A
        // question to one host's address is answered at once with what it carries: a held query has no scope.
        if scope.only == nil, var query = self.held[querySource] {
            guard self.heldBytes + packet.size <= MDNSRules.maximumHeldBytes else { return actions }
            query.questions += message.questions.prefix(max(0, MDNSRules.maximumKnownAnswers - query.questions.count))
            query.knownAnswers += message.answers.prefix(
                max(0, MDNSRules.maximumKnownAnswers - query.knownAnswers.count))
            query.bytes += packet.size
            self.heldBytes += packet.size
            self.held[querySource] = query
            return actions
        }
        if message.flags.isTruncated, scope.only == nil {
            guard !message.questions.isEmpty, self.held.count < MDNSRules.maximumHeldQueries,
                self.heldBytes + packet.size <= MDNSRules.maximumHeldBytes
            else { return actions }
            self.held[querySource] = HeldQuery(
                deadline: now + self.jitter.milliseconds(MDNSRules.truncatedQueryDelay), bytes: packet.size,
                questions: message.questions, knownAnswers: message.answers, destination: destination ?? .v4(.mdnsGroup)
            )
            self.heldBytes += packet.size
            return actions
        }
        let (skipped, probingOwners) = self.identicalProbeNames(message, context: context, store: store)
        for owner in probingOwners.sorted(by: { $0 < $1 }) { actions.append(.ownerProbing(owner)) }
        let questions = message.questions.filter { !skipped.contains($0.name) }
        guard !questions.isEmpty else { return actions }
        actions += self.answer(
            questions: questions, knownAnswers: message.answers, source: querySource,
            destination: destination ?? .v4(.mdnsGroup),
            context: context, store: store, scope: scope, delayed: false, probing: !message.authorities.isEmpty,
            now: now)
        return actions
    }

    /// The sleeping hosts whose names the query resolves (not browses: a PTR question is every browser's, and
    /// says nothing about a wish to connect), one action each. Asked whether or not an answer is suppressed:
    /// a querier that knows the answer is still resolving.
    private func resolves(
        _ message: DNSMessage, from source: IPAddress, context: InterfaceContext, store: RecordStore,
        scope: AnswerScope
    ) -> [ResponderAction] {
        var owners: [OwnerKey] = []
        for question in message.questions
        where question.type == .srv || question.type == .txt || question.type == .a || question.type == .aaaa
            || question.type == .any
        {
            for owner in store.uniqueHolders(of: question.name, on: context.name)
            where !owners.contains(owner) && !self.silenced.contains(owner) && scope.admits(owner) {
                owners.append(owner)
            }
        }
        return owners.map { .resolved($0, by: source) }
    }
}
