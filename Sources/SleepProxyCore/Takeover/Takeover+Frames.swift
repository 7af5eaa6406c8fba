import NIOCore
import SleepProxyWire

/// Captured frames: ARP and neighbour discovery for the proxied addresses, the owner showing itself, and traffic
/// that wakes a host (docs/protocol.md §4.3-§4.4, §5.2; docs/coexistence.md).
extension Takeover {
    // MARK: - Frames

    /// One frame captured on `interfaceIndex`. `outgoing` marks frames the proxy machine itself sent (its kernel
    /// connecting to a sleeping host, or our own frames, which are recognised and skipped).
    public mutating func receive(frame bytes: [UInt8], interfaceIndex: Int, outgoing: Bool, now: Timestamp)
        -> [TakeoverAction]
    {
        guard let context = self.interfaces[interfaceIndex] else { return [] }
        self.statistics.framesSeen += 1
        let frame: EthernetFrame
        do {
            frame = try EthernetFrame(decoding: ByteBuffer(bytes: bytes))
        } catch {
            self.statistics.malformedFrames += 1
            return []
        }
        do {
            switch frame.etherType {
            case .arp:
                return self.handleARP(
                    try ARPPacket(decoding: frame.payload), frame: frame, context: context, outgoing: outgoing, now: now
                )
            case .ipv4:
                let packet = try IPv4Packet(decoding: frame.payload)
                // docs/protocol.md §4.4: only a first fragment carries the ports.
                guard packet.header.isFirstFragment else { return [] }
                return self.handleTransport(
                    proto: packet.header.proto, source: .v4(packet.header.source),
                    destination: .v4(packet.header.destination), payload: packet.payload,
                    bytes: bytes, sourceMAC: frame.source, context: context, outgoing: outgoing, now: now)
            case .ipv6:
                let packet = try IPv6Packet(decoding: frame.payload)
                if packet.upperLayerProtocol == .icmpv6 {
                    // other ICMPv6, or invalid ND
                    guard let message = try? NeighborDiscoveryMessage(decoding: packet) else { return [] }
                    return self.handleND(
                        message, packet: packet, frame: frame, context: context, outgoing: outgoing, now: now)
                }
                return self.handleTransport(
                    proto: packet.upperLayerProtocol, source: .v6(packet.header.source),
                    destination: .v6(packet.header.destination), payload: packet.payload,
                    bytes: bytes, sourceMAC: frame.source, context: context, outgoing: outgoing, now: now)
            default:
                return []
            }
        } catch {
            self.statistics.malformedFrames += 1
            return []
        }
    }

    func owner(of address: IPAddress, on context: InterfaceContext) -> OwnerKey? {
        self.addressOwners[InterfaceAddressKey(interface: context.name, address: address)]
    }

