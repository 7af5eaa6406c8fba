import HeapModule
import SleepProxyWire

/// The proxied records of every sleeping host, indexed for the responder (by name) and for the packet path (by
/// claimed address), with lease expiry ordered in a heap so "what expires next" is O(1).
///
/// A pure value: no clocks, no I/O. Every change goes through `upsert` and `remove`, which keep the indexes and
/// the counts consistent; `checkInvariants()` verifies that in tests.
public struct RecordStore: Sendable {
    public private(set) var owners: [OwnerKey: OwnerRegistration] = [:]
    public private(set) var recordCount = 0
    /// Name (compared case-insensitively, as `DNSName` is) → the owners with records at that name.
    /// Sets, not lists: names such as `_services._dns-sd._udp.local.` are registered by every host, and
    /// removing one host from a list of thousands made each registration O(hosts).
    private var nameIndex: [DNSName: Holders] = [:]

    /// The owners of one name, split by whether they hold a unique (cache-flush) record there. Conflict checks
    /// look at unique records only (RFC 6762 §9: shared records never conflict), so a response naming a shared
    /// name such as a service type, held by every host, costs one lookup instead of a walk over every host.
    /// Most names are one host's own, with an empty (allocation-free) `shared` set.
    struct Holders: Sendable {
        var unique = OwnerSet()
        var shared = OwnerSet()
        /// How many `shared` owners hold each record at this name, so "does anyone still hold this record" (a
        /// goodbye must not flush a record another host holds) is one lookup, not a walk over every host.
        var sharedRecords: [SharedRecord: Int] = [:]

        var isEmpty: Bool { self.unique.isEmpty && self.shared.isEmpty }

        mutating func remove(_ key: OwnerKey) {
            self.unique.remove(key)
            self.shared.remove(key)
        }

        func contains(_ key: OwnerKey) -> Bool { self.unique.contains(key) || self.shared.contains(key) }
    }
    /// Claimed address on an interface → its owner.
    private var addressIndex: [InterfaceAddress: OwnerKey] = [:]
    private var expiryHeap = Heap<ExpiryEntry>()
    /// Replaced on every change, so a reader can tell in O(1) whether what it derived from the store still holds
    /// (the responder's answer cache does). An object, not a counter: two diverging copies of a store can never
    /// share a version.
    public private(set) var version = Version()

    /// An identity token; compare with `===`.
    public final class Version: Sendable {
        init() {}
    }

    struct SharedRecord: Hashable, Sendable {
        var interface: String
        var rrclass: DNSClass
        var rdata: DNSRData
    }

    public struct InterfaceAddress: Hashable, Sendable {
        public var interface: String
        public var address: IPAddress
    }

    private struct ExpiryEntry: Comparable {
        var expiry: Timestamp
        var key: OwnerKey
        static func < (lhs: ExpiryEntry, rhs: ExpiryEntry) -> Bool { (lhs.expiry, lhs.key) < (rhs.expiry, rhs.key) }
    }

    public init() {}

    /// Sizes the tables that grow with the hosts held for `hosts` hosts of `namesPerHost` names each, so that a
    /// storm of registrations does not stop to rehash them. Swift's dictionaries grow by doubling all at once:
    /// at 6,000-7,000 Mac-sized hosts the name index alone took 10-25 ms to rehash, and every query waited
    /// (sleepproxy-bench scale, docs/scale.md). Only the tables' bookkeeping is written now; their buckets
    /// become resident as hosts fill them.
    public mutating func reserveCapacity(hosts: Int, namesPerHost: Int) {
        self.owners.reserveCapacity(hosts)
        self.nameIndex.reserveCapacity(hosts * namesPerHost)
        self.addressIndex.reserveCapacity(hosts * 2)
    }

    public var hostCount: Int { self.owners.count }

    public subscript(key: OwnerKey) -> OwnerRegistration? { self.owners[key] }

    /// The owner that claims `address` on `interface`, if any.
    public func owner(claiming address: IPAddress, on interface: String) -> OwnerKey? {
        self.addressIndex[InterfaceAddress(interface: interface, address: address)]
    }

    /// Records named `name` (case-insensitively) registered on `interface`, with their owners. With `uniqueOnly`,
    /// only the records of owners holding a unique record at that name (all of their records there).
    /// The hosts that hold a unique record at `name` on the interface (its host name, or one of its service
    /// instances), without collecting the records.
    public func uniqueHolders(of name: DNSName, on interface: String) -> [OwnerKey] {
        guard let holders = self.nameIndex[name] else { return [] }
        var result: [OwnerKey] = []
        for key in holders.unique where key.interface == interface { result.append(key) }
        return result
    }

