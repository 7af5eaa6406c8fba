import SleepProxyWire

/// Legacy unicast answers (RFC 6762 §6.7) and packing answers into packets.
extension Responder {
    // MARK: - Legacy unicast (RFC 6762 §6.7)

    /// A query from a port other than 5353: a one-shot resolver. Answered at once, by unicast to its address and
    /// port, echoing ID and questions, with TTLs of at most 10 s and no cache-flush bits.
    mutating func answerLegacy(
        _ query: DNSMessage, source: QuerySource, context: InterfaceContext, store: RecordStore, scope: AnswerScope
    ) -> [ResponderAction] {
        // RFC 6891 §6.2.5: the querier's advertised payload size, never below 512 (RFC 1035 §4.2.1).
        var limit = MDNSRules.legacyPayloadWithoutEDNS
        if let size = query.opt?.ednsHeader?.udpPayloadSize {
            limit = min(DNSMessage.maximumSize, max(limit, Int(size)))
        }
        var cacheKey: LegacyAnswerCache.Key? = nil
        if scope.isEveryone, query.questions.count == 1, query.answers.isEmpty, query.authorities.isEmpty,
            query.additionals.allSatisfy({ $0.type == .opt }), query.ednsOptions?.options.isEmpty ?? true
        {
            self.legacyCache.validate(store: store, ownVersion: self.ownVersion)
            let key = LegacyAnswerCache.Key(
                interfaceIndex: context.index, question: query.questions[0], family: IPFamily(source.address),
                limit: limit)
            if let (message, bytes) = self.legacyCache.response(for: key, id: query.id) {
                self.statistics.answeredQueries += 1
                self.statistics.packetsSent += 1
                return [
                    .transmit(
                        MDNSTransmission(
                            destination: .unicast(
                                address: source.address, port: source.port, interfaceIndex: context.index),
                            message: message, bytes: bytes))
                ]
            }
            cacheKey = key
        }
        let actions = self.buildLegacyAnswer(
            query, limit: limit, source: source, context: context, store: store, scope: scope)
        if let key = cacheKey, actions.count == 1, case .transmit(let transmission) = actions[0] {
            self.legacyCache.insert(transmission.message, bytes: transmission.bytes, for: key)
        }
        return actions
    }

    private mutating func buildLegacyAnswer(
        _ query: DNSMessage, limit: Int, source: QuerySource, context: InterfaceContext, store: RecordStore,
        scope: AnswerScope
    ) -> [ResponderAction] {
        let (answers, negatives) = self.collectAnswers(
            questions: query.questions, knownAnswers: query.answers, context: context, store: store, scope: scope)
        guard !answers.isEmpty || !negatives.isEmpty else { return [] }
        self.statistics.answeredQueries += 1
        func legacy(_ record: DNSResourceRecord) -> DNSResourceRecord {
            var copy = record
            copy.cacheFlush = false
            copy.ttl = min(copy.ttl, MDNSRules.legacyUnicastMaximumTTL)
            return copy
        }
        let records = answers.map(\.answer.record)
        let extra =
            self.additionals(
                for: records, context: context, store: store, scope: scope, family: IPFamily(source.address))
            + negatives.map(\.record)
        var response = DNSMessage(
            id: query.id, flags: DNSHeaderFlags(response: true, authoritative: true), questions: query.questions,
            answers: records.map(legacy), additionals: extra.map(legacy))
        var bytes = response.encoded(options: .mdns)
        if bytes.count > limit {
            // Additional records are optional: drop them first, without TC.
            response.additionals = []
            bytes = response.encoded(options: .mdns)
        }
        if bytes.count > limit {
            // RFC 6762 §6.7 / RFC 1035 §4.1.1: the answers that fit, with TC. Filled from upper-bound sizes in one pass (a
            // query with hundreds of questions must not cost one encoding per dropped answer).
            var size = Self.headerLength + response.questions.reduce(0) { $0 + $1.name.wireLength + 4 }
            var kept = 0
            for answer in response.answers {
                size += answer.uncompressedWireLength
                if size > limit { break }
                kept += 1
            }
            response.answers.removeSubrange(kept...)
            response.flags.isTruncated = true
            bytes = response.encoded(options: .mdns)
        }
        self.statistics.packetsSent += 1
        return [
            .transmit(
                MDNSTransmission(
                    destination: .unicast(address: source.address, port: source.port, interfaceIndex: context.index),
                    message: response, bytes: bytes))
        ]
    }

