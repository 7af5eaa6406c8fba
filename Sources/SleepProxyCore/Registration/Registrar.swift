import SleepProxyWire

/// Counts of what happened on the registration port, by outcome and reason (for the CLI and metrics).
public struct RegistrationStatistics: Hashable, Sendable {
    public var accepted = 0
    public var malformed: [RegistrationProblem: Int] = [:]
    public var refused: [RegistrationRefusal: Int] = [:]
    public var notImplemented = 0
    public var ignored: [IgnoredDatagram: Int] = [:]

    public init() {}
}

/// Turns registration datagrams into store changes and replies, the way Apple's proxy does
/// (`mDNSCoreReceiveUpdate`, docs/protocol.md §3 and §4.1), with the checks Apple's proxy lacks (§7).
///
/// Pure: the caller passes `now`, performs the returned outcome (persist, then reply) and never mutates the store
/// behind its back. A datagram that is not accepted leaves every piece of state as it was, except the rate
/// limiter and the statistics.
public struct Registrar: Sendable {
    /// Apple's `mDNSMaximumMulticastTTLSeconds`: received TTLs are capped at 4500 s (docs/protocol.md §4.1, §8).
    public static let maximumTTL: UInt32 = 4500
    /// RFC 6762 §10: TTL for records whose name or rdata is a host name; given to a record registered with TTL 0.
    public static let hostNameRecordTTL: UInt32 = 120
    /// RFC 6762 §10: TTL for other records (75 minutes); given to a record registered with TTL 0.
    public static let otherRecordTTL: UInt32 = 4500
    /// Apple's proxy answers with an OPT of class 1440 and TTL 4500 (docs/protocol.md §3.6).
    static let replyEDNS = EDNSHeader(udpPayloadSize: 1440, z: 0x1194)
    /// RFC 9664 §8: at most 7 days for KEY-LEASE.
    public static let maximumKeyLease: UInt32 = 7 * 86_400

    public private(set) var configuration: RegistrationConfiguration

    /// Settings a reload may change while hosts are held: what expiry does and how refusals are answered.
    public mutating func reconfigure(
        expiryAction: RegistrationConfiguration.ExpiryAction, refusalReply: RegistrationConfiguration.RefusalReply
    ) {
        self.configuration.expiryAction = expiryAction
        self.configuration.refusalReply = refusalReply
    }
    public private(set) var store: RecordStore
    public private(set) var statistics = RegistrationStatistics()
    private var rateLimiter: RateLimiter

    public init(
        configuration: RegistrationConfiguration = RegistrationConfiguration(), store: RecordStore = RecordStore()
    ) {
        self.configuration = configuration
        self.store = store
        self.rateLimiter = RateLimiter(burst: configuration.rateLimitBurst, perSecond: configuration.rateLimitPerSecond)
    }

    // MARK: - Registrations

    /// Handles one datagram that arrived on the registration port of `interface` from `source`.
    /// `fromPeer`: the source is another sleep proxy on the link handing a host over with the host's own Owner
    /// option (docs/several-proxies.md); its source need not be one of the claimed addresses,
    /// and every other check applies.
    public mutating func handle(
        datagram bytes: [UInt8], from source: IPAddress, on interface: InterfaceContext, fromPeer: Bool = false,
        now: Timestamp
    ) -> RegistrationOutcome {
        var outcome = self.process(bytes, source: source, interface: interface, fromPeer: fromPeer, now: now)
        switch outcome {
        case .accepted(var acceptance):
            self.statistics.accepted += 1
            // What the store keeps, its names shared with the store's (`NameInterner`), is what everyone holds.
            acceptance.registration = self.store.upsert(acceptance.registration)
            outcome = .accepted(acceptance)
        case .malformed(let problem, _): self.statistics.malformed[problem, default: 0] += 1
        case .refused(let reason, _): self.statistics.refused[reason, default: 0] += 1
        case .notImplemented: self.statistics.notImplemented += 1
        case .ignored(let reason): self.statistics.ignored[reason, default: 0] += 1
        }
        return outcome
    }

