import SleepProxyWire

/// How an awake adopted host is watched (docs/adoption.md §3): when it is asked whether it still runs, and what
/// its goodbyes mean. A host never says it is going to sleep; what it says last, and the silence after it, do.
extension Adoption {
    /// How long a host that just spoke may stay quiet before it is asked for its name.
    ///
    /// - Its goodbyes may be its last packet (macOS 15 at sleep), and a busy host's word may be its last: both are
    ///   asked `quietBeforeCheck` after it, so that a host falling asleep is held within 5 s. So is its first word
    ///   since it was adopted, since the proxy started, or since it was off or away: nothing is known of it yet.
    /// - The answer to a question, its kernel asking for a neighbour (the proxy's MAC, seconds after answering it),
    ///   or a lone word from an idle host, shows it up and nothing more: it is asked again at the idle pace, one
    ///   question and one answer every `idleCheckInterval`.
    static func quietBeforeCheck(
        _ host: inout AdoptedHost, answering: Bool, goodbye: Bool, firstWord: Bool, now: Timestamp
    ) -> Duration {
        if answering, !goodbye, !firstWord { return AdoptionRules.idleCheckInterval }
        host.recentWords.append(now)
        if host.recentWords.count > AdoptionRules.busyWords { host.recentWords.removeFirst() }
        let busy =
            host.recentWords.count >= AdoptionRules.busyWords
            && now - host.recentWords[0] <= AdoptionRules.busyWindow
        return busy || goodbye || firstWord ? AdoptionRules.quietBeforeCheck : AdoptionRules.idleCheckInterval
    }

    /// Goodbyes the host sent (`goodbyes`, TTL 0): what to drop at once. Those for its own name's addresses are
    /// applied now: all of them gone is an exit or a shutdown (mDNSResponder and avahi-daemon withdraw everything
    /// when they stop), so the host is off and all its goodbyes stand; some of them is an address that changed.
    /// The rest wait (`pendingGoodbyes`): followed by silence they are a sleep's and forgotten when the host is
    /// held; followed by more words, a removal (`confirmGoodbyes`).
    static func deferGoodbyes(
        _ goodbyes: Set<RecordIdentity>, of host: inout AdoptedHost, result: inout AdoptionHeard, now: Timestamp
    ) -> Set<RecordIdentity> {
        let published = Set(host.records.map { RecordIdentity($0.record) })
        let known = goodbyes.intersection(published)
        guard !known.isEmpty else { return [] }
        result.saidGoodbye = true
        let name = host.hostName
        func isAddress(_ identity: RecordIdentity) -> Bool {
            identity.name == name && (identity.rdata.recordType == .a || identity.rdata.recordType == .aaaa)
        }
        let addresses = published.filter(isAddress)
        if !addresses.isEmpty, addresses.isSubset(of: goodbyes) {
            // Leaving: every goodbye stands, and those said before it too.
            let all = known.union(host.pendingGoodbyes)
            Self.forgetGoodbyes(of: &host)
            return all
        }
        let addressGoodbyes = known.filter(isAddress)
        let waiting = known.subtracting(addressGoodbyes)
        if !waiting.isEmpty {
            if host.pendingGoodbyes.isEmpty { host.goodbyesAt = now }
            host.pendingGoodbyes.formUnion(waiting)
        }
        return addressGoodbyes
    }

    /// A word of the host's own that carries no goodbyes: goodbyes it said more than `goodbyeBurst` before are a
    /// removal while awake, and the service each withdrew goes whole (its PTRs, SRV, TXT, and the type's
    /// `_services` entry once no instance of it is left), so nothing stale is announced at its next sleep.
    static func confirmGoodbyes(of host: inout AdoptedHost, result: inout AdoptionHeard, now: Timestamp) {
        guard let at = host.goodbyesAt, now - at > AdoptionRules.goodbyeBurst else { return }
        let removed = Self.withdrawal(of: host.pendingGoodbyes, from: host.records.map(\.record))
        host.pendingGoodbyes = []
        host.goodbyesAt = nil
        let before = host.records.count
        host.records.removeAll { removed.contains(RecordIdentity($0.record)) }
        guard host.records.count != before else { return }
        host.recordBytes = host.records.reduce(0) { $0 + $1.record.uncompressedWireLength }
        result.recordsChanged = true
    }

    /// What goodbyes to `identities` withdraw from `records`: the records themselves; for a service PTR, the
    /// instance it names (every record of that name, and every PTR to it, subtypes included); and the
    /// `_services._dns-sd._udp` entry of each type left without an instance (RFC 6763 §9).
    static func withdrawal(of identities: Set<RecordIdentity>, from records: [DNSResourceRecord])
        -> Set<RecordIdentity>
    {
        var removed = identities
        var instances: Set<DNSName> = []
        var types: Set<DNSName> = []
        for identity in identities where identity.name != Self.servicesName {
            if case .ptr(let ptr) = identity.rdata {
                instances.insert(ptr.target)
                types.insert(identity.name)
            }
        }
        guard !instances.isEmpty else { return removed }
        for record in records {
            if instances.contains(record.name) {
                removed.insert(RecordIdentity(record))
            } else if case .ptr(let ptr) = record.rdata, instances.contains(ptr.target) {
                removed.insert(RecordIdentity(record))
                if record.name != Self.servicesName { types.insert(record.name) }
            }
        }
        // A type keeps its entry while another instance of it stays published.
        let remaining = records.filter { !removed.contains(RecordIdentity($0)) }
        for record in remaining where record.name == Self.servicesName {
            guard case .ptr(let ptr) = record.rdata, types.contains(ptr.target) else { continue }
            let stillServed = remaining.contains { other in
                guard other.name == ptr.target, case .ptr = other.rdata else { return false }
                return true
            }
            if !stillServed { removed.insert(RecordIdentity(record)) }
        }
        return removed
    }

    /// The host is held: its goodbyes were a sleep's, and what it published before them is what the proxy
    /// answers and announces for it.
    static func forgetGoodbyes(of host: inout AdoptedHost) {
        host.pendingGoodbyes = []
        host.goodbyesAt = nil
    }
}
