/// The owners of one name in the record store. Almost every name has exactly one (a host's own name, its reverse
/// names, its service instances), so one owner is kept inline and a set is allocated only for a second: with
/// ten thousand hosts of about twenty names each, a set per name was a fifth of the proxy's memory (docs/scale.md).
struct OwnerSet: Sendable, Sequence {
    private enum Storage: Sendable {
        case none
        case one(OwnerKey)
        case many(Set<OwnerKey>)
    }

    private var storage = Storage.none

    init() {}

    var isEmpty: Bool {
        if case .none = self.storage { return true }
        return false
    }

    var count: Int {
        switch self.storage {
        case .none: 0
        case .one: 1
        case .many(let set): set.count
        }
    }

    func contains(_ key: OwnerKey) -> Bool {
        switch self.storage {
        case .none: false
        case .one(let only): only == key
        case .many(let set): set.contains(key)
        }
    }

    mutating func insert(_ key: OwnerKey) {
        switch self.storage {
        case .none:
            self.storage = .one(key)
        case .one(let only):
            if only != key { self.storage = .many([only, key]) }
        case .many(var set):
            self.storage = .none  // drop the reference first, so the set is changed in place
            set.insert(key)
            self.storage = .many(set)
        }
    }

    mutating func remove(_ key: OwnerKey) {
        switch self.storage {
        case .none:
            break
        case .one(let only):
            if only == key { self.storage = .none }
        case .many(var set):
            self.storage = .none
            set.remove(key)
            if set.count == 1, let last = set.first {
                self.storage = .one(last)
            } else if !set.isEmpty {
                self.storage = .many(set)
            }
        }
    }

    struct Iterator: IteratorProtocol {
        fileprivate var single: OwnerKey?
        fileprivate var set: Set<OwnerKey>.Iterator?

        mutating func next() -> OwnerKey? {
            if let single {
                self.single = nil
                return single
            }
            return self.set?.next()
        }
    }

    func makeIterator() -> Iterator {
        switch self.storage {
        case .none: Iterator(single: nil, set: nil)
        case .one(let only): Iterator(single: only, set: nil)
        case .many(let set): Iterator(single: nil, set: set.makeIterator())
        }
    }
}