    public func records(named name: DNSName, on interface: String, uniqueOnly: Bool = false) -> [(
        OwnerKey, ProxiedRecord
    )] {
        guard let holders = self.nameIndex[name] else { return [] }
        var result: [(OwnerKey, ProxiedRecord)] = []
        func collect(_ keys: OwnerSet) {
            for key in keys where key.interface == interface {
                guard let owner = self.owners[key] else { continue }
                for record in owner.records where record.record.name == name { result.append((key, record)) }
            }
        }
        collect(holders.unique)
        if !uniqueOnly { collect(holders.shared) }
        return result
    }

    /// True when some host holds a record identical to `record` (name, class and data) on `interface`: one lookup
    /// for shared records, a look at the few hosts owning the name uniquely otherwise.
    public func holdsIdentical(_ record: DNSResourceRecord, on interface: String) -> Bool {
        guard let holders = self.nameIndex[record.name] else { return false }
        if holders.sharedRecords[Self.shared(record, on: interface)] != nil { return true }
        for key in holders.unique where key.interface == interface {
            if self.owners[key]?.records.contains(where: { $0.isIdentical(to: record) }) == true { return true }
        }
        return false
    }

    private static func hold(_ record: SharedRecord, by key: OwnerKey, in holders: inout Holders) {
        holders.shared.insert(key)
        holders.sharedRecords[record, default: 0] += 1
    }

    static func shared(_ record: DNSResourceRecord, on interface: String) -> SharedRecord {
        SharedRecord(interface: interface, rrclass: record.rrclass, rdata: record.rdata)
    }

    /// The registration with its names shared with the store's index (`NameInterner`): once it is indexed, every
    /// name it holds is a key there (an SRV or PTR target is another record's owner name), so one lookup a name
    /// does it.
    private func interned(_ registration: OwnerRegistration) -> OwnerRegistration {
        let index = self.nameIndex
        var interner = NameInterner(
            remembers: false, held: { name in index.index(forKey: name).map { index.keys[$0] } })
        return interner.intern(registration)
    }

    /// Adds or replaces one host's registration; returns it as stored, its names shared with the store's.
    /// `namesShared`: the caller already made every name spelled alike one buffer across the hosts it hands over
    /// (the journal's replay does), so looking each name up again would change nothing; a restart of 10,000 hosts
    /// spent a sixth of its time on it.
    @discardableResult
    public mutating func upsert(_ registration: OwnerRegistration, namesShared: Bool = false) -> OwnerRegistration {
        let key = registration.key
        self.version = Version()
        if let existing = self.owners[key], existing.addresses == registration.addresses,
            existing.records.count == registration.records.count,
            zip(existing.records, registration.records).allSatisfy({
                $0.record.name == $1.record.name && $0.record.cacheFlush == $1.record.cacheFlush
                    && ($0.record.cacheFlush
                        || ($0.record.rrclass == $1.record.rrclass && $0.record.rdata == $1.record.rdata))
            })
        {
            // A renewal or a retransmission (Apple's client sends each registration up to three times): the same
            // names (unique or shared alike), shared records and addresses, so the indexes already hold it; only the host and its expiry change.
            let stored = namesShared ? registration : self.interned(registration)
            self.owners[key] = stored
            if existing.leaseExpiry != registration.leaseExpiry {
                self.expiryHeap.insert(ExpiryEntry(expiry: registration.leaseExpiry, key: key))
            }
            return stored
        }
        self.remove(key)
        self.owners[key] = registration
        self.recordCount += registration.records.count
        // One access to the index for each unique name (a host's name holds its A and AAAA, an instance its SRV and
        // TXT) and one for each shared record: a restart files 10,000 hosts' 24 records this way, and the index's
        // lookups were most of it.
        var unique = Set<DNSName>(minimumCapacity: registration.records.count)
        for record in registration.records where record.record.cacheFlush { unique.insert(record.record.name) }
        for name in unique { self.nameIndex[name, default: Holders()].unique.insert(key) }
        for record in registration.records where !unique.contains(record.record.name) {
            Self.hold(
                Self.shared(record.record, on: key.interface), by: key,
                in: &self.nameIndex[record.record.name, default: Holders()])
        }
        for address in registration.addresses {
            self.addressIndex[InterfaceAddress(interface: key.interface, address: address)] = key
        }
        self.expiryHeap.insert(ExpiryEntry(expiry: registration.leaseExpiry, key: key))
        guard !namesShared else { return registration }
        let stored = self.interned(registration)
        self.owners[key] = stored
        return stored
    }