    private mutating func process(
        _ bytes: [UInt8], source: IPAddress, interface: InterfaceContext, fromPeer: Bool, now: Timestamp
    ) -> RegistrationOutcome {
        guard bytes.count >= 12 else { return .ignored(.tooShort) }
        let id = UInt16(bytes[0]) << 8 | UInt16(bytes[1])
        let flags = DNSHeaderFlags(rawValue: UInt16(bytes[2]) << 8 | UInt16(bytes[3]))
        guard !flags.isResponse else { return .ignored(.response) }
        // Cheap checks first: a flood from one source, or from off the link, costs no decoding.
        guard self.rateLimiter.allow(source, now: now) else { return self.refuse(.rateLimited, id: id) }
        guard interface.isOnLink(source) else { return self.refuse(.sourceNotOnLink, id: id) }
        guard flags.opcode == .update else {
            return .notImplemented(
                opcode: flags.opcode, reply: Registrar.reply(id: id, rcode: .notImplemented, opcode: flags.opcode))
        }
        let message: DNSMessage
        do {
            message = try DNSMessage(decoding: bytes)
        } catch {
            return self.malformed(.undecodable, id: id)
        }

        // RFC 2136 §2.3 wants exactly one zone; Apple sends none, dnspython-based clients send "." or "local.".
        if message.zone.count > 1 { return self.malformed(.badZone, id: id) }
        if let zone = message.zone.first, !(zone.name == .root || zone.name == "local.") {
            return self.malformed(.badZone, id: id)
        }

        // EDNS: exactly one OPT, owned by the root, with a Lease and an Owner option (docs/protocol.md §3.1-§3.3).
        let opts = message.additionals.filter { $0.type == .opt }
        guard let opt = opts.first, case .opt(let options) = opt.rdata else {
            return self.malformed(.missingOPT, id: id)
        }
        guard opts.count == 1, opt.name.isRoot else { return self.malformed(.badOPT, id: id) }
        guard let lease = options.updateLease else {
            let present = options.options.contains { $0.code == EDNSOption.Code.updateLease }
            return self.malformed(present ? .badLease : .missingLease, id: id)
        }
        guard let granted = self.configuration.leasePolicy.grant(lease.lease) else {
            return self.malformed(.zeroLease, id: id)
        }
        guard let owner = options.owner else {
            let present = options.options.contains { $0.code == EDNSOption.Code.owner }
            return self.malformed(present ? .badOwner : .missingOwner, id: id)
        }
        guard owner.version == 0 else { return self.malformed(.ownerVersion, id: id) }
        for mac in [owner.primaryMAC, owner.effectiveWakeMAC] where mac == .zero || mac.isMulticast {
            return self.malformed(.ownerMAC, id: id)
        }

        // Update section: additions only (docs/protocol.md §5.3: Apple never sends deletions).
        guard !message.updates.isEmpty else { return self.malformed(.noRecords, id: id) }
        var incoming: [DNSResourceRecord] = []
        incoming.reserveCapacity(message.updates.count)
        for var record in message.updates {
            if record.type == .opt { return self.malformed(.optInUpdateSection, id: id) }
            switch record.rrclass {
            case .in: break
            case .any, .none: return self.malformed(.deletion, id: id)
            default: return self.malformed(.badClass, id: id)
            }
            record.ttl = Registrar.storedTTL(record)
            incoming.append(record)
        }

        // The host's state after this part. The parts of one registration share its message ID (Apple splits a
        // large one into several UPDATEs with one ID, docs/protocol.md §2.3, and retransmits it unchanged): those
        // merge. A new message ID is a new registration, and it replaces the previous one's records, even in the
        // same epoch. Beyond Apple: its proxy keeps non-identical old records until the host re-probes with a new
        // sequence (docs/protocol.md §5.3), and a client that never bumps its sequence (every avahi-based one) then
        // piles up services it removed, with two TXT records for one instance (docs/coexistence.md). This also
        // carries out Apple's intent of replacing the keepalive records on every registration (§4.1 step 3).
        let key = OwnerKey(interface: interface.name, primaryMAC: owner.primaryMAC)
        let existing = self.store[key]
        let sameEpoch = existing?.owner.sequence == owner.sequence
        let samePart = sameEpoch && existing!.lastMessageID == id
        var records = samePart ? existing!.records : []
        // The common case: a retransmission (Apple sends each registration up to three times) or a renewal with
        // exactly the records already held. Nothing to merge.
        // Each record keeps the time it first arrived in this epoch; the host's `updatedAt` says when the latest
        // part came. (Rewriting every record's time would copy the whole array for nothing.)
        let sameRecords = records.count == incoming.count && zip(records, incoming).allSatisfy { $0.record == $1 }
        if !sameRecords {
            records = Registrar.merge(incoming, into: records, now: now)
        }
        let unchanged = sameRecords && samePart && existing!.records.count == records.count
        let registration = OwnerRegistration(
            key: key,
            owner: OwnerOption(
                sequence: owner.sequence, primaryMAC: owner.primaryMAC, wakeMAC: owner.wakeMAC, password: owner.password
            ),
            records: records,
            registeredAt: sameEpoch ? existing!.registeredAt : now,
            updatedAt: now,
            leaseExpiry: now + .seconds(Int64(granted)),
            grantedLease: granted,
            lastMessageID: id,
            claims: unchanged ? (existing!.hostName, existing!.addresses) : nil
        )

        if let refusal = self.policyRefusal(
            registration, existing: existing, source: source, interface: interface, fromPeer: fromPeer)
        {
            return self.refuse(refusal, id: id)
        }

        var replyLease = UpdateLeaseOption(lease: granted)
        if let keyLease = lease.keyLease { replyLease.keyLease = min(keyLease, Registrar.maximumKeyLease) }
        return .accepted(
            Acceptance(
                registration: registration,
                grantedLease: granted,
                startedNewEpoch: !sameEpoch,
                replaced: sameEpoch ? nil : existing,
                previous: existing,
                reply: Registrar.reply(id: id, rcode: .noError, lease: replyLease)
            ))
    }