    mutating func handleARP(
        _ arp: ARPPacket, frame: EthernetFrame, context: InterfaceContext, outgoing: Bool, now: Timestamp
    ) -> [TakeoverAction] {
        if outgoing || frame.source == context.macAddress || arp.senderMAC == context.macAddress {
            // docs/protocol.md §4.3: the proxy's own kernel asking for a proxied address gets a local neighbour entry
            // (our probes have sender 0.0.0.0 and our announcements sender = target, so they are not this).
            if arp.operation == .request, arp.senderIP != .any, arp.senderIP != arp.targetIP,
                let key = self.owner(of: .v4(arp.targetIP), on: context),
                let host = self.hosts[key], host.isAnswering(.v4(arp.targetIP))
            {
                return [.setNeighbour(interfaceIndex: context.index, address: .v4(arp.targetIP), mac: host.wakeMAC)]
            }
            return []
        }
        var actions: [TakeoverAction] = []
        var handled: OwnerKey? = nil
        if arp.senderIP != .any { self.learnPeer(address: .v4(arp.senderIP), mac: arp.senderMAC, on: context.name) }
        // Pass 1: a request for a proxied address.
        if arp.operation == .request, arp.senderIP != arp.targetIP,
            let key = self.owner(of: .v4(arp.targetIP), on: context), let host = self.hosts[key]
        {
            handled = key
            if host.macs.contains(arp.senderMAC) || host.macs.contains(frame.source) {
                actions += self.ownerSeen(key, address: .v4(arp.targetIP), signal: .arpRequest, now: now)
            } else if host.isAnswering(.v4(arp.targetIP)) {
                self.statistics.arpReplies += 1
                let reply = ARPPacket.reply(to: arp, from: context.macAddress)
                actions.append(
                    .sendFrame(
                        reply.frame(destination: arp.senderMAC, source: context.macAddress).bytes,
                        interfaceIndex: context.index))
            }
        }
        // Pass 2: anyone asserting a proxied address as its own.
        if arp.senderIP != .any, let key = self.owner(of: .v4(arp.senderIP), on: context), let host = self.hosts[key] {
            if host.macs.contains(arp.senderMAC) {
                if handled != key {
                    let signal: OwnerSignal = arp.operation == .reply ? .arpReply : .arpSender
                    actions += self.ownerSeen(key, address: .v4(arp.senderIP), signal: signal, now: now)
                }
            } else if host.registered, host.states[.v4(arp.senderIP)]?.phase != .stopped {
                actions += self.foreignClaim(
                    key, address: .v4(arp.senderIP), mac: arp.senderMAC, context: context, now: now)
            }
        }
        return actions
    }

    mutating func handleND(
        _ message: NeighborDiscoveryMessage, packet: IPv6Packet, frame: EthernetFrame, context: InterfaceContext,
        outgoing: Bool, now: Timestamp
    ) -> [TakeoverAction] {
        let source = packet.header.source
        let target = IPAddress.v6(message.target)
        if outgoing || frame.source == context.macAddress {
            if message.kind == .solicitation, !source.isUnspecified, source != message.target,
                let key = self.owner(of: target, on: context),
                let host = self.hosts[key], host.isAnswering(target)
            {
                return [.setNeighbour(interfaceIndex: context.index, address: target, mac: host.wakeMAC)]
            }
            return []
        }
        let senderMACs =
            [frame.source] + [message.sourceLinkLayerAddress, message.targetLinkLayerAddress].compactMap { $0 }
        if !source.isUnspecified { self.learnPeer(address: .v6(source), mac: frame.source, on: context.name) }
        var actions: [TakeoverAction] = []
        var handled: OwnerKey? = nil
        switch message.kind {
        case .solicitation:
            guard let key = self.owner(of: target, on: context), let host = self.hosts[key] else { break }
            handled = key
            if senderMACs.contains(where: host.macs.contains) {
                actions += self.ownerSeen(key, address: target, signal: .neighbourSolicitation, now: now)
            } else if source.isUnspecified {
                // Someone else wants the address (DAD, RFC 4862 §5.4). Defend it with an NA to all nodes (RFC 4861
                // §7.2.4: S clear, O set), and wake the owner: docs/protocol.md §4.3 recommends treating it as a conflict.
                if host.isAnswering(target) {
                    self.statistics.neighbourAdvertisements += 1
                    actions.append(
                        Self.unsolicitedAdvertisement(of: message.target, at: context.macAddress, from: context))
                }
                if host.registered, host.states[target]?.phase != .stopped {
                    self.statistics.conflicts += 1
                    actions += self.startWake(
                        key, trigger: .addressConflict(address: target, from: frame.source), now: now)
                }
            } else if host.isAnswering(target) {
                // Answered while a wake is under way too: until the host itself speaks, the proxy is where its
                // traffic must go, or a client's connect() fails with "No route to host" (docs/waking.md §6).
                // RFC 4861 §7.2.4: a solicited NA, unicast to the solicitor, S and O set (Apple's are inverted).
                self.statistics.neighbourAdvertisements += 1
                let na = NeighborDiscoveryMessage(
                    kind: .advertisement, flags: [.solicited, .override], target: message.target,
                    targetLinkLayerAddress: context.macAddress)
                let destinationMAC = message.sourceLinkLayerAddress ?? frame.source
                actions.append(
                    .sendFrame(
                        na.frame(
                            ethernetSource: context.macAddress, ethernetDestination: destinationMAC,
                            source: message.target, destination: source
                        ).bytes, interfaceIndex: context.index))
            }
            // Pass 2 for an NS: its source address.
            if !source.isUnspecified, let key = self.owner(of: .v6(source), on: context), let host = self.hosts[key],
                key != handled
            {
                if senderMACs.contains(where: host.macs.contains) {
                    actions += self.ownerSeen(key, address: .v6(source), signal: .neighbourSolicitation, now: now)
                } else if host.registered, host.states[.v6(source)]?.phase != .stopped {
                    actions += self.foreignClaim(
                        key, address: .v6(source), mac: frame.source, context: context, now: now)
                }
            }
        case .advertisement:
            guard let key = self.owner(of: target, on: context), let host = self.hosts[key] else { break }
            if senderMACs.contains(where: host.macs.contains) {
                actions += self.ownerSeen(key, address: target, signal: .neighbourAdvertisement, now: now)
            } else if host.registered, host.states[target]?.phase != .stopped {
                actions += self.foreignClaim(key, address: target, mac: frame.source, context: context, now: now)
            }
        }
        return actions
    }

