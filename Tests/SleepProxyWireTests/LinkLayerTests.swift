import NIOCore
import Testing

@testable import SleepProxyWire

@Suite("Link-layer codecs")
struct LinkLayerTests {
    let proxyMAC = MACAddress("02:53:50:00:00:01")!
    let ownerMAC = MACAddress("02:53:50:00:00:02")!
    let ownerIP = IPv4Address(192, 0, 2, 2)

    @Test func addressesParseAndPrint() {
        #expect(MACAddress("02:53:50:00:00:0A")?.description == "02:53:50:00:00:0a")
        #expect(MACAddress("02-53-50-00-00-0a") == MACAddress("02:53:50:00:00:0a"))
        for bad in ["", "02:53:50:00:00", "02:53:50:00:00:0g", "02:53:50:00:00:100", "02:53:50:00:00:00:00"] {
            #expect(MACAddress(bad) == nil, "\(bad)")
        }
        #expect(IPv4Address("192.0.2.2") == IPv4Address(192, 0, 2, 2))
        for bad in ["192.0.2", "192.0.2.256", "192.0.02.1", "1.2.3.4.5", "a.b.c.d", ""] {
            #expect(IPv4Address(bad) == nil, "\(bad)")
        }
        let cases = [
            "fe80::53:50ff:fe00:2", "2001:db8::1", "::", "::1", "ff02::fb", "2001:db8:0:1:1:1:1:1", "::ffff:192.0.2.1",
        ]
        for text in cases {
            let address = IPv6Address(text)
            #expect(address != nil, "\(text)")
            if text != "::ffff:192.0.2.1" { #expect(address?.description == text) }
        }
        // RFC 5952 §4.2.2: a single zero group is not shortened; §4.2.3: the first longest run is.
        #expect(IPv6Address("2001:db8:0:1:1:1:1:1")?.description == "2001:db8:0:1:1:1:1:1")
        #expect(IPv6Address("2001:0:0:1:0:0:0:1")?.description == "2001:0:0:1::1")
        for bad in [":::", "1::2::3", "1:2:3:4:5:6:7:8:9", "fe80::1%eth0", "12345::", ":1::", "1::2:", "g::"] {
            #expect(IPv6Address(bad) == nil, "\(bad)")
        }
        #expect(IPv6Address("fe80::53:50ff:fe00:2")!.solicitedNodeMulticast == IPv6Address("ff02::1:ff00:2"))
        #expect(IPv6Address("ff02::1:ff00:2")!.multicastMAC == MACAddress("33:33:ff:00:00:02"))
        #expect(IPv6Address("fe80::1")!.isLinkLocal && !IPv6Address("2001:db8::1")!.isLinkLocal)
        #expect(IPv4Address(192, 0, 2, 200).isInSameSubnet(as: IPv4Address(192, 0, 2, 1), prefixLength: 24))
        #expect(!IPv4Address(198, 51, 100, 1).isInSameSubnet(as: IPv4Address(192, 0, 2, 1), prefixLength: 24))
        #expect(IPv6Address("2001:db8::5")!.isInSameSubnet(as: IPv6Address("2001:db8::9")!, prefixLength: 64))
        #expect(!IPv6Address("2001:db8:1::5")!.isInSameSubnet(as: IPv6Address("2001:db8::9")!, prefixLength: 64))
    }

    @Test func arpProbeAnnouncementAndReply() throws {
        let probe = ARPPacket.probe(from: self.proxyMAC, for: self.ownerIP)
        #expect(probe.isProbe && !probe.isAnnouncement)
        let frame = probe.frame(destination: self.ownerMAC, source: self.proxyMAC)
        let bytes = frame.bytes
        #expect(bytes.count == EthernetFrame.minimumLength)  // 42 bytes padded to 60
        #expect(Array(bytes[0..<6]) == self.ownerMAC.bytes && Array(bytes[6..<12]) == self.proxyMAC.bytes)
        let decodedFrame = try EthernetFrame(decoding: ByteBuffer(bytes: bytes))
        #expect(decodedFrame.etherType == .arp)
        #expect(try ARPPacket(decoding: decodedFrame.payload) == probe)

        let announcement = ARPPacket.announcement(from: self.proxyMAC, for: self.ownerIP)
        #expect(announcement.isAnnouncement && !announcement.isProbe)
        let request = ARPPacket(
            operation: .request, senderMAC: MACAddress("02:00:00:00:00:09")!, senderIP: IPv4Address(192, 0, 2, 9),
            targetMAC: .zero, targetIP: self.ownerIP)
        let reply = ARPPacket.reply(to: request, from: self.proxyMAC)
        #expect(
            reply.operation == .reply && reply.senderIP == self.ownerIP && reply.targetMAC == request.senderMAC
                && reply.senderMAC == self.proxyMAC)
        var buffer = ByteBuffer()
        reply.write(to: &buffer)
        #expect(buffer.readableBytes == ARPPacket.length)
        #expect(try ARPPacket(decoding: buffer) == reply)
    }