    /// Adds `incoming` to `records`: identical records (same name, class and rdata; RFC 6762 §8.1) replace each
    /// other, others are appended. Indexed, not searched: a host's records times the incoming ones is quadratic.
    static func merge(_ incoming: [DNSResourceRecord], into existing: [ProxiedRecord], now: Timestamp)
        -> [ProxiedRecord]
    {
        var records = existing
        var positions: [RecordIdentity: Int] = [:]
        positions.reserveCapacity(records.count + incoming.count)
        for (index, stored) in records.enumerated() { positions[RecordIdentity(stored.record)] = index }
        for record in incoming {
            let stored = ProxiedRecord(record: record, registeredAt: now)
            let identity = RecordIdentity(record)
            if let index = positions[identity] {
                // Same record again: keep its first arrival time, take the new TTL and cache-flush bit.
                records[index].record = record
            } else {
                positions[identity] = records.count
                records.append(stored)
            }
        }
        return records
    }

    /// The security rules Apple's proxy does not have (docs/protocol.md §7 RECOMMENDATION) and the capacity limits.
    private func policyRefusal(
        _ registration: OwnerRegistration, existing: OwnerRegistration?, source: IPAddress, interface: InterfaceContext,
        fromPeer: Bool
    ) -> RegistrationRefusal? {
        let claims = registration.addresses
        for address in claims {
            if interface.isOwnAddress(address) { return .claimsProxyAddress }
            if !interface.isOnLink(address) { return .claimOutsideInterface }
            if let holder = self.store.owner(claiming: address, on: interface.name), holder != registration.key {
                return .claimsOtherHostAddress
            }
        }
        if self.configuration.requireSourceAmongClaimedAddresses, !fromPeer, !claims.contains(source) {
            return .sourceNotClaimed
        }
        if registration.records.count > self.configuration.maximumRecordsPerHost { return .tooManyRecordsForHost }
        let total = self.store.recordCount - (existing?.records.count ?? 0) + registration.records.count
        if total > self.configuration.maximumRecords { return .tooManyRecords }
        if existing == nil, self.store.hostCount + 1 > self.configuration.maximumHosts { return .tooManyHosts }
        return nil
    }