    /// docs/protocol.md §5.2: the owner spoke for one of its own addresses, so it is up there. Stop answering for
    /// that address only, and probe it again later (the records stay until an Owner option, the host's own mDNS,
    /// or expiry: docs/coexistence.md). While a wake is in progress a sign that only a running host gives means
    /// the wake worked: the whole host is up, so every address is let go (the wake ends with success and the
    /// captured SYNs are replayed). An answer for an address the proxy was not answering for is no such sign: a
    /// sleeping NIC with ARP or ND offload gives it (docs/waking.md §6), and ending the wake on it would replay
    /// the SYNs into a sleeping host and release its other addresses.
    mutating func ownerSeen(_ key: OwnerKey, address: IPAddress, signal: OwnerSignal, now: Timestamp)
        -> [TakeoverAction]
    {
        guard var host = self.hosts[key] else { return [] }
        self.statistics.ownerSeen += 1
        var actions: [TakeoverAction] = []
        let woken = host.wake != nil && (!signal.isAnswer || host.isAnswering(address))
        // The addresses the proxy answered for, which a successful wake points back at the host.
        let answered = woken ? host.addresses.filter(host.isAnswering) : []
        let affected = woken ? host.addresses : [address]
        var released: [(IPAddress, Bool)] = []
        for address in affected {
            guard var state = host.states[address] else { continue }
            released.append((address, host.isAnswering(address)))
            actions += self.release(&host, only: address, now: now)
            state.neighbourInstalled = false
            switch state.phase {
            case .stopped:
                break
            case .waiting:
                // Already quiet: the host is still up; push the next probe out without counting a restart.
                let delay =
                    state.restarts > 0
                    ? TakeoverRules.restartDelayAfterAnnouncing : TakeoverRules.restartDelayBeforeAnnouncing
                if let next = state.next { state.next = max(next, now + delay) }
            case .probing, .announcing, .claimed:
                let announced: Bool
                if case .probing = state.phase { announced = false } else { announced = true }
                state.restarts += 1
                if state.restarts > TakeoverRules.maximumProbeRestarts {
                    state.phase = .stopped
                    state.next = nil
                } else {
                    state.phase = .waiting
                    state.next =
                        now
                        + (announced
                            ? TakeoverRules.restartDelayAfterAnnouncing : TakeoverRules.restartDelayBeforeAnnouncing)
                }
            }
            host.states[address] = state
        }
        host.refreshNext()
        // The wake ends after the addresses are let go, so the replayed SYNs reach a host the proxy no longer
        // stands in for (replayed while an address was still claimed, a SYN would start a new wake).
        if woken { actions += self.finishWake(&host, awake: true, handingBack: answered, now: now) }
        self.hosts[key] = host
        // Only its wake was left (its lease had ended): with the wake done, nothing of it remains to keep.
        if !host.registered, host.wake == nil { self.forget(key) }
        if released.isEmpty { released = [(address, false)] }
        for (address, wasAnswering) in released {
            actions.append(.ownerSeen(key, address: address, signal: signal, wasAnswering: wasAnswering))
        }
        return actions
    }