    @Test func arpForOtherProtocolsIsUnsupported() {
        var bytes = ARPPacket.probe(from: self.proxyMAC, for: self.ownerIP).frame(
            destination: .broadcast, source: self.proxyMAC
        ).bytes
        bytes[14 + 1] = 2  // hardware type 2
        #expect(throws: WireError(.unsupported, at: 0, "")) {
            try ARPPacket(decoding: try EthernetFrame(decoding: ByteBuffer(bytes: bytes)).payload)
        }
    }

    @Test func vlanTaggedFrames() throws {
        var payload = ByteBuffer()
        ARPPacket.announcement(from: self.proxyMAC, for: self.ownerIP).write(to: &payload)
        let frame = EthernetFrame(
            destination: .broadcast, source: self.proxyMAC, vlan: VLANTag(id: 42, priority: 5), etherType: .arp,
            payload: payload)
        let bytes = frame.bytes
        #expect(Array(bytes[12..<16]) == [0x81, 0x00, 0xA0, 0x2A])
        let decoded = try EthernetFrame(decoding: ByteBuffer(bytes: bytes))
        #expect(decoded.vlan == VLANTag(id: 42, priority: 5))
        #expect(decoded.etherType == .arp)
        var stacked = bytes
        stacked[16] = 0x81
        stacked[17] = 0x00
        #expect(throws: WireError(.unsupported, at: 0, "")) { try EthernetFrame(decoding: ByteBuffer(bytes: stacked)) }
    }

    private func tcpFrame(flags: TCPFlags, destinationPort: UInt16) -> [UInt8] {
        var tcp = ByteBuffer()
        TCPSegment(sourcePort: 50000, destinationPort: destinationPort, sequenceNumber: 1, flags: flags).write(to: &tcp)
        var ip = ByteBuffer()
        IPv4Packet(
            header: IPv4Header(source: IPv4Address(192, 0, 2, 9), destination: self.ownerIP, proto: .tcp), payload: tcp
        ).write(to: &ip)
        return EthernetFrame(destination: self.proxyMAC, source: self.ownerMAC, etherType: .ipv4, payload: ip).bytes
    }

    @Test func ipv4TcpSynAndChecksum() throws {
        let bytes = self.tcpFrame(flags: .syn, destinationPort: 8080)
        let frame = try EthernetFrame(decoding: ByteBuffer(bytes: bytes))
        let packet = try IPv4Packet(decoding: frame.payload)
        #expect(packet.header.checksumValid)
        #expect(
            packet.header.proto == .tcp && packet.header.destination == self.ownerIP && packet.header.isFirstFragment)
        let segment = try TCPSegment(decoding: packet.payload)
        #expect(segment.isConnectionRequest && segment.destinationPort == 8080)
        #expect(
            !(try TCPSegment(
                decoding: IPv4Packet(
                    decoding: EthernetFrame(
                        decoding: ByteBuffer(bytes: self.tcpFrame(flags: [.syn, .ack], destinationPort: 1))
                    ).payload
                ).payload)).isConnectionRequest)
        var corrupted = bytes
        corrupted[14 + 8] ^= 0x01  // TTL
        #expect(
            !(try IPv4Packet(decoding: EthernetFrame(decoding: ByteBuffer(bytes: corrupted)).payload)).header
                .checksumValid)
        // The IPv4 payload ends at total length, not at the (padded) end of the frame.
        #expect(packet.payload.readableBytes == TCPSegment.minimumHeaderLength)
    }

    @Test func ipv4HeaderLengthAndTotalLengthChecks() throws {
        var ip = ByteBuffer()
        IPv4Packet(
            header: IPv4Header(source: .any, destination: .broadcast, proto: .udp),
            payload: ByteBuffer(bytes: [1, 2, 3])
        ).write(to: &ip)
        var bytes = Array(ip.readableBytesView)
        bytes[0] = 0x44  // IHL 4 (16 bytes)
        #expect(throws: WireError(.badHeader, at: 0, "")) { try IPv4Packet(decoding: ByteBuffer(bytes: bytes)) }
        bytes[0] = 0x45
        bytes[3] = 100  // total length beyond the bytes
        #expect(throws: WireError(.truncated, at: 2, "")) { try IPv4Packet(decoding: ByteBuffer(bytes: bytes)) }
        bytes[0] = 0x65
        #expect(throws: WireError(.badHeader, at: 0, "")) { try IPv4Packet(decoding: ByteBuffer(bytes: bytes)) }
    }

    @Test func ipv6ExtensionHeadersAreWalked() throws {
        let tcp: [UInt8] = {
            var b = ByteBuffer()
            TCPSegment(sourcePort: 1, destinationPort: 22, flags: .syn).write(to: &b)
            return Array(b.readableBytesView)
        }()
        // Hop-by-hop (8 bytes, next = destination options), destination options (16 bytes, next = TCP).
        let hopByHop: [UInt8] = [60, 0, 1, 4, 0, 0, 0, 0]
        let destination: [UInt8] = [6, 1] + Array(repeating: 1, count: 14)
        let header = IPv6Header(
            source: IPv6Address("fe80::9")!, destination: IPv6Address("fe80::53:50ff:fe00:2")!, nextHeader: .hopByHop)
        var buffer = ByteBuffer()
        IPv6Packet(header: header, payload: ByteBuffer(bytes: hopByHop + destination + tcp)).write(to: &buffer)
        let packet = try IPv6Packet(decoding: buffer)
        #expect(packet.upperLayerProtocol == .tcp)
        #expect(try TCPSegment(decoding: packet.payload).destinationPort == 22)

        // A first fragment is walked; a later fragment has no transport header and is refused.
        let firstFragment: [UInt8] = [6, 0, 0, 1, 0, 0, 0, 7]
        var first = ByteBuffer()
        IPv6Packet(
            header: IPv6Header(source: .any, destination: .allNodes, nextHeader: .fragment),
            payload: ByteBuffer(bytes: firstFragment + tcp)
        ).write(to: &first)
        #expect(try IPv6Packet(decoding: first).upperLayerProtocol == .tcp)
        let laterFragment: [UInt8] = [6, 0, 0, 0x08, 0, 0, 0, 7]
        var later = ByteBuffer()
        IPv6Packet(
            header: IPv6Header(source: .any, destination: .allNodes, nextHeader: .fragment),
            payload: ByteBuffer(bytes: laterFragment + tcp)
        ).write(to: &later)
        #expect(throws: WireError(.unsupported, at: 0, "")) { try IPv6Packet(decoding: later) }
    }

    @Test func ipv6ExtensionHeaderChainLimit() throws {
        func packet(headers: Int) -> ByteBuffer {
            var payload: [UInt8] = []
            for index in 0..<headers { payload += [index == headers - 1 ? 59 : 60, 0, 0, 0, 0, 0, 0, 0] }
            var buffer = ByteBuffer()
            IPv6Packet(
                header: IPv6Header(source: .any, destination: .allNodes, nextHeader: .destinationOptions),
                payload: ByteBuffer(bytes: payload)
            ).write(to: &buffer)
            return buffer
        }
        #expect(
            try IPv6Packet(decoding: packet(headers: IPv6Packet.maximumExtensionHeaders)).upperLayerProtocol
                == .noNextHeader)
        #expect(throws: WireError(.unsupported, at: 0, "")) {
            try IPv6Packet(decoding: packet(headers: IPv6Packet.maximumExtensionHeaders + 1))
        }
    }

    @Test func neighborSolicitationAndAdvertisement() throws {
        let target = IPv6Address("fe80::53:50ff:fe00:2")!
        let solicitor = IPv6Address("fe80::9")!
        let ns = NeighborDiscoveryMessage(
            kind: .solicitation, target: target, sourceLinkLayerAddress: MACAddress("02:00:00:00:00:09")!)
        let nsFrame = ns.frame(
            ethernetSource: MACAddress("02:00:00:00:00:09")!,
            ethernetDestination: target.solicitedNodeMulticast.multicastMAC, source: solicitor,
            destination: target.solicitedNodeMulticast)
        let decodedNS = try NeighborDiscoveryMessage(
            decoding: IPv6Packet(decoding: EthernetFrame(decoding: ByteBuffer(bytes: nsFrame.bytes)).payload))
        #expect(decodedNS == ns)

        // RFC 4861 §7.2.4: solicited answer, unicast to the solicitor, S and O set, TLLA = proxy MAC.
        let na = NeighborDiscoveryMessage(
            kind: .advertisement, flags: [.solicited, .override], target: target, targetLinkLayerAddress: self.proxyMAC)
        let naBytes = na.frame(
            ethernetSource: self.proxyMAC, ethernetDestination: MACAddress("02:00:00:00:00:09")!, source: target,
            destination: solicitor
        ).bytes
        #expect(naBytes.count == 14 + 40 + 32)
        let naPacket = try IPv6Packet(decoding: EthernetFrame(decoding: ByteBuffer(bytes: naBytes)).payload)
        #expect(naPacket.header.hopLimit == 255)
        #expect(try NeighborDiscoveryMessage(decoding: naPacket) == na)

        // Checksum, hop limit and zero-length option are each enforced.
        var badChecksum = naBytes
        badChecksum[14 + 40 + 8] ^= 0xFF
        #expect(throws: WireError(.badChecksum, at: 0, "")) {
            try NeighborDiscoveryMessage(
                decoding: IPv6Packet(decoding: EthernetFrame(decoding: ByteBuffer(bytes: badChecksum)).payload))
        }
        var routed = naPacket
        routed.header.hopLimit = 254
        #expect(throws: WireError(.badHeader, at: 0, "")) { try NeighborDiscoveryMessage(decoding: routed) }
        var zeroOption = na.icmpBytes(source: target, destination: solicitor)
        zeroOption[25] = 0
        let checksum = InternetChecksum.ipv6(
            source: target, destination: solicitor, nextHeader: 58,
            payload: zeroOption.enumerated().map { $0.offset == 2 || $0.offset == 3 ? 0 : $0.element })
        zeroOption[2] = UInt8(checksum >> 8)
        zeroOption[3] = UInt8(checksum & 0xFF)
        let zeroPacket = IPv6Packet(
            header: IPv6Header(source: target, destination: solicitor, nextHeader: .icmpv6, hopLimit: 255),
            payload: ByteBuffer(bytes: zeroOption))
        #expect(throws: WireError(.badOption, at: 0, "")) { try NeighborDiscoveryMessage(decoding: zeroPacket) }

        // A DAD probe (source ::) must not carry a source link-layer address.
        let dad = ns.packet(source: .any, destination: target.solicitedNodeMulticast)
        #expect(throws: WireError(.badOption, at: 0, "")) { try NeighborDiscoveryMessage(decoding: dad) }
        let cleanDAD = NeighborDiscoveryMessage(kind: .solicitation, target: target).packet(
            source: .any, destination: target.solicitedNodeMulticast)
        #expect(try NeighborDiscoveryMessage(decoding: cleanDAD).target == target)
    }

    @Test func magicPacketForms() throws {
        let plain = MagicPacket(target: self.ownerMAC)
        #expect(plain.payload.count == 102)
        #expect(try MagicPacket(payload: plain.payload) == plain)
        let four = MagicPacket(target: self.ownerMAC, password: SecureOnPassword(bytes: [1, 2, 3, 4]))
        let six = MagicPacket(target: self.ownerMAC, password: SecureOnPassword(bytes: [0, 0, 0, 0, 0, 0]))
        #expect(try MagicPacket(payload: four.payload) == four)
        #expect(try MagicPacket(payload: six.payload) == six)
        // Apple's frame: 14 + 102 + 6 = 122 bytes.
        let frame = six.frame(destination: self.ownerMAC, source: self.proxyMAC)
        #expect(frame.bytes.count == 122)
        #expect(try EthernetFrame(decoding: ByteBuffer(bytes: frame.bytes)).etherType == .wakeOnLAN)
        // Lengths other than 102/106/108 and anything short of 16 identical copies are not magic packets.
        #expect(throws: WireError.self) { try MagicPacket(payload: plain.payload + [1]) }
        var fifteen = plain.payload
        fifteen[6 + 15 * 6] ^= 0x01
        #expect(throws: WireError.self) { try MagicPacket(payload: fifteen) }
        #expect(MagicPacket.search(in: fifteen) == nil)
        // A sync stream and the MAC once, as in a DHCP packet, is not a match.
        #expect(
            MagicPacket.search(
                in: Array(repeating: 0xFF, count: 6) + self.ownerMAC.bytes + Array(repeating: 0, count: 100)) == nil)
        #expect(MagicPacket.search(in: [0x13, 0x88, 0xFF] + plain.payload + [7, 7]) == self.ownerMAC)
        // A MAC that starts with FF bytes still matches only at the real sync stream.
        let ffMAC = MACAddress("ff:ff:00:00:00:01")!
        #expect(MagicPacket.search(in: [0] + MagicPacket(target: ffMAC).payload) == ffMAC)
    }

    @Test func udpLengthIsEnforced() throws {
        var buffer = ByteBuffer()
        UDPDatagram(sourcePort: 5353, destinationPort: 5353, payload: ByteBuffer(bytes: [1, 2, 3])).write(to: &buffer)
        buffer.writeBytes([0, 0])  // padding after the datagram
        let datagram = try UDPDatagram(decoding: buffer)
        #expect(Array(datagram.payload.readableBytesView) == [1, 2, 3])
        var bytes = Array(buffer.readableBytesView)
        bytes[5] = 7
        #expect(throws: WireError(.badHeader, at: 4, "")) { try UDPDatagram(decoding: ByteBuffer(bytes: bytes)) }
        bytes[5] = 200
        #expect(throws: WireError(.truncated, at: 4, "")) { try UDPDatagram(decoding: ByteBuffer(bytes: bytes)) }
    }
}
