import NIOCore
import SleepProxyWire

/// The hosts a person adopted (docs/adoption.md), and what their own frames taught: learned only from frames whose
/// Ethernet source is the host's MAC, so that nobody else can add to what the proxy answers for it. Pure: time
/// comes in as `now`.
public struct Adoption: Sendable {
    public internal(set) var hosts: [MACAddress: AdoptedHost] = [:]
    /// The adopted MACs as numbers: every frame on the link is checked against them. Kept with `hosts`' keys by
    /// `setAdopted`, the only place that adds or removes a host.
    private(set) var rawMACs: Set<UInt64> = []
    /// Counts the changes to what the hosts taught (their records, addresses, interface), not their refreshes:
    /// the I/O layer saves the learned hosts when it moves (`ProxyEngine.adoptedLearned`).
    public internal(set) var revision: UInt64 = 0

    public init() {}

    public var macs: Set<MACAddress> { Set(self.hosts.keys) }

    public var isEmpty: Bool { self.hosts.isEmpty }

    /// The adopted set becomes `macs` (at most `AdoptionRules.maximumAdopted`, checked by the caller): new ones
    /// start unheard, dropped ones are forgotten with what they taught. Returns the dropped ones.
    public mutating func setAdopted(_ macs: Set<MACAddress>) -> [MACAddress] {
        precondition(macs.count <= AdoptionRules.maximumAdopted, "the caller checks the bound")
        let dropped = self.hosts.keys.filter { !macs.contains($0) }.sorted { $0.rawValue < $1.rawValue }
        for mac in dropped { self.hosts[mac] = nil }
        if !dropped.isEmpty { self.revision &+= 1 }
        for mac in macs where self.hosts[mac] == nil { self.hosts[mac] = AdoptedHost(mac: mac) }
        self.rawMACs = Set(macs.map(\.rawValue))
        return dropped
    }

    /// A host restored held from the journal: what the registration holds is what it taught.
    public mutating func restoreHeld(_ registration: OwnerRegistration) {
        guard var host = self.hosts[registration.key.primaryMAC] else { return }
        host.interface = registration.key.interface
        host.records = registration.records.map { LearnedRecord(record: $0.record, learnedAt: $0.registeredAt) }
        host.recordBytes = host.records.reduce(0) { $0 + $1.record.uncompressedWireLength }
        host.addresses = registration.adoptedAddresses ?? registration.addresses
        host.hasPublished = !host.records.isEmpty
        host.windows = registration.windows ?? WindowsIdentity()
        host.phase = .held
        host.due = nil
        self.hosts[registration.key.primaryMAC] = host
    }

    /// What a host taught before the proxy stopped (`ProxyEngine.adoptedLearned`, saved by the I/O layer): its
    /// interface, addresses and records, so that a host awake and quiet across a restart is checked at once and,
    /// asleep, held with its name and services (docs/adoption.md §3). Only for a host not heard from since.
    public mutating func restoreLearned(_ saved: OwnerRegistration, now: Timestamp) {
        guard var host = self.hosts[saved.key.primaryMAC], host.phase == .unheard else { return }
        host.interface = saved.key.interface
        // The bounds of learning hold for a saved copy too (`AdoptionRules`): records past them are dropped.
        host.records = []
        host.recordBytes = 0
        for saved in saved.records.prefix(AdoptionRules.maximumRecords) {
            let size = saved.record.uncompressedWireLength
            guard host.recordBytes + size <= AdoptionRules.maximumRecordBytes else { break }
            host.records.append(LearnedRecord(record: saved.record, learnedAt: saved.registeredAt))
            host.recordBytes += size
        }
        host.addresses = Array((saved.adoptedAddresses ?? saved.addresses).prefix(AdoptionRules.maximumAddresses))
        host.windows = saved.windows ?? WindowsIdentity()
        host.hasPublished = !host.records.isEmpty
        host.phase = .watching
        host.due = now + AdoptionRules.quietBeforeCheck
        self.hosts[saved.key.primaryMAC] = host
    }

    /// The engine stopped holding it (it showed itself, or its lease or an administrator ended it): watched
    /// again from `now`.
    public mutating func released(_ mac: MACAddress, now: Timestamp) {
        guard var host = self.hosts[mac], host.phase == .held else { return }
        host.phase = .watching
        host.failedWakes = 0
        host.asked = 0
        host.lastSignOfLife = max(host.lastSignOfLife ?? now, now)
        host.due = now + AdoptionRules.quietBeforeCheck
        self.hosts[mac] = host
    }

