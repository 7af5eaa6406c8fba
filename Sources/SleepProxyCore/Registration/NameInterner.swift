import SleepProxyWire

/// Makes equal names share one buffer. A name is a heap buffer of its own, and a Mac's 24 records repeat a
/// handful of names (its host name as every SRV target, each instance name as a PTR target and an SRV and TXT
/// owner), most of them also held by other hosts (`_services._dns-sd._udp.local.`, `_http._tcp.local.`):
/// sharing them took the engine's heap from 7.7 to 5.0-5.4 KB per host (sleepproxy-bench scale-local, 10,000 hosts).
/// Only names spelled exactly alike (case included) are shared: a host's own spelling is what it gets back.
struct NameInterner {
    private var table: [Spelling: DNSName] = [:]
    /// Whether names seen are remembered, to share later ones with (the journal's replay); the record store has
    /// its own index of names and needs no table beside it.
    private let remembers: Bool
    /// A name already held elsewhere (the record store's index), to share with.
    private let held: (DNSName) -> DNSName?

    init(remembers: Bool = true, capacity: Int = 0, held: @escaping (DNSName) -> DNSName? = { _ in nil }) {
        self.remembers = remembers
        self.held = held
        if remembers, capacity > 0 { self.table.reserveCapacity(capacity) }
    }

    /// How many names are remembered for later hosts.
    var rememberedCount: Int { self.table.count }

    mutating func canonical(_ name: DNSName) -> DNSName {
        if self.remembers, let found = self.table[Spelling(name)] { return found }
        var result = name
        if let other = self.held(name), other.storage == name.storage { result = other }
        if self.remembers { self.table[Spelling(name)] = result }
        return result
    }

    /// Replaces `name` by its shared copy (the host's own first, `own`); true when that changed which buffer it uses.
    private mutating func share(_ name: inout DNSName, own: inout HostNames) -> Bool {
        let shared: DNSName
        if let known = own.find(name) {
            shared = known
        } else {
            shared = self.canonical(name)
            own.add(shared)
        }
        guard !shared.sharesStorage(with: name) else { return false }
        name = shared
        return true
    }

    /// The registration with its names shared; the same value, not a copy, when they already are (a copy of its
    /// records would leave the old ones as holes in the heap).
    ///
    /// Remembering, the host's own names (those of its unique records: its host name, its instances, its reverse
    /// mappings) are shared among its records through a table of its own, and only the rest (service types, the
    /// names hosts have in common) is remembered for later hosts: a table of every host's names was 4 MB at 10,000
    /// hosts, and a restart's replay, at its highest memory, held it (docs/memory.md). The host's table also keeps
    /// the common names once looked up, so a name its records repeat is looked up once (docs/scale.md).
    mutating func intern(_ registration: OwnerRegistration) -> OwnerRegistration {
        var own = HostNames()
        if self.remembers {
            for proxied in registration.records where proxied.record.cacheFlush {
                let name = proxied.record.name
                if own.find(name) == nil { own.add(self.table[Spelling(name)] ?? name) }
            }
        }
        var records: [ProxiedRecord]? = nil
        for (index, proxied) in registration.records.enumerated() {
            var record = proxied.record
            var changed = self.share(&record.name, own: &own)
            switch record.rdata {
            case .ptr(var ptr):
                if self.share(&ptr.target, own: &own) {
                    record.rdata = .ptr(ptr)
                    changed = true
                }
            case .srv(var srv):
                if self.share(&srv.target, own: &own) {
                    record.rdata = .srv(srv)
                    changed = true
                }
            default:
                break
            }
            guard changed else { continue }
            if records == nil { records = registration.records }
            records![index].record = record
        }
        guard let records else { return registration }
        return registration.withNamesShared(
            records: records, hostName: registration.hostName.map { own.find($0) ?? $0 })
    }
}

extension NameInterner {
    /// One host's names, each spelling once: a typical Mac's 24 records name about 18 (41 times in all), found
    /// again by comparing lengths, then bytes, without hashing them or making a table for each host (sharing names
    /// was a quarter of a restart's decoding at 10,000 hosts, docs/scale.md). Past `linearLimit` names (a
    /// registration only a hostile or unusual host sends) the rest go in a hash table, so the scan never grows with
    /// the registration.
    struct HostNames {
        /// Names scanned before the hash table takes over: a typical Mac's 18 with room to spare, and a bound on
        /// every scan.
        static let linearLimit = 32

        private var names: [DNSName] = []
        private var overflow: [Spelling: DNSName] = [:]

        var count: Int { self.names.count + self.overflow.count }

        /// The copy kept for `name`'s exact spelling (case included), if any.
        func find(_ name: DNSName) -> DNSName? {
            for kept in self.names where kept.hasSpelling(of: name) { return kept }
            return self.overflow.isEmpty ? nil : self.overflow[Spelling(name)]
        }

        /// Keeps `name`, whose spelling `find` did not know.
        mutating func add(_ name: DNSName) {
            if self.names.count < Self.linearLimit {
                if self.names.isEmpty { self.names.reserveCapacity(Self.linearLimit) }
                self.names.append(name)
            } else {
                self.overflow[Spelling(name)] = name
            }
        }
    }
}

extension NameInterner {
    /// A name's exact bytes as a key. An array of bytes hashes one byte at a time, which was half of a restart's
    /// journal replay at 10,000 hosts (docs/scale.md); this hashes them in one call.
    struct Spelling: Hashable {
        let name: DNSName

        init(_ name: DNSName) { self.name = name }

        static func == (lhs: Spelling, rhs: Spelling) -> Bool { lhs.name.storage == rhs.name.storage }

        func hash(into hasher: inout Hasher) {
            self.name.storage.withUnsafeBytes { hasher.combine(bytes: $0) }
        }
    }
}

extension DNSName {
    /// The same bytes, case included (`==` ignores case): the same buffer, or equal lengths and contents.
    func hasSpelling(of other: DNSName) -> Bool {
        self.storage.withUnsafeBufferPointer { mine in
            other.storage.withUnsafeBufferPointer { theirs in
                mine.count == theirs.count
                    && (mine.baseAddress == theirs.baseAddress || mine.elementsEqual(theirs))
            }
        }
    }

    /// The same buffer, not only the same bytes.
    func sharesStorage(with other: DNSName) -> Bool {
        self.storage.withUnsafeBufferPointer { mine in
            other.storage.withUnsafeBufferPointer { theirs in mine.baseAddress == theirs.baseAddress }
        }
    }
}