    /// Removes one host; returns what it held.
    @discardableResult
    public mutating func remove(_ key: OwnerKey) -> OwnerRegistration? {
        guard let registration = self.owners.removeValue(forKey: key) else { return nil }
        self.version = Version()
        self.recordCount -= registration.records.count
        // Counts first, while the owner is still filed under each name; then the owner itself.
        for record in registration.records where self.nameIndex[record.record.name]?.shared.contains(key) == true {
            let shared = Self.shared(record.record, on: key.interface)
            let count = (self.nameIndex[record.record.name]!.sharedRecords[shared] ?? 0) - 1
            self.nameIndex[record.record.name]!.sharedRecords[shared] = count > 0 ? count : nil
        }
        for record in registration.records {
            let name = record.record.name
            guard var holders = self.nameIndex.removeValue(forKey: name) else { continue }
            holders.remove(key)
            if !holders.isEmpty { self.nameIndex[name] = holders }
        }
        for address in registration.addresses {
            let slot = InterfaceAddress(interface: key.interface, address: address)
            if self.addressIndex[slot] == key { self.addressIndex[slot] = nil }
        }
        // The heap entry goes stale and is skipped when it surfaces (lazy deletion).
        return registration
    }

    /// The earliest lease expiry among the hosts held.
    public mutating func nextExpiry() -> Timestamp? {
        self.dropStaleExpiries()
        return self.expiryHeap.min?.expiry
    }

    /// Removes and returns every host whose lease ended at or before `now`, earliest first.
    public mutating func removeExpired(now: Timestamp) -> [OwnerRegistration] {
        var expired: [OwnerRegistration] = []
        while true {
            self.dropStaleExpiries()
            guard let first = self.expiryHeap.min, first.expiry <= now else { break }
            self.expiryHeap.removeMin()
            if let registration = self.remove(first.key) { expired.append(registration) }
        }
        return expired
    }

    private mutating func dropStaleExpiries() {
        while let first = self.expiryHeap.min, self.owners[first.key]?.leaseExpiry != first.expiry {
            self.expiryHeap.removeMin()
        }
        // Stale entries that are not at the top stay until they surface; bound them so a host that renews every
        // second for a year cannot grow the heap without limit.
        if self.expiryHeap.count > 2 * self.owners.count + 64 {
            self.expiryHeap = Heap(self.owners.values.map { ExpiryEntry(expiry: $0.leaseExpiry, key: $0.key) })
        }
    }

    /// Verifies that indexes and counts agree with the owners (for tests).
    public func checkInvariants() -> [String] {
        var problems: [String] = []
        let count = self.owners.values.reduce(0) { $0 + $1.records.count }
        if count != self.recordCount { problems.append("recordCount \(self.recordCount) != \(count)") }
        for (name, holders) in self.nameIndex {
            for key in Set(holders.unique).union(holders.shared)
            where self.owners[key]?.records.contains(where: { $0.record.name == name }) != true {
                problems.append("name index \(name) -> \(key) is stale")
            }
            var counted: [SharedRecord: Int] = [:]
            for key in holders.shared {
                for record in self.owners[key]?.records ?? [] where record.record.name == name {
                    counted[Self.shared(record.record, on: key.interface), default: 0] += 1
                }
            }
            if counted != holders.sharedRecords { problems.append("name index \(name): shared record counts are off") }
            for key in Set(holders.unique).intersection(holders.shared) {
                problems.append("name index \(name) -> \(key) is both unique and shared")
            }
            for key in holders.unique
            where self.owners[key]?.records.contains(where: { $0.record.name == name && $0.record.cacheFlush }) != true
            {
                problems.append("name index \(name) -> \(key) is filed as unique without a unique record")
            }
        }
        for (slot, key) in self.addressIndex where self.owners[key]?.addresses.contains(slot.address) != true {
            problems.append("address index \(slot.address) -> \(key) is stale")
        }
        for (key, owner) in self.owners {
            for record in owner.records where self.nameIndex[record.record.name]?.contains(key) != true {
                problems.append("\(record.record.name) of \(key) is not indexed")
            }
        }
        return problems
    }
}