    /// The engine could not hold the quiet host (it is full): watched again, and checked again only after
    /// `AdoptionRules.refusedRetry`.
    public mutating func holdRefused(_ mac: MACAddress, now: Timestamp) {
        guard var host = self.hosts[mac], host.phase == .held else { return }
        host.phase = .watching
        host.asked = 0
        host.due = now + AdoptionRules.refusedRetry
        self.hosts[mac] = host
    }

    /// A wake of the held host ended without a sign of it. True when that makes it off or away: it is then let go
    /// and not held again until a sign of life of its own.
    public mutating func wakeFailed(_ mac: MACAddress) -> Bool {
        guard var host = self.hosts[mac], host.phase == .held else { return false }
        host.failedWakes += 1
        if host.failedWakes >= AdoptionRules.wakesBeforeAway {
            host.phase = .away
            host.due = nil
        }
        self.hosts[mac] = host
        return host.phase == .away
    }

    // MARK: - Time

    /// The next time `due(now:)` has work.
    public func nextDeadline() -> Timestamp? { self.hosts.values.compactMap(\.due).min() }

    /// The checks due at `now`. `isHeld`: the engine holds the host (registered or adopted), which then is not
    /// checked.
    public mutating func due(now: Timestamp, isHeld: (OwnerKey) -> Bool) -> [AdoptionStep] {
        var steps: [AdoptionStep] = []
        for mac in self.hosts.keys.sorted(by: { $0.rawValue < $1.rawValue }) {
            guard var host = self.hosts[mac], let due = host.due, due <= now else { continue }
            defer { self.hosts[mac] = host }
            guard let interface = host.interface, host.phase != .held, host.phase != .away else {
                host.due = nil
                continue
            }
            if isHeld(OwnerKey(interface: interface, primaryMAC: mac)) {
                // It registered by itself (our client, an older Mac): its registration rules; checked again later.
                host.phase = .watching
                host.asked = 0
                host.due = now + AdoptionRules.quietBeforeCheck
                continue
            }
            // A host that never said its name is asked for its IPv4 address instead; one with neither cannot be
            // checked (docs/adoption.md §4), and one that said goodbye to its name (a clean shutdown) is off.
            let name = host.hostName
            let v4 =
                host.hasPublished
                ? nil : host.addresses.lazy.compactMap { if case .v4(let a) = $0 { a } else { nil } }.first
            guard name != nil || v4 != nil else {
                host.due = nil
                continue
            }
            if host.asked < AdoptionRules.checkQuestions {
                host.phase = .checking
                host.asked += 1
                host.due = now + AdoptionRules.checkInterval
                if let name {
                    steps.append(.askName(mac, name, interface: interface, everyFamily: host.asked > 1))
                } else if host.windows.answersNodeStatus {
                    // A PC that answered the proxy's node status is asked that: its NIC may answer ARP in its
                    // sleep, never node status (docs/windows.md §4).
                    steps.append(.askNetBIOS(mac, v4!, interface: interface))
                } else {
                    steps.append(.probeAddress(mac, v4!, interface: interface))
                }
            } else {
                host.phase = .held
                host.asked = 0
                host.due = nil
                // Asked again in its next awake spell: its names may change while it sleeps (a rename, a reboot).
                host.nodeStatusAsks = 0
                host.llmnrAsks = 0
                host.windowsAskedAt = nil
                host.nodeStatusSeen = false
                host.wsdProbed = false
                host.wsdResolved = false
                Self.forgetGoodbyes(of: &host)
                steps.append(.fellQuiet(mac))
            }
        }
        return steps
    }

    /// The registration that holds a quiet host: its learned records as it published them, its own addresses
    /// (besides those its reverse mappings name) to claim, a sequence that starts a new sleep.
    public func registration(of mac: MACAddress, sequence: UInt8, now: Timestamp) -> OwnerRegistration? {
        guard let host = self.hosts[mac], let interface = host.interface else { return nil }
        return OwnerRegistration(
            key: OwnerKey(interface: interface, primaryMAC: mac),
            owner: OwnerOption(sequence: sequence, primaryMAC: mac),
            records: host.records.map { ProxiedRecord(record: $0.record, registeredAt: $0.learnedAt) },
            registeredAt: now, updatedAt: now,
            leaseExpiry: now + .seconds(Int64(AdoptionRules.heldLease)), grantedLease: AdoptionRules.heldLease,
            lastMessageID: 0, adoptedAddresses: host.addresses, windows: host.windows.isEmpty ? nil : host.windows)
    }
}
