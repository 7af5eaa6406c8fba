import NIOCore
import SleepProxyCore
import SleepProxyWire

/// The frames an engine program captures (`EngineProgram.frame`): what other machines and the hosts themselves put
/// on the link, an adopted host's own responder and its quiet resumes among them. Shared with the fuzz target as
/// EngineProgram.swift is (a symbolic link there).
extension EngineProgram {
    mutating func frame(_ host: Int) -> [EngineAction] {
        let kind = (self.byte() ?? 0) % 9
        let target = IPv4Address(192, 0, 2, UInt8(2 + host))
        let bytes: [UInt8]
        switch kind {
        case 0:
            // Someone asks for the host's address.
            bytes =
                ARPPacket(
                    operation: .request, senderMAC: Self.strangerMAC, senderIP: IPv4Address(192, 0, 2, 99),
                    targetMAC: .zero, targetIP: target
                ).frame(destination: .broadcast, source: Self.strangerMAC).bytes
        case 1:
            // The host itself (awake) or a stranger claims the address.
            let mac = (self.byte() ?? 0) & 1 == 0 ? Self.mac(host) : Self.strangerMAC
            bytes = ARPPacket.announcement(from: mac, for: target).frame(destination: .broadcast, source: mac).bytes
        case 2, 3:
            // A SYN to one of the host's ports, from a stranger or from the host's own address.
            let ports: [UInt16] = [445, 8081, 22, 80]
            var segment = ByteBuffer()
            TCPSegment(
                sourcePort: 40000 + UInt16(self.byte() ?? 0),
                destinationPort: ports[Int(self.byte() ?? 0) % ports.count],
                sequenceNumber: 1, flags: .syn, window: 64240
            ).write(to: &segment)
            var packet = ByteBuffer()
            IPv4Packet(
                header: IPv4Header(source: IPv4Address(192, 0, 2, 99), destination: target, proto: .tcp),
                payload: segment
            ).write(to: &packet)
            bytes =
                EthernetFrame(
                    destination: Self.interface.macAddress, source: Self.strangerMAC, etherType: .ipv4, payload: packet
                ).bytes
        case 5:
            // The host's own responder, seen on the wire from its MAC (what an adopted host is learned from): its
            // name and a service on it, maybe their goodbyes (an exit), or only its service PTR's goodbye (macOS
            // 15 falling asleep, or withdrawing the service while awake: docs/adoption.md §3).
            let form = (self.byte() ?? 0) & 3
            let ttl: UInt32 = form == 0 ? 0 : 120
            if form == 1, self.engine.adoptedMACs.contains(Self.mac(host)) { self.saidGoodbye.insert(host) }
            let instance = try! DNSName(labels: ["Files \(host)", "_smb", "_tcp", "local"])
            let service = DNSResourceRecord(
                name: "_smb._tcp.local.", ttl: form == 1 ? 0 : 4500, rdata: .ptr(PTRRecord(target: instance)))
            let message = DNSMessage(
                id: 0, flags: .init(response: true, authoritative: true),
                answers: form == 1
                    ? [service]
                    : [
                        DNSResourceRecord(
                            name: Self.name(host), cacheFlush: true, ttl: ttl, rdata: .a(.init(address: target))),
                        DNSResourceRecord(
                            name: instance, cacheFlush: true, ttl: ttl,
                            rdata: .srv(SRVRecord(priority: 0, weight: 0, port: 445, target: Self.name(host)))),
                        service,
                    ])
            var datagram = ByteBuffer()
            UDPDatagram(
                sourcePort: 5353, destinationPort: 5353, payload: ByteBuffer(bytes: message.encoded(options: .mdns))
            )
            .write(to: &datagram)
            var packet = ByteBuffer()
            IPv4Packet(
                header: IPv4Header(source: target, destination: .mdnsGroup, proto: .udp), payload: datagram
            ).write(to: &packet)
            bytes =
                EthernetFrame(
                    destination: MACAddress("01:00:5e:00:00:fb")!, source: Self.mac(host), etherType: .ipv4,
                    payload: packet
                ).bytes
        case 6:
            // Other traffic of the host's own (a NetBIOS broadcast): an adopted host is up.
            var datagram = ByteBuffer()
            UDPDatagram(sourcePort: 137, destinationPort: 137, payload: ByteBuffer(bytes: [1, 2, 3])).write(
                to: &datagram)
            var packet = ByteBuffer()
            IPv4Packet(
                header: IPv4Header(source: target, destination: IPv4Address(192, 0, 2, 255), proto: .udp),
                payload: datagram
            ).write(to: &packet)
            bytes =
                EthernetFrame(destination: .broadcast, source: Self.mac(host), etherType: .ipv4, payload: packet).bytes
        case 7:
            // A quiet resume: the host asks for its router, and sends nothing else (docs/adoption.md §3).
            bytes =
                ARPPacket(
                    operation: .request, senderMAC: Self.mac(host), senderIP: target, targetMAC: .zero,
                    targetIP: IPv4Address(192, 0, 2, 254)
                ).frame(destination: .broadcast, source: Self.mac(host)).bytes
        case 8:
            // The same in IPv6: a neighbour solicitation from the host for the proxy's address.
            guard case .v6(let address) = Self.v6(host), case .v6(let proxy) = IPAddress("2001:db8::1")! else {
                return []
            }
            bytes =
                NeighborDiscoveryMessage(kind: .solicitation, target: proxy, sourceLinkLayerAddress: Self.mac(host))
                .frame(
                    ethernetSource: Self.mac(host), ethernetDestination: proxy.solicitedNodeMulticast.multicastMAC,
                    source: address, destination: proxy.solicitedNodeMulticast
                ).bytes
        default:
            // A neighbour advertisement from the host's MAC for its global address (it is up).
            guard case .v6(let address) = Self.v6(host) else { return [] }
            bytes =
                NeighborDiscoveryMessage(
                    kind: .advertisement, flags: [.override], target: address, targetLinkLayerAddress: Self.mac(host)
                ).frame(
                    ethernetSource: Self.mac(host), ethernetDestination: IPv6Address.allNodes.multicastMAC,
                    source: address,
                    destination: .allNodes
                ).bytes
        }
        let key = OwnerKey(interface: Self.interface.name, primaryMAC: Self.mac(host))
        let wasAsleep = self.engine.registration(key)?.isAdopted == true && self.engine.state(of: key) == .asleep
        let actions = self.engine.receiveFrame(
            bytes, interfaceIndex: Self.interface.index, outgoing: false, now: self.now)
        if kind >= 7, wasAsleep, self.engine.state(of: key) == nil { self.reachedQuietResume = true }
        return actions
    }
}
