import NIOCore
import Testing

@testable import SleepProxyWire

/// The checksum rewrite applied to a captured SYN before it is replayed to a woken host.
@Suite("Transport checksum rewrite")
struct TransportChecksumTests {
    static let client = MACAddress("02:53:50:00:00:20")!
    static let host = MACAddress("02:53:50:00:00:02")!

    /// A SYN as a veth capture shows it: checksums left to offload (zero here, or garbage).
    static func capturedSYN(v6: Bool, garbage: UInt16 = 0) -> [UInt8] {
        var segment = ByteBuffer()
        TCPSegment(sourcePort: 40001, destinationPort: 8080, sequenceNumber: 7, flags: .syn).write(to: &segment)
        segment.setInteger(garbage, at: segment.readerIndex + 16)
        var packet = ByteBuffer()
        if v6 {
            IPv6Packet(
                header: IPv6Header(
                    source: IPv6Address("2001:db8::20")!, destination: IPv6Address("2001:db8::2")!, nextHeader: .tcp),
                payload: segment
            ).write(to: &packet)
            return EthernetFrame(destination: host, source: client, etherType: .ipv6, payload: packet).bytes
        }
        IPv4Packet(
            header: IPv4Header(source: IPv4Address(192, 0, 2, 20), destination: IPv4Address(192, 0, 2, 2), proto: .tcp),
            payload: segment
        ).write(to: &packet)
        var frame = EthernetFrame(destination: host, source: client, etherType: .ipv4, payload: packet).bytes
        frame[EthernetFrame.headerLength + 10] = 0xDE  // and a header checksum nobody filled in
        return frame
    }

    @Test(arguments: [false, true], [UInt16(0), 0xBEEF])
    func aCapturedSYNLeavesWithChecksumsTheHostAccepts(v6: Bool, garbage: UInt16) throws {
        let fixed = EthernetFrame.withTransportChecksumsRecomputed(Self.capturedSYN(v6: v6, garbage: garbage))
        let frame = try EthernetFrame(decoding: ByteBuffer(bytes: fixed))
        if v6 {
            let packet = try IPv6Packet(decoding: frame.payload)
            let tcp = Array(packet.payload.readableBytesView)
            #expect(
                InternetChecksum.ipv6(
                    source: packet.header.source, destination: packet.header.destination,
                    nextHeader: IPProtocol.tcp.rawValue, payload: tcp[...]) == 0)
        } else {
            let packet = try IPv4Packet(decoding: frame.payload)
            #expect(packet.header.checksumValid)
            let tcp = Array(packet.payload.readableBytesView)
            #expect(
                InternetChecksum.ipv4(
                    source: packet.header.source, destination: packet.header.destination,
                    protocol: IPProtocol.tcp.rawValue, payload: tcp[...]) == 0)
        }
        #expect(
            try TCPSegment(
                decoding: (v6
                    ? IPv6Packet(decoding: frame.payload).payload : IPv4Packet(decoding: frame.payload).payload)
            ).isConnectionRequest)
    }

    @Test func framesThatAreNotTCPOrDoNotAddUpComeBackUnchanged() throws {
        var datagram = ByteBuffer()
        UDPDatagram(sourcePort: 1, destinationPort: 2, payload: ByteBuffer(bytes: [1, 2, 3])).write(to: &datagram)
        var packet = ByteBuffer()
        IPv4Packet(
            header: IPv4Header(source: IPv4Address(192, 0, 2, 20), destination: IPv4Address(192, 0, 2, 2), proto: .udp),
            payload: datagram
        ).write(to: &packet)
        let udp = EthernetFrame(destination: Self.host, source: Self.client, etherType: .ipv4, payload: packet).bytes
        #expect(EthernetFrame.withTransportChecksumsRecomputed(udp) == udp)
        // Every truncation of a TCP frame that cuts into its IP packet (Ethernet padding may follow the packet),
        // and a length field that claims more than the frame holds.
        for v6 in [false, true] {
            let frame = Self.capturedSYN(v6: v6)
            let packetEnd = EthernetFrame.headerLength + (v6 ? 40 + 20 : 20 + 20)
            for length in 0..<packetEnd {
                #expect(
                    EthernetFrame.withTransportChecksumsRecomputed(Array(frame[0..<length])) == Array(frame[0..<length])
                )
            }
            var lying = frame
            lying[EthernetFrame.headerLength + (v6 ? 4 : 2)] = 0xFF
            #expect(EthernetFrame.withTransportChecksumsRecomputed(lying) == lying)
        }
    }
}