    mutating func handleTransport(
        proto: IPProtocol, source: IPAddress, destination: IPAddress, payload: ByteBuffer, bytes: [UInt8],
        sourceMAC: MACAddress, context: InterfaceContext, outgoing: Bool, now: Timestamp
    ) -> [TakeoverAction] {
        guard proto == .tcp || proto == .udp, let key = self.owner(of: destination, on: context),
            let host = self.hosts[key]
        else { return [] }
        // Only while the proxy stands in for the host on at least one address (or is already waking it): before
        // the takeover and after the owner was seen everywhere, the host itself is up and gets its own traffic.
        // An address the owner still answers for itself (NIC offload) wakes too when the host sleeps elsewhere.
        guard host.isAnsweringAny || host.wake != nil else { return [] }
        // Beyond Apple, whose proxy neither answers nor wakes here (so pyatv's and Home Assistant's unicast scans
        // fail against every proxied device): an mDNS question to the host's own address is the responder's,
        // answered from that address, and no wake candidate (docs/waking.md §7).
        if proto == .udp, let datagram = try? UDPDatagram(decoding: payload),
            datagram.destinationPort == MDNSRules.port, !outgoing
        {
            return [
                .unicastQuery(
                    UnicastQuery(
                        payload: Array(datagram.payload.readableBytesView), source: source,
                        sourcePort: datagram.sourcePort, sourceMAC: sourceMAC, destination: destination,
                        interfaceIndex: context.index))
            ]
        }
        let candidate: WakeCandidate
        do {
            let port: WakePolicy.Port
            let sourcePort: UInt16
            var tcp: WakeCandidate.TCPShape? = nil
            var keepalive = false
            if proto == .tcp {
                let segment = try TCPSegment(decoding: payload)
                port = WakePolicy.Port(.tcp, segment.destinationPort)
                sourcePort = segment.sourcePort
                tcp = WakeCandidate.TCPShape(segment)
            } else {
                let datagram = try UDPDatagram(decoding: payload)
                port = WakePolicy.Port(.udp, datagram.destinationPort)
                sourcePort = datagram.sourcePort
                keepalive =
                    datagram.destinationPort == TakeoverRules.natTraversalPort && datagram.payload.readableBytes == 1
                    && datagram.payload.getInteger(at: datagram.payload.readerIndex, as: UInt8.self) == 0xFF
            }
            // The proxy machine's own kernel connecting is on the link whatever its source address.
            candidate = WakeCandidate(
                source: source, sourceMAC: sourceMAC, sourcePort: sourcePort, host: key, hostMACs: host.macs,
                destination: destination, port: port, tcp: tcp, servicePorts: host.ports.union(host.otherPorts),
                onLink: outgoing || context.isOnLink(source), isNATKeepalive: keepalive)
        } catch {
            self.statistics.malformedFrames += 1
            return []
        }
        let decision = self.gate.consider(candidate, now: now)
        switch decision.verdict {
        case .ignore:
            return []
        case .wake, .hold:
            self.keepForReplay(candidate, frame: bytes, now: now)
        case .decline:
            break
        }
        return self.carryOut(decision, for: candidate, now: now)
    }

