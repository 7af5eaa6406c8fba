import NIOCore
import SleepProxyWire

/// Traffic to a sleeping host's services: each TCP segment or UDP datagram becomes a `WakeCandidate` for the wake
/// gate (docs/waking.md), whose verdict is carried out here; and the mDNS questions sent to the host's own address
/// (docs/waking.md §7).
extension Takeover {
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
                        host: host.key, interfaceIndex: context.index))
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
                        hostName: host.hostName?.description, trigger: trigger, rule: rule, count: report.count,
                        scan: report.scan))
            ]
        case .hold, .ignore:
            return []
        }
    }
}
