import NIOCore
import SleepProxyWire

/// The numbers of adoption (docs/adoption.md), each with its reason.
public enum AdoptionRules {
    /// Hosts a person may adopt: a household has a few PCs, a NAS and a media server; each adopted MAC costs four
    /// instructions of the capture filter, whose jumps reach 255 instructions (docs/adoption.md §2).
    public static let maximumAdopted = 32
    /// Addresses kept per host, the newest first: IPv4, link-local IPv6 and a few global ones (privacy addresses
    /// rotate), as the neighbour book keeps them.
    public static let maximumAddresses = 8
    /// Records kept per host: what a registration may hold (`RegistrationConfiguration`'s default), since an
    /// adopted host's records are handed to the engine as one.
    public static let maximumRecords = 400
    /// Bytes of records kept per host (uncompressed names and rdata): a NAS publishing a dozen services holds
    /// about 5 KB; 64 KiB bounds what a host flooding its own announcements can make us keep.
    public static let maximumRecordBytes = 64 * 1024
    /// Quiet this long (no frame only a running host sends), the host is asked for its name: about as long as an
    /// idle avahi or Windows host goes without a word of its own while awake is not knowable, so the check is
    /// what tells, and 2 s + two questions a second apart keep the first answer within the 5 s users were
    /// promised (docs/adoption.md §3).
    public static let quietBeforeCheck: Duration = .seconds(2)
    /// Questions for its name, a second apart (RFC 6762 §5.2: a querier waits at least a second before asking
    /// the same again); all unanswered a second after the last, it sleeps.
    public static let checkQuestions = 2
    public static let checkInterval: Duration = .seconds(1)
    /// RFC 6762 §10.2: a cache-flush record replaces the records of its name and type received more than a
    /// second before it (those within the second are parts of the same announcement).
    public static let cacheFlushGrace: Duration = .seconds(1)
    /// The lease an adopted host is held with while it sleeps: it never asked for one, and it is let go sooner
    /// when it shows itself or stays unreachable; after a month without a word it ends as any lease does.
    public static let heldLease: UInt32 = 30 * 86_400
    /// Wakes in a row that the host answered none of (no sign within the wake's 30 s each) before it is taken for
    /// off or away (a laptop that left the house, a PC switched off at the wall): one may be a Wi-Fi hiccup, two
    /// in a row are not (docs/adoption.md §5).
    public static let wakesBeforeAway = 2
    /// mDNS responses learned from one host a second at most; the rest still show it awake. RFC 6762 §6 lets a
    /// responder multicast a record once a second, so a real host needs a handful; a forged MAC flooding large
    /// announcements costs at most this many learning passes (`sleepproxy-bench adoption`).
    public static let maximumLearnedPerSecond = 10
}

/// A record learned from an adopted host's own mDNS, as it sent it (name, class, cache-flush bit, TTL, rdata).
public struct LearnedRecord: Hashable, Sendable {
    public var record: DNSResourceRecord
    public var learnedAt: Timestamp
}

/// One host a person adopted by its MAC (docs/adoption.md): what its own frames showed of it.
public struct AdoptedHost: Hashable, Sendable {
    public enum Phase: String, Hashable, Sendable {
        /// Not heard yet since it was adopted (or since the proxy started).
        case unheard
        /// Heard lately; quiet checks run when it falls silent.
        case watching
        /// It fell silent: questions for its name are out (`asked` so far).
        case checking
        /// It answered none: the engine holds it as a sleeping host.
        case held
        /// It answered none of `AdoptionRules.wakesBeforeAway` wakes in a row: off or away, not answered for until
        /// it is seen again.
        case away
    }