    /// A UDP datagram from `source`:`sourcePort` (an address the proxy answers for) to `destination`, as a frame
    /// to `mac` from the interface's own MAC; nil for mixed families. The TTL is 255, as RFC 6762 §11 asks of
    /// every mDNS response.
    static func datagramFrame(
        from source: IPAddress, port sourcePort: UInt16, to destination: IPAddress, port: UInt16, mac: MACAddress,
        payload: [UInt8], context: InterfaceContext
    ) -> [UInt8]? {
        var datagram = ByteBuffer()
        UDPDatagram(sourcePort: sourcePort, destinationPort: port, payload: ByteBuffer(bytes: payload)).write(
            to: &datagram)
        var udp = Array(datagram.readableBytesView)
        var packet = ByteBuffer()
        let etherType: EtherType
        // The UDP checksum is computed here: optional over IPv4, required over IPv6 (RFC 8200 §8.1), and a
        // computed zero is sent as all ones (RFC 768).
        func checksum(_ value: UInt16) {
            let sent = value == 0 ? 0xFFFF : value
            udp[6] = UInt8(sent >> 8)
            udp[7] = UInt8(truncatingIfNeeded: sent)
        }
        switch (source, destination) {
        case (.v4(let from), .v4(let to)):
            checksum(
                InternetChecksum.ipv4(source: from, destination: to, protocol: IPProtocol.udp.rawValue, payload: udp))
            IPv4Packet(
                header: IPv4Header(source: from, destination: to, proto: .udp, ttl: 255),
                payload: ByteBuffer(bytes: udp)
            ).write(to: &packet)
            etherType = .ipv4
        case (.v6(let from), .v6(let to)):
            checksum(
                InternetChecksum.ipv6(source: from, destination: to, nextHeader: IPProtocol.udp.rawValue, payload: udp))
            IPv6Packet(
                header: IPv6Header(source: from, destination: to, nextHeader: .udp, hopLimit: 255),
                payload: ByteBuffer(bytes: udp)
            ).write(to: &packet)
            etherType = .ipv6
        default:
            return nil
        }
        return EthernetFrame(destination: mac, source: context.macAddress, etherType: etherType, payload: packet).bytes
    }

    /// A connection request the host should see once it is up: kept (a retransmission replaces its first copy).
    mutating func keepForReplay(_ candidate: WakeCandidate, frame: [UInt8], now: Timestamp) {
        guard let tcp = candidate.tcp, tcp.isConnectionRequest, var host = self.hosts[candidate.host] else { return }
        let connection = "\(candidate.source) \(candidate.sourcePort)"
        host.replay.removeAll { now - $0.at > TakeoverRules.replayWindow || $0.client == connection }
        if host.replay.count >= TakeoverRules.maximumReplayedSegments { host.replay.removeFirst() }
        host.replay.append((now, connection, frame))
        self.hosts[candidate.host] = host
    }

    /// What the gate decided, done: a wake starts, a decline is counted and (when the gate says so) logged, and
    /// a declined packet is not replayed.
    mutating func carryOut(_ decision: WakeGate.Decision, for candidate: WakeCandidate, now: Timestamp)
        -> [TakeoverAction]
    {
        let trigger = WakeTrigger.connection(
            transport: candidate.port.transport, client: candidate.source, clientPort: candidate.sourcePort,
            port: candidate.port.port)
        switch decision.verdict {
        case .wake(let rule):
            return self.startWake(candidate.host, trigger: trigger, rule: rule, now: now)
        case .decline(let rule):
            if rule == .noService {
                self.statistics.ignoredConnections += 1
            } else {
                self.statistics.wakesDeclined += 1
            }
            if var host = self.hosts[candidate.host] {
                let connection = "\(candidate.source) \(candidate.sourcePort)"
                host.replay.removeAll { $0.client == connection }
                self.hosts[candidate.host] = host
            }
            guard let report = decision.report, let host = self.hosts[candidate.host] else { return [] }
            return [
                .event(
                    WakeEvent(
                        kind: rule == .noService ? .ignored : .declined, at: now, host: host.key,
                        hostName: host.hostName, trigger: trigger, rule: rule, count: report.count, scan: report.scan))
            ]
        case .hold, .ignore:
            return []
        }
    }
}
