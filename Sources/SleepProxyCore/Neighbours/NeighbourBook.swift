import SleepProxyWire

/// A machine heard on a served link lately, by its MAC: what a person needs to pick the hosts the proxy should keep
/// present (docs/neighbours.md).
public struct Neighbour: Hashable, Sendable {
    public var interface: String
    public var mac: MACAddress
    /// Newest first.
    public var addresses: [IPAddress]
    /// The host names its own responder published (the names of address records giving its own addresses).
    public var names: [DNSName]
    /// The service instances it published for itself (SRV records naming one of its host names).
    public var services: [DNSName]
    public var firstHeard: Timestamp
    public var lastHeard: Timestamp

    public var key: OwnerKey { OwnerKey(interface: self.interface, primaryMAC: self.mac) }
}

/// The bounds of the neighbour book, each with its reason.
public enum NeighbourRules {
    /// What "lately" means: the machines heard in the last day, so a laptop that slept all night is still listed
    /// in the morning (its ARP and mDNS stop while it sleeps).
    public static let memory: Duration = .seconds(86_400)
    /// Machines kept in all: a small office has about 500 on its link; past this, the eighth heard from longest
    /// ago goes at once (`evictedShare`). A flood of forged ARP senders costs at most this many entries.
    public static let maximumNeighbours = 1_024
    /// Evicted together when the book is full: one sort for every 128 new machines, instead of a search of all
    /// 1,024 for each frame of a flood of forged senders, each new.
    public static let evictedShare = 8
    /// Per machine: a host has an IPv4 address, a link-local and a few global IPv6 ones (privacy addresses
    /// rotate daily); the oldest goes first.
    public static let maximumAddresses = 8
    /// Per machine: its host name, and the one it had before a rename.
    public static let maximumNames = 4
    /// Per machine: a NAS publishes a dozen services (SMB, AFP, HTTP, its device info, media servers).
    public static let maximumServices = 32
}

/// The machines heard on the served links in the last day (`NeighbourRules`): each MAC with the addresses it gave
/// as its own (ARP senders, neighbour discovery with a link-layer address) and the names and services its own
/// mDNS responder published, matched to it through those addresses. Pure: time comes in as `now`.
///
/// What it lists is what machines said of themselves, and anything on the link can say anything; the book only
/// informs a person's choice, and nothing is answered or woken because of it.
public struct NeighbourBook: Sendable {
    var entries: [OwnerKey: Neighbour] = [:]
    /// Which MAC last gave each address as its own.
    var macs: [AddressKey: MACAddress] = [:]

    struct AddressKey: Hashable, Sendable {
        var interface: String
        var address: IPAddress
    }

    public init() {}

    public var count: Int { self.entries.count }

    /// A frame showed `address` at `mac` (an ARP sender, a neighbour solicitation's source link-layer address, an
    /// advertisement's target link-layer address).
    public mutating func heard(_ mac: MACAddress, at address: IPAddress, on interface: String, now: Timestamp) {
        guard Self.isUsable(mac), Self.isUsable(address) else { return }
        let key = OwnerKey(interface: interface, primaryMAC: mac)
        guard var entry = self.entries[key] ?? self.makeRoom(for: key, now: now) else { return }
        entry.lastHeard = now
        if entry.addresses.first != address {
            entry.addresses.removeAll { $0 == address }
            entry.addresses.insert(address, at: 0)
            if entry.addresses.count > NeighbourRules.maximumAddresses { entry.addresses.removeLast() }
        }
        self.entries[key] = entry
        let addressKey = AddressKey(interface: interface, address: address)
        if self.macs[addressKey] != mac {
            // The index stays near what the entries hold (at most 8 addresses each): addresses no entry lists any
            // more are dropped when it holds twice that, so a flood pays for one pass every 8,192 new addresses.
            if self.macs.count >= 2 * NeighbourRules.maximumNeighbours * NeighbourRules.maximumAddresses {
                self.macs = self.macs.filter {
                    self.entries[OwnerKey(interface: $0.key.interface, primaryMAC: $0.value)]?
                        .addresses.contains($0.key.address) ?? false
                }
            }
            self.macs[addressKey] = mac
        }
    }