    public var mac: MACAddress
    /// The interface its frames came in on; nil until heard.
    public var interface: String?
    /// Its own addresses (IPv4 sources, ARP senders, IPv6 sources), the newest first.
    public var addresses: [IPAddress] = []
    /// What its responder published, in the order first learned (the order it answers in).
    public var records: [LearnedRecord] = []
    /// The last frame that only a running host sends (not ARP, neighbour discovery, MLD or IGMP, which a sleeping
    /// NIC answers itself: docs/adoption.md §4).
    public var lastSignOfLife: Timestamp?
    /// The last frame of any kind from it.
    public var lastHeard: Timestamp?
    public var phase: Phase = .unheard
    /// Questions for its name sent in the current check.
    public var asked = 0
    /// When the next check step is due; nil when none is.
    public var due: Timestamp?
    /// Bytes its records take (`AdoptionRules.maximumRecordBytes`).
    public var recordBytes = 0
    /// Records refused by a bound, for the status and the log.
    public var refused = 0
    /// Wakes in a row it answered none of.
    public var failedWakes = 0
    /// It published mDNS records at some time: one that said goodbye to its name since (a clean shutdown) is not
    /// checked by address as a host that never published any is.
    public var hasPublished = false
    /// The service types already asked for in this run (`_http._tcp.local.` ...).
    var typesAsked: Set<DNSName> = []
    /// The last response learned, as a hash of its bytes: a response repeated word for word (an answer to the
    /// same question from another querier) teaches nothing new.
    var lastResponse: Int?
    /// Responses learned in the current second, and when that second began (`maximumLearnedPerSecond`).
    var learnedThisSecond = 0
    var secondStarted: Timestamp?

    public init(mac: MACAddress) { self.mac = mac }

    /// The name its address records give (the name most of them carry).
    public var hostName: DNSName? { OwnerSummary.claims(of: self.records.map(\.record)).hostName }
}

/// What a frame from an adopted host showed.
public struct AdoptionHeard: Hashable, Sendable {
    public var mac: MACAddress
    public var interface: String
    /// A frame only a running host sends.
    public var signOfLife: Bool
    /// Its records changed (learned, replaced or said goodbye to).
    public var recordsChanged: Bool
    /// Service types it publishes that have not been asked for yet.
    public var newTypes: [DNSName]
}

/// What comes due for the adopted hosts at a time.
public enum AdoptionStep: Hashable, Sendable {
    /// Ask the host's name (a check), on its interface.
    case askName(MACAddress, DNSName, interface: String)
    /// A host that never said its name (a Windows PC that publishes nothing): ask for its IPv4 address by ARP,
    /// unicast to its MAC, as the takeover's probes do. Its NIC may answer that in sleep, so such a host is held
    /// only when nothing does (docs/adoption.md §4).
    case probeAddress(MACAddress, IPv4Address, interface: String)
    /// It answered none of the questions: it sleeps.
    case fellQuiet(MACAddress)
}

/// The hosts a person adopted (docs/adoption.md), and what their own frames taught: learned only from frames whose
/// Ethernet source is the host's MAC, so that nobody else can add to what the proxy answers for it. Pure: time
/// comes in as `now`.
public struct Adoption: Sendable {
    public private(set) var hosts: [MACAddress: AdoptedHost] = [:]
    /// The adopted MACs as numbers: every frame on the link is checked against them. Kept with `hosts`' keys by
    /// `setAdopted`, the only place that adds or removes a host.
    private var rawMACs: Set<UInt64> = []

    public init() {}

    public var macs: Set<MACAddress> { Set(self.hosts.keys) }

    public var isEmpty: Bool { self.hosts.isEmpty }

