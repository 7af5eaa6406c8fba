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
    /// Name (compared case-insensitively, as `DNSName` is) → every record at that name with its owner: what the
    /// responder reads for each question, so one lookup yields the records without visiting their hosts (the
    /// copies share their name and RDATA storage with the host's own list). Removing a host scans the lists of
    /// its names, so a name every host registers (`_services._dns-sd._udp.local.`) costs O(hosts) there; new
    /// registrations and renewals do not remove.
    private var nameIndex: [DNSName: [NameEntry]] = [:]

    public struct NameEntry: Sendable {
        public var owner: OwnerKey
        public var record: ProxiedRecord
    }
    /// Claimed address on an interface → its owner.
    private var addressIndex: [InterfaceAddress: OwnerKey] = [:]
    private var expiryHeap = Heap<ExpiryEntry>()

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

    public var hostCount: Int { self.owners.count }

    public subscript(key: OwnerKey) -> OwnerRegistration? { self.owners[key] }

    /// The owner that claims `address` on `interface`, if any.
    public func owner(claiming address: IPAddress, on interface: String) -> OwnerKey? {
        self.addressIndex[InterfaceAddress(interface: interface, address: address)]
    }

    /// Records named `name` (case-insensitively) registered on `interface`, with their owners.
    public func records(named name: DNSName, on interface: String) -> [(OwnerKey, ProxiedRecord)] {
        guard let entries = self.nameIndex[name] else { return [] }
        return entries.compactMap { $0.owner.interface == interface ? ($0.owner, $0.record) : nil }
    }

    /// Every record at `name`, on any interface, as indexed (no copy of the list).
    public func entries(named name: DNSName) -> [NameEntry] { self.nameIndex[name] ?? [] }

    /// Adds or replaces one host's registration.
    public mutating func upsert(_ registration: OwnerRegistration) {
        let key = registration.key
        if let existing = self.owners[key], existing.addresses == registration.addresses,
            existing.records.count == registration.records.count,
            zip(existing.records, registration.records).allSatisfy({ $0.record.name == $1.record.name })
        {
            // A renewal or a retransmission (Apple's client sends each registration up to three times): the same
            // names and addresses, so the indexes already hold it; only the host and its expiry change (and the
            // indexed copies, when the records' data did).
            if existing.records != registration.records {
                self.unindexNames(of: existing)
                self.indexNames(of: registration)
            }
            self.owners[key] = registration
            if existing.leaseExpiry != registration.leaseExpiry {
                self.expiryHeap.insert(ExpiryEntry(expiry: registration.leaseExpiry, key: key))
            }
            return
        }
        self.remove(key)
        self.owners[key] = registration
        self.recordCount += registration.records.count
        self.indexNames(of: registration)
        for address in registration.addresses {
            self.addressIndex[InterfaceAddress(interface: key.interface, address: address)] = key
        }
        self.expiryHeap.insert(ExpiryEntry(expiry: registration.leaseExpiry, key: key))
    }

    /// Removes one host; returns what it held.
    @discardableResult
    public mutating func remove(_ key: OwnerKey) -> OwnerRegistration? {
        guard let registration = self.owners.removeValue(forKey: key) else { return nil }
        self.recordCount -= registration.records.count
        self.unindexNames(of: registration)
        for address in registration.addresses {
            let slot = InterfaceAddress(interface: key.interface, address: address)
            if self.addressIndex[slot] == key { self.addressIndex[slot] = nil }
        }
        // The heap entry goes stale and is skipped when it surfaces (lazy deletion).
        return registration
    }

    private mutating func indexNames(of registration: OwnerRegistration) {
        for record in registration.records {
            self.nameIndex[record.record.name, default: []].append(NameEntry(owner: registration.key, record: record))
        }
    }

    private mutating func unindexNames(of registration: OwnerRegistration) {
        let key = registration.key
        for record in registration.records {
            let name = record.record.name
            guard var entries = self.nameIndex.removeValue(forKey: name) else { continue }
            entries.removeAll { $0.owner == key }
            if !entries.isEmpty { self.nameIndex[name] = entries }
        }
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
        for (name, entries) in self.nameIndex {
            for entry in entries where self.owners[entry.owner]?.records.contains(where: { $0 == entry.record && $0.record.name == name }) != true {
                problems.append("name index \(name) -> \(entry.owner) is stale")
            }
        }
        let indexed = self.nameIndex.values.reduce(0) { $0 + $1.count }
        if indexed != count { problems.append("name index holds \(indexed) records, the hosts \(count)") }
        for (slot, key) in self.addressIndex where self.owners[key]?.addresses.contains(slot.address) != true {
            problems.append("address index \(slot.address) -> \(key) is stale")
        }
        for (key, owner) in self.owners {
            for record in owner.records where self.nameIndex[record.record.name]?.contains(where: { $0.owner == key }) != true {
                problems.append("\(record.record.name) of \(key) is not indexed")
            }
        }
        return problems
    }
}