    /// An mDNS response from `source`: the names and services it publishes for itself go to the MAC that gave
    /// `source` as its own. Only its own: an address record counts when it gives one of the machine's addresses,
    /// a service when its SRV names one of the machine's host names, so a sleep proxy answering for sleeping
    /// hosts (an Apple TV, this proxy's peers) is not credited with their names.
    public mutating func published(_ message: DNSMessage, from source: IPAddress, on interface: String, now: Timestamp)
    {
        guard let mac = self.macs[AddressKey(interface: interface, address: source)] else { return }
        let key = OwnerKey(interface: interface, primaryMAC: mac)
        guard var entry = self.entries[key] else { return }
        let records = message.answers + message.additionals
        var changed = false
        for record in records where record.ttl > 0 {
            let address: IPAddress
            switch record.rdata {
            case .a(let a): address = .v4(a.address)
            case .aaaa(let aaaa): address = .v6(aaaa.address)
            default: continue
            }
            guard entry.addresses.contains(address), !entry.names.contains(record.name) else { continue }
            entry.names.insert(record.name, at: 0)
            if entry.names.count > NeighbourRules.maximumNames { entry.names.removeLast() }
            changed = true
        }
        for record in records {
            guard case .srv(let srv) = record.rdata, entry.names.contains(srv.target) else { continue }
            if record.ttl == 0 {
                // Its goodbye: the service is gone.
                entry.services.removeAll { $0 == record.name }
                changed = true
            } else if !entry.services.contains(record.name), entry.services.count < NeighbourRules.maximumServices {
                entry.services.append(record.name)
                changed = true
            }
        }
        guard changed else { return }
        entry.lastHeard = now
        self.entries[key] = entry
    }

    /// The machines heard in the last day, by interface and MAC.
    public func neighbours(now: Timestamp) -> [Neighbour] {
        self.entries.values.filter { now - $0.lastHeard < NeighbourRules.memory }
            .sorted { ($0.interface, $0.mac.rawValue) < ($1.interface, $1.mac.rawValue) }
    }

    /// A new entry for `key`, room made for it: machines not heard for a day go first, then the eighth heard
    /// from longest ago.
    private mutating func makeRoom(for key: OwnerKey, now: Timestamp) -> Neighbour? {
        if self.entries.count >= NeighbourRules.maximumNeighbours {
            self.entries = self.entries.filter { now - $0.value.lastHeard < NeighbourRules.memory }
        }
        if self.entries.count >= NeighbourRules.maximumNeighbours {
            let oldest = self.entries.values.sorted { $0.lastHeard < $1.lastHeard }
                .prefix(NeighbourRules.maximumNeighbours / NeighbourRules.evictedShare)
            for neighbour in oldest { self.entries[neighbour.key] = nil }
        }
        return Neighbour(
            interface: key.interface, mac: key.primaryMAC, addresses: [], names: [], services: [], firstHeard: now,
            lastHeard: now)
    }

    /// Not a machine's own: zero, broadcast and group MACs.
    static func isUsable(_ mac: MACAddress) -> Bool {
        mac != .zero && mac != .broadcast && mac.bytes[0] & 1 == 0
    }

    /// Not a machine's own: unspecified, loopback and group addresses (a DAD probe comes from ::).
    static func isUsable(_ address: IPAddress) -> Bool {
        switch address {
        case .v4(let v4): return v4.rawValue != 0 && v4.rawValue >> 24 != 127 && !v4.isMulticast && v4 != .broadcast
        case .v6(let v6): return !(v6.high == 0 && v6.low <= 1) && !v6.isMulticast
        }
    }
}