    /// The adopted set becomes `macs` (at most `AdoptionRules.maximumAdopted`, checked by the caller): new ones
    /// start unheard, dropped ones are forgotten with what they taught. Returns the dropped ones.
    public mutating func setAdopted(_ macs: Set<MACAddress>) -> [MACAddress] {
        precondition(macs.count <= AdoptionRules.maximumAdopted, "the caller checks the bound")
        let dropped = self.hosts.keys.filter { !macs.contains($0) }.sorted { $0.rawValue < $1.rawValue }
        for mac in dropped { self.hosts[mac] = nil }
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
        host.phase = .held
        host.due = nil
        self.hosts[registration.key.primaryMAC] = host
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

    // MARK: - Frames

    /// Whether frames from `mac` are ours to read.
    public func isAdopted(_ mac: MACAddress) -> Bool { self.rawMACs.contains(mac.rawValue) }

    /// Whether the frame's Ethernet source is an adopted MAC, read straight from its bytes (every frame of the link
    /// comes through here).
    public func isFromAdopted(_ frame: [UInt8]) -> Bool {
        guard !self.rawMACs.isEmpty, frame.count >= 14 else { return false }
        var raw: UInt64 = 0
        for index in 6..<12 { raw = raw << 8 | UInt64(frame[index]) }
        return self.rawMACs.contains(raw)
    }

    /// One frame whose Ethernet source is an adopted host's MAC (the caller checked `isAdopted`), not sent by
    /// this machine. Nil for a frame that could not be read.
    public mutating func heard(_ frame: EthernetFrame, on interface: String, now: Timestamp) -> AdoptionHeard? {
        guard var host = self.hosts[frame.source] else { return nil }
        var result = AdoptionHeard(
            mac: frame.source, interface: interface, signOfLife: false, recordsChanged: false, newTypes: [])
        switch frame.etherType {
        case .arp:
            // A sleeping NIC answers ARP itself (docs/adoption.md §4): its address, never a sign of life.
            guard let arp = try? ARPPacket(decoding: frame.payload) else { return nil }
            if arp.senderMAC == frame.source, arp.senderIP != .any { Self.note(.v4(arp.senderIP), in: &host) }
            // For a host checked by address, its ARP reply is the check's answer (not a sign of life: a sleeping
            // NIC gives it too, and such a host is then never taken for asleep).
            if arp.operation == .reply, host.phase == .checking, host.hostName == nil {
                host.phase = .watching
                host.asked = 0
                host.due = now + AdoptionRules.quietBeforeCheck
            }
        case .ipv4:
            guard let packet = try? IPv4Packet(decoding: frame.payload) else { return nil }
            let source = packet.header.source
            if source.rawValue != 0, !source.isMulticast, source != .broadcast { Self.note(.v4(source), in: &host) }
            // IGMP reports are a NIC's too (Intel's I210 offloads them with ARP).
            result.signOfLife = packet.header.proto.rawValue != 2
            if packet.header.proto == .udp, packet.header.isFirstFragment {
                self.learn(udp: packet.payload, into: &host, result: &result, now: now)
            }
        case .ipv6:
            guard let packet = try? IPv6Packet(decoding: frame.payload) else { return nil }
            let source = packet.header.source
            if !(source.high == 0 && source.low <= 1), !source.isMulticast { Self.note(.v6(source), in: &host) }
            result.signOfLife = !(packet.upperLayerProtocol == .icmpv6 && Self.isOffloadable(icmpv6: packet.payload))
            if packet.upperLayerProtocol == .udp {
                self.learn(udp: packet.payload, into: &host, result: &result, now: now)
            }
        default:
            result.signOfLife = true
        }
        host.interface = interface
        host.lastHeard = now
        if host.phase == .unheard { host.phase = .watching }
        if result.signOfLife {
            host.lastSignOfLife = now
            if host.phase == .checking { host.phase = .watching }
            if host.phase == .away {
                // Seen again: answered for again the next time it sleeps.
                host.phase = .watching
                host.failedWakes = 0
            }
            if host.phase != .held {
                host.asked = 0
                host.due = now + AdoptionRules.quietBeforeCheck
            }
        } else if host.phase == .watching, host.due == nil {
            host.due = now + AdoptionRules.quietBeforeCheck
        }
        self.hosts[frame.source] = host
        return result
    }

    /// ICMPv6 a sleeping NIC may send itself: neighbour discovery (133-137) and MLD (130-132, 143).
    static func isOffloadable(icmpv6 payload: ByteBuffer) -> Bool {
        guard let type = payload.getInteger(at: payload.readerIndex, as: UInt8.self) else { return true }
        return (130...137).contains(type) || type == 143
    }

    static func note(_ address: IPAddress, in host: inout AdoptedHost) {
        guard host.addresses.first != address else { return }
        host.addresses.removeAll { $0 == address }
        host.addresses.insert(address, at: 0)
        if host.addresses.count > AdoptionRules.maximumAddresses { host.addresses.removeLast() }
    }

    /// An mDNS response the host sent (from port 5353): its records, learned as a cache would (RFC 6762 §10).
    private mutating func learn(
        udp payload: ByteBuffer, into host: inout AdoptedHost, result: inout AdoptionHeard, now: Timestamp
    ) {
        guard let datagram = try? UDPDatagram(decoding: payload), datagram.sourcePort == MDNSRules.port else { return }
        let digest = datagram.payload.withUnsafeReadableBytes { bytes -> Int in
            var hasher = Hasher()
            hasher.combine(bytes: bytes)
            return hasher.finalize()
        }
        guard digest != host.lastResponse else { return }
        if let started = host.secondStarted, now - started < .seconds(1) {
            guard host.learnedThisSecond < AdoptionRules.maximumLearnedPerSecond else { return }
            host.learnedThisSecond += 1
        } else {
            host.secondStarted = now
            host.learnedThisSecond = 1
        }
        guard let message = try? DNSMessage(decoding: datagram.payload), message.flags.isResponse else { return }
        host.lastResponse = digest
        // Answers and additionals are what it publishes; a response's authority section is empty (RFC 6762
        // §6), and NSEC is the responder's to make for whatever the learned names lack.
        let records = (message.answers + message.additionals).filter {
            $0.rrclass == .in && $0.type != .opt && $0.type != .nsec
        }
        guard !records.isEmpty else { return }
        // Three passes over what it taught, however many records the packet holds (a forged MAC may repeat the
        // largest packet there is): goodbyes, then what cache-flush records replace, then each record found or
        // added through an index.
        let goodbyes = Set(records.filter { $0.ttl == 0 }.map(RecordIdentity.init))
        let fresh = records.filter { $0.ttl > 0 }
        let flushed = Set(fresh.filter(\.cacheFlush).map { NameAndType(name: $0.name, type: $0.type) })
        let kept = Set(fresh.map(RecordIdentity.init))
        let before = host.records.count
        host.records.removeAll { learned in
            let identity = RecordIdentity(learned.record)
            if goodbyes.contains(identity) { return true }
            // RFC 6762 §10.2: a cache-flush record replaces its name and type's records received more than a
            // second before it (those within the second are parts of the same announcement).
            return !flushed.isEmpty
                && flushed.contains(NameAndType(name: learned.record.name, type: learned.record.type))
                && !kept.contains(identity) && now - learned.learnedAt > AdoptionRules.cacheFlushGrace
        }
        if host.records.count != before {
            host.recordBytes = host.records.reduce(0) { $0 + $1.record.uncompressedWireLength }
            result.recordsChanged = true
        }
        var positions: [RecordIdentity: Int] = [:]
        positions.reserveCapacity(host.records.count + fresh.count)
        for (index, learned) in host.records.enumerated() { positions[RecordIdentity(learned.record)] = index }
        for record in fresh {
            let identity = RecordIdentity(record)
            if let index = positions[identity] {
                if host.records[index].record != record { result.recordsChanged = true }
                host.records[index] = LearnedRecord(record: record, learnedAt: now)
                continue
            }
            let size = record.uncompressedWireLength
            guard host.records.count < AdoptionRules.maximumRecords,
                host.recordBytes + size <= AdoptionRules.maximumRecordBytes
            else {
                host.refused += 1
                continue
            }
            positions[identity] = host.records.count
            host.records.append(LearnedRecord(record: record, learnedAt: now))
            host.hasPublished = true
            host.recordBytes += size
            result.recordsChanged = true
            // `_services._dns-sd._udp.local. PTR _http._tcp.local.`: a type to ask it for, so that its instances
            // (SRV, TXT) are learned without waiting for someone else to browse.
            if case .ptr(let ptr) = record.rdata, record.name == Self.servicesName,
                !host.typesAsked.contains(ptr.target)
            {
                host.typesAsked.insert(ptr.target)
                result.newTypes.append(ptr.target)
            }
        }
    }

    /// A record's name and type, for what a cache-flush record replaces.
    struct NameAndType: Hashable {
        var name: DNSName
        var type: DNSRecordType
    }

    /// `_services._dns-sd._udp.local.` (RFC 6763 §9).
    public static let servicesName: DNSName = "_services._dns-sd._udp.local."

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
                    steps.append(.askName(mac, name, interface: interface))
                } else {
                    steps.append(.probeAddress(mac, v4!, interface: interface))
                }
            } else {
                host.phase = .held
                host.asked = 0
                host.due = nil
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
            lastMessageID: 0, adoptedAddresses: host.addresses)
    }
}
