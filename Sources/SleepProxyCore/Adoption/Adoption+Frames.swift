import NIOCore
import SleepProxyWire

/// What an adopted host's own frames teach (docs/adoption.md §2): its addresses, its records, and whether it is
/// up.
extension Adoption {
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
        let (addressesBefore, interfaceBefore) = (host.addresses, host.interface)
        var result = AdoptionHeard(
            mac: frame.source, interface: interface, signOfLife: false, recordsChanged: false, newTypes: [])
        // Its kernel asking for a neighbour (ARP requests, solicitations): up, but not busy. It does so seconds after
        // answering the proxy, to check the proxy's MAC, so counting it as a word would double the watch's cost.
        var neighbourly = false
        switch frame.etherType {
        case .arp:
            guard let arp = try? ARPPacket(decoding: frame.payload) else { return nil }
            if arp.senderMAC == frame.source, arp.senderIP != .any { Self.note(.v4(arp.senderIP), in: &host) }
            // A sleeping NIC answers ARP itself (docs/adoption.md §4), so a reply shows nothing; it never asks, so
            // a request (for its router after a quiet resume, a gratuitous ARP, a probe) is its running host's.
            result.signOfLife = arp.operation == .request
            // A lookup of another machine; its announcements and probes (its own address, or none) are words.
            neighbourly = result.signOfLife && arp.senderIP != .any && arp.targetIP != arp.senderIP
            // For a host checked by address, its ARP reply is the check's answer (not a sign of life: a sleeping
            // NIC gives it too, and such a host is then never taken for asleep). Asked again at the idle pace.
            if arp.operation == .reply, host.phase == .checking, host.hostName == nil {
                host.phase = .watching
                host.asked = 0
                host.due = now + AdoptionRules.idleCheckInterval
            }
        case .ipv4:
            guard let packet = try? IPv4Packet(decoding: frame.payload) else { return nil }
            let source = packet.header.source
            if source.rawValue != 0, !source.isMulticast, source != .broadcast { Self.note(.v4(source), in: &host) }
            // IGMP reports are a NIC's too (Intel's I210 offloads them with ARP).
            result.signOfLife = packet.header.proto.rawValue != 2
            if packet.header.proto == .udp, packet.header.isFirstFragment {
                self.learn(udp: packet.payload, into: &host, result: &result, now: now)
                if Self.learnWindows(udp: packet.payload, into: &host) { result.recordsChanged = true }
            }
        case .ipv6:
            guard let packet = try? IPv6Packet(decoding: frame.payload) else { return nil }
            let source = packet.header.source
            if !(source.high == 0 && source.low <= 1), !source.isMulticast { Self.note(.v6(source), in: &host) }
            let icmpv6 = packet.upperLayerProtocol == .icmpv6
            result.signOfLife = !(icmpv6 && Self.isOffloadable(icmpv6: packet.payload))
            neighbourly =
                icmpv6 && result.signOfLife && !source.isUnspecified && Self.isSolicitation(icmpv6: packet.payload)
            if packet.upperLayerProtocol == .udp {
                self.learn(udp: packet.payload, into: &host, result: &result, now: now)
                if Self.learnWindows(udp: packet.payload, into: &host) { result.recordsChanged = true }
            }
        default:
            // Not IP: LLDP, flow control, a management controller sharing the port. A NIC may send those while its
            // host sleeps, so they show nothing.
            result.signOfLife = false
        }
        host.interface = interface
        host.lastHeard = now
        let firstWord = host.lastSignOfLife == nil || host.phase == .unheard || host.phase == .away
        if host.phase == .unheard { host.phase = .watching }
        if result.signOfLife {
            // A word while its name is being asked is the check's answer, not a word of its own.
            let answering = host.phase == .checking || neighbourly
            // Goodbyes followed by a word of its own are a removal; a neighbour lookup is not such a word (its
            // kernel may still ask one as it falls asleep, and the check 2 s after the goodbyes tells anyway).
            if !result.saidGoodbye, !neighbourly { Self.confirmGoodbyes(of: &host, result: &result, now: now) }
            host.lastSignOfLife = now
            if host.phase == .checking { host.phase = .watching }
            if host.phase == .away {
                // Seen again: answered for again the next time it sleeps.
                host.phase = .watching
                host.failedWakes = 0
            }
            if host.phase != .held {
                host.asked = 0
                host.due =
                    now
                    + Self.quietBeforeCheck(
                        &host, answering: answering, goodbye: result.saidGoodbye, firstWord: firstWord, now: now)
            }
        } else if host.phase == .watching, host.due == nil {
            host.due = now + AdoptionRules.quietBeforeCheck
        }
        Self.windowsQuestions(for: &host, result: &result, now: now)
        if result.recordsChanged || host.addresses != addressesBefore || host.interface != interfaceBefore {
            self.revision &+= 1
        }
        self.hosts[frame.source] = host
        return result
    }

    /// The questions that teach a Windows PC's names (docs/windows.md §2), at its signs of life: its node status
    /// until it answers, then its LLMNR name until it answers, each at most `WindowsRules.questionsPerSpell` times
    /// an awake spell and `WindowsRules.questionInterval` apart (a PC still starting its services may miss the
    /// first); then one WS-Discovery Probe and, if its endpoint lacks XAddrs or types, one Resolve. Its answers are
    /// unicast to the proxy, and come back through the capture as its frames.
    static func windowsQuestions(for host: inout AdoptedHost, result: inout AdoptionHeard, now: Timestamp) {
        guard result.signOfLife, host.phase != .held,
            let v4 = host.addresses.lazy.compactMap({ if case .v4(let a) = $0 { a } else { nil } }).first
        else { return }
        let spaced = host.windowsAskedAt.map { now - $0 >= WindowsRules.questionInterval } ?? true
        if !host.nodeStatusSeen {
            guard spaced, host.nodeStatusAsks < WindowsRules.questionsPerSpell else { return }
            host.nodeStatusAsks += 1
            host.windowsAskedAt = now
            result.askNodeStatus = v4
        } else if host.windows.llmnrName == nil, let name = host.windows.machineName,
            host.llmnrAsks < WindowsRules.questionsPerSpell, spaced || host.llmnrAsks == 0
        {
            host.llmnrAsks += 1
            host.windowsAskedAt = now
            result.askLLMNR = (name, v4)
        } else if !host.wsdProbed, host.windows.wsd == nil {
            host.wsdProbed = true
            result.askWSD = .probe
        } else if let wsd = host.windows.wsd, wsd.xaddrs == nil || wsd.types.isEmpty, !host.wsdResolved {
            // A match without XAddrs (Windows') or a Hello without types (wsdd's): its ResolveMatch has both.
            host.wsdResolved = true
            result.askWSD = .resolve(endpoint: wsd.address)
        }
    }

    /// ICMPv6 a sleeping NIC may send itself: neighbour advertisements (136, its answers to solicitations) and
    /// MLD reports (130-132, 143). A solicitation (133, 135) asks, which only a running host does; 134 and 137
    /// are routers'.
    static func isOffloadable(icmpv6 payload: ByteBuffer) -> Bool {
        guard let type = payload.getInteger(at: payload.readerIndex, as: UInt8.self) else { return true }
        return (130...132).contains(type) || type == 134 || type == 136 || type == 137 || type == 143
    }

    /// A neighbour solicitation (135): a lookup when its source is an address (with none, it is duplicate address
    /// detection, a word of a host coming up).
    static func isSolicitation(icmpv6 payload: ByteBuffer) -> Bool {
        payload.getInteger(at: payload.readerIndex, as: UInt8.self) == 135
    }

    static func note(_ address: IPAddress, in host: inout AdoptedHost) {
        guard host.addresses.first != address else { return }
        host.addresses.removeAll { $0 == address }
        host.addresses.insert(address, at: 0)
        if case .v4 = address {
            var kept = 0
            host.addresses.removeAll { other in
                guard case .v4 = other else { return false }
                kept += 1
                return kept > AdoptionRules.maximumIPv4Addresses
            }
        }
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
        // Goodbyes for what it still publishes wait for what comes after them: silence is a sleep, more words a
        // removal (`deferGoodbyes`); only those that end its addresses are applied at once.
        let applied = goodbyes.isEmpty ? goodbyes : Self.deferGoodbyes(goodbyes, of: &host, result: &result, now: now)
        if !kept.isEmpty, !host.pendingGoodbyes.isEmpty {
            // Announced again: those goodbyes are void.
            host.pendingGoodbyes.subtract(kept)
            if host.pendingGoodbyes.isEmpty { host.goodbyesAt = nil }
        }
        let before = host.records.count
        host.records.removeAll { learned in
            let identity = RecordIdentity(learned.record)
            if applied.contains(identity) { return true }
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
                !host.typesAsked.contains(ptr.target), host.typesAsked.count < AdoptionRules.maximumTypesAsked
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
}