    /// The TTL kept for a registered record: capped at 4500 s; 0 becomes the RFC 6762 §10 default for its kind.
    static func storedTTL(_ record: DNSResourceRecord) -> UInt32 {
        if record.ttl == 0 {
            switch record.rdata {
            case .a, .aaaa, .srv, .hinfo: return hostNameRecordTTL
            case .ptr where ReverseMapping.address(from: record.name) != nil: return hostNameRecordTTL
            default: return otherRecordTTL
            }
        }
        return min(record.ttl, maximumTTL)
    }

    private func malformed(_ problem: RegistrationProblem, id: UInt16) -> RegistrationOutcome {
        .malformed(problem, reply: Registrar.reply(id: id, rcode: .formatError))
    }

    private func refuse(_ refusal: RegistrationRefusal, id: UInt16) -> RegistrationOutcome {
        switch self.configuration.refusalReply {
        case .silent: return .refused(refusal, reply: nil)
        case .refused: return .refused(refusal, reply: Registrar.reply(id: id, rcode: .refused))
        }
    }

    /// An UPDATE response as Apple's proxy builds it (docs/protocol.md §3.6): the request's ID, flags QR + opcode +
    /// RCODE, no echoed sections, and on success one OPT (class 1440, TTL 4500) holding only the granted lease.
    static func reply(id: UInt16, rcode: DNSResponseCode, opcode: DNSOpcode = .update, lease: UpdateLeaseOption? = nil)
        -> [UInt8]
    {
        var message = DNSMessage(id: id, flags: DNSHeaderFlags(response: true, opcode: opcode, responseCode: rcode))
        if let lease {
            message.additionals = [.opt(Registrar.replyEDNS, options: [.updateLease(lease)])]
        }
        return message.encoded()
    }

    // MARK: - Other changes

    /// A host whose lease ended, and what the configuration says to do about it.
    public struct Expiry: Hashable, Sendable {
        /// Everything the host held: its wake MAC and password for the magic packet, its records for goodbyes.
        public var registration: OwnerRegistration
        public var action: RegistrationConfiguration.ExpiryAction
    }

    /// Removes every host whose lease has ended (RFC 9664 §7: expired records must not be served) and says what
    /// to do with each; the caller performs it and removes the host from durable storage.
    public mutating func expire(now: Timestamp) -> [Expiry] {
        self.store.removeExpired(now: now).map { Expiry(registration: $0, action: self.configuration.expiryAction) }
    }

    /// The next time `expire(now:)` has work.
    public mutating func nextDeadline() -> Timestamp? { self.store.nextExpiry() }

    /// Removes one host (hand-back, an administrator's forget); returns what it held.
    public mutating func remove(_ key: OwnerKey) -> OwnerRegistration? { self.store.remove(key) }

    /// Keeps counting where `other` left off (when the state is rebuilt from durable storage).
    public mutating func adoptStatistics(from other: Registrar) { self.statistics = other.statistics }

    /// Sizes the store for `hosts` hosts (`RecordStore.reserveCapacity`).
    public mutating func reserveCapacity(hosts: Int, namesPerHost: Int) {
        self.store.reserveCapacity(hosts: hosts, namesPerHost: namesPerHost)
    }

    /// Puts back a host read from durable storage at start-up (`namesShared`: see `RecordStore.upsert`).
    public mutating func restore(_ registration: OwnerRegistration, namesShared: Bool = false) {
        self.store.upsert(registration, namesShared: namesShared)
    }
}

/// What makes two records "identical" in RFC 6762 §8.1 terms: name (case-insensitively), class and rdata; the TTL
/// and the cache-flush bit do not count.
public struct RecordIdentity: Hashable, Sendable {
    public var name: DNSName
    public var rrclass: DNSClass
    public var rdata: DNSRData

    public init(_ record: DNSResourceRecord) {
        self.name = record.name
        self.rrclass = record.rrclass
        self.rdata = record.rdata
    }

    /// Name and type only: the synthesised hash of `rdata` would walk every byte of every TXT string, and records
    /// that share name and type but differ in rdata are few; equality still compares everything.
    public func hash(into hasher: inout Hasher) {
        hasher.combine(self.name)
        hasher.combine(self.rdata.recordType)
    }
}
