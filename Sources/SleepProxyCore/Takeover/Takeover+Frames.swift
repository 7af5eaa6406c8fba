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
        // A machine giving its own address (the frame's source agreeing): listed among the neighbours.
        if arp.senderIP != .any, arp.senderMAC == frame.source {
            self.neighbours.heard(arp.senderMAC, at: .v4(arp.senderIP), on: context.name, now: now)
        }
        if arp.operation == .request, arp.senderIP != .any, arp.senderIP != arp.targetIP {
            self.noteRequest(from: .v4(arp.senderIP), for: .v4(arp.targetIP), now: now)
        }
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
            } else if arp.senderIP != .any {
                self.addressRequested(
                    key, address: .v4(arp.targetIP), client: .v4(arp.senderIP), clientMAC: arp.senderMAC, now: now)
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
        // A machine giving its own address: a solicitation's source with its link-layer address, an
        // advertisement's target with its own (the frame's source agreeing).
        if message.kind == .solicitation, !source.isUnspecified, message.sourceLinkLayerAddress == frame.source {
            self.neighbours.heard(frame.source, at: .v6(source), on: context.name, now: now)
        } else if message.kind == .advertisement, message.targetLinkLayerAddress == frame.source {
            self.neighbours.heard(frame.source, at: target, on: context.name, now: now)
        }
        var actions: [TakeoverAction] = []
        var handled: OwnerKey? = nil
        switch message.kind {
        case .solicitation:
            if !source.isUnspecified { self.noteRequest(from: .v6(source), for: target, now: now) }
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
            } else {
                self.addressRequested(
                    key, address: target, client: .v6(source),
                    clientMAC: message.sourceLinkLayerAddress ?? frame.source,
                    now: now)
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
        // Awake after all: probed again later as any host is, a second apart.
        host.probesQuickly = false
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
        if woken {
            actions += self.finishWake(&host, awake: true, handingBack: answered, now: now)
        } else if !signal.isAnswer {
            // The address is the host's again without a wake of ours: its own packet told only some neighbours
            // (an ARP request teaches the one it asks), the rest still send to the proxy (docs/waking.md §6). Not
            // on an answer, which a sleeping NIC with ARP or ND offload gives: pointed at it, a client's
            // connection would reach the sleeping NIC and never the proxy that could wake the host.
            actions += self.pointNeighboursBack(host, addresses: released.filter { $0.1 }.map { $0.0 })
        }
        self.hosts[key] = host
        // Only its wake was left (its lease had ended): with the wake done, nothing of it remains to keep.
        if !host.registered, host.wake == nil { self.forget(key) }
        if released.isEmpty { released = [(address, false)] }
        for (address, wasAnswering) in released {
            actions.append(.ownerSeen(key, address: address, signal: signal, wasAnswering: wasAnswering))
        }
        return actions
    }
}
