import NIOCore
import SleepProxyWire

/// Ethernet frames as other machines on a LAN send them, for driving the packet side in tests and benchmarks.
public enum TestFrames {
    public static func tcp(
        from sourceMAC: MACAddress, to destinationMAC: MACAddress, source: IPAddress, destination: IPAddress,
        sourcePort: UInt16 = 50000, port: UInt16,
        flags: TCPFlags = .syn, sequence: UInt32 = 0x0102_0304, window: UInt16 = 65535, options: [UInt8] = []
    ) -> [UInt8] {
        var segment = ByteBuffer()
        TCPSegment(
            sourcePort: sourcePort, destinationPort: port, sequenceNumber: sequence, flags: flags, window: window
        ).write(to: &segment)
        var bytes = Array(segment.readableBytesView)
        if !options.isEmpty {
            // Options padded to whole words, the data offset raised to match (RFC 9293 §3.1).
            let padded = options + [UInt8](repeating: 0, count: (4 - options.count % 4) % 4)
            bytes.insert(contentsOf: padded, at: TCPSegment.minimumHeaderLength)
            bytes[12] = UInt8((TCPSegment.minimumHeaderLength + padded.count) / 4) << 4
        }
        return self.ip(
            from: sourceMAC, to: destinationMAC, source: source, destination: destination, proto: .tcp,
            payload: bytes)
    }

    /// nmap's raw SYN (`-sS`): window 1024, an MSS option and nothing else (docs/waking.md §2).
    public static let nmapSYNOptions: [UInt8] = [2, 4, 0x05, 0xB4]
    /// A Linux connect(): MSS, SACK permitted, timestamps, NOP, window scale (window 64240).
    public static let kernelSYNOptions: [UInt8] = [2, 4, 0x05, 0xB4, 4, 2, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0, 1, 3, 3, 7]

    public static func udp(
        from sourceMAC: MACAddress, to destinationMAC: MACAddress, source: IPAddress, destination: IPAddress,
        sourcePort: UInt16 = 50000, port: UInt16, payload: [UInt8] = [1, 2, 3]
    ) -> [UInt8] {
        var datagram = ByteBuffer()
        UDPDatagram(sourcePort: sourcePort, destinationPort: port, payload: ByteBuffer(bytes: payload)).write(
            to: &datagram)
        return self.ip(
            from: sourceMAC, to: destinationMAC, source: source, destination: destination, proto: .udp,
            payload: Array(datagram.readableBytesView))
    }

    /// An ICMP (or ICMPv6) echo request.
    public static func ping(
        from sourceMAC: MACAddress, to destinationMAC: MACAddress, source: IPAddress, destination: IPAddress
    ) -> [UInt8] {
        if case .v6 = source {
            return self.ip(
                from: sourceMAC, to: destinationMAC, source: source, destination: destination, proto: .icmpv6,
                payload: [128, 0, 0, 0, 0, 1, 0, 1])
        }
        return self.ip(
            from: sourceMAC, to: destinationMAC, source: source, destination: destination, proto: .icmp,
            payload: [8, 0, 0xF7, 0xFD, 0, 1, 0, 1])
    }

    public static func ip(
        from sourceMAC: MACAddress, to destinationMAC: MACAddress, source: IPAddress, destination: IPAddress,
        proto: IPProtocol, payload: [UInt8]
    ) -> [UInt8] {
        var packet = ByteBuffer()
        switch (source, destination) {
        case (.v4(let s), .v4(let d)):
            IPv4Packet(header: IPv4Header(source: s, destination: d, proto: proto), payload: ByteBuffer(bytes: payload))
                .write(to: &packet)
            return EthernetFrame(destination: destinationMAC, source: sourceMAC, etherType: .ipv4, payload: packet)
                .bytes
        case (.v6(let s), .v6(let d)):
            IPv6Packet(
                header: IPv6Header(source: s, destination: d, nextHeader: proto), payload: ByteBuffer(bytes: payload)
            ).write(to: &packet)
            return EthernetFrame(destination: destinationMAC, source: sourceMAC, etherType: .ipv6, payload: packet)
                .bytes
        default:
            preconditionFailure("source and destination of different families")
        }
    }

    /// "Who has `address`? Tell `senderIP`", broadcast.
    public static func arpRequest(from mac: MACAddress, senderIP: IPv4Address, for address: IPv4Address) -> [UInt8] {
        ARPPacket(operation: .request, senderMAC: mac, senderIP: senderIP, targetMAC: .zero, targetIP: address).frame(
            destination: .broadcast, source: mac
        ).bytes
    }

    /// A gratuitous ARP: `mac` says it has `address`.
    public static func arpAnnouncement(from mac: MACAddress, for address: IPv4Address) -> [UInt8] {
        ARPPacket.announcement(from: mac, for: address).frame(destination: .broadcast, source: mac).bytes
    }

    /// A neighbour solicitation for `target` from `source` (:: for duplicate address detection).
    public static func neighbourSolicitation(from mac: MACAddress, source: IPv6Address, for target: IPv6Address)
        -> [UInt8]
    {
        let ns = NeighborDiscoveryMessage(
            kind: .solicitation, target: target, sourceLinkLayerAddress: source.isUnspecified ? nil : mac)
        return ns.frame(
            ethernetSource: mac, ethernetDestination: target.solicitedNodeMulticast.multicastMAC, source: source,
            destination: target.solicitedNodeMulticast
        ).bytes
    }

    /// An unsolicited NA: `mac` says it has `target`.
    public static func neighbourAdvertisement(from mac: MACAddress, for target: IPv6Address) -> [UInt8] {
        let na = NeighborDiscoveryMessage(
            kind: .advertisement, flags: [.override], target: target, targetLinkLayerAddress: mac)
        return na.frame(
            ethernetSource: mac, ethernetDestination: IPv6Address.allNodes.multicastMAC, source: target,
            destination: .allNodes
        ).bytes
    }
}