    // MARK: - Packets

    /// Answers and additionals in as few response packets as fit `limit` bytes each (RFC 6762 §17); additional
    /// records that fit nowhere are left out (the querier can ask for them), a single oversized answer goes alone.
    /// RFC 1035 §4.1.1.
    static let headerLength = 12

    static func pack(answers: [DNSResourceRecord], additionals: [DNSResourceRecord], limit: Int) -> [(
        DNSMessage, [UInt8]
    )] {
        let flags = DNSHeaderFlags(response: true, authoritative: true)
        let whole = DNSMessage(flags: flags, answers: answers, additionals: additionals)
        let bytes = whole.encoded(options: .mdns)
        if bytes.count <= limit { return [(whole, bytes)] }
        // Sizes without compression bound the real ones from above, so no packet overflows.
        var messages: [DNSMessage] = []
        var current = DNSMessage(flags: flags)
        var size = Self.headerLength
        for answer in answers {
            let length = answer.uncompressedWireLength
            if size + length > limit, !current.answers.isEmpty {
                messages.append(current)
                current = DNSMessage(flags: flags)
                size = Self.headerLength
            }
            current.answers.append(answer)
            size += length
        }
        for additional in additionals {
            let length = additional.uncompressedWireLength
            if size + length <= limit {
                current.additionals.append(additional)
                size += length
            }
        }
        if !current.answers.isEmpty || !current.additionals.isEmpty { messages.append(current) }
        return messages.map { ($0, $0.encoded(options: .mdns)) }
    }

    /// A response multicast on every family of the interface.
    func transmitEverywhere(context: InterfaceContext, answers: [DNSResourceRecord], additionals: [DNSResourceRecord])
        -> [ResponderAction]
    {
        Self.pack(answers: answers, additionals: additionals, limit: MDNSRules.maximumResponsePayload).flatMap {
            message, bytes in
            Self.families(of: context).map { family in
                ResponderAction.transmit(
                    MDNSTransmission(
                        destination: .multicast(interfaceIndex: context.index, family: family), message: message,
                        bytes: bytes))
            }
        }
    }

    func transmitEverywhere(context: InterfaceContext, message: DNSMessage) -> [ResponderAction] {
        let bytes = message.encoded(options: .mdns)
        return Self.families(of: context).map { family in
            ResponderAction.transmit(
                MDNSTransmission(
                    destination: .multicast(interfaceIndex: context.index, family: family), message: message,
                    bytes: bytes))
        }
    }
}

/// Known answers of a query, looked up by identity (RFC 6762 §7.1).
struct KnownAnswers {
    private let list: [DNSResourceRecord]
    private let index: [RecordDeduplicator.Key: UInt32]?

    init(_ records: [DNSResourceRecord]) {
        self.list = records
        // A handful is scanned; a long list (a multi-packet query) is indexed once.
        if records.count > 8 {
            var index: [RecordDeduplicator.Key: UInt32] = [:]
            for record in records {
                index[RecordDeduplicator.Key(record), default: 0] = max(
                    index[RecordDeduplicator.Key(record)] ?? 0, record.ttl)
            }
            self.index = index
        } else {
            self.index = nil
        }
    }

    func suppresses(_ record: DNSResourceRecord) -> Bool {
        if let index = self.index {
            guard let ttl = index[RecordDeduplicator.Key(record)] else { return false }
            return MDNSRules.knownAnswerSuppresses(knownTTL: ttl, ourTTL: record.ttl)
        }
        return self.list.contains {
            $0.isIdentical(to: record) && MDNSRules.knownAnswerSuppresses(knownTTL: $0.ttl, ourTTL: record.ttl)
        }
    }
}

/// Keeps one copy of each identical record: a linear scan while small, a hash set beyond.
struct RecordDeduplicator {
    typealias Key = RecordIdentity

    private var small: [DNSResourceRecord] = []
    private var large: Set<Key>? = nil

    /// True when `record` was not seen before.
    mutating func insert(_ record: DNSResourceRecord) -> Bool {
        if self.large != nil { return self.large!.insert(Key(record)).inserted }
        if self.small.contains(where: { $0.isIdentical(to: record) }) { return false }
        self.small.append(record)
        if self.small.count > 16 {
            self.large = Set(self.small.map(Key.init))
            self.small = []
        }
        return true
    }
}
