import NIOCore
import SleepProxyWire

// libFuzzer entry point for everything a packet socket can hand us: Ethernet (with or without an 802.1Q tag),
// ARP, IPv4, IPv6 with extension headers, TCP, UDP, ICMPv6 neighbour discovery, DNS inside UDP, magic packets.
// Decoding must never trap; ARP re-encodes to an equal value.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzFrames(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: start, count: count))
    _ = MagicPacket.search(in: bytes)
    _ = try? MagicPacket(payload: bytes)
    guard let frame = try? EthernetFrame(decoding: ByteBuffer(bytes: bytes)) else { return 0 }
    switch frame.etherType {
    case .arp:
        if let arp = try? ARPPacket(decoding: frame.payload) {
            var buffer = ByteBuffer()
            arp.write(to: &buffer)
            precondition((try? ARPPacket(decoding: buffer)) == arp, "ARP round trip changed the packet")
        }
    case .ipv4:
        if let packet = try? IPv4Packet(decoding: frame.payload) {
            transport(packet.header.proto, packet.payload)
        }
    case .ipv6:
        if let packet = try? IPv6Packet(decoding: frame.payload) {
            transport(packet.upperLayerProtocol, packet.payload)
            _ = try? NeighborDiscoveryMessage(decoding: packet)
        }
    case .wakeOnLAN:
        _ = try? MagicPacket(payload: Array(frame.payload.readableBytesView))
    default:
        break
    }
    return 0
}

private func transport(_ proto: IPProtocol, _ payload: ByteBuffer) {
    switch proto {
    case .tcp:
        _ = try? TCPSegment(decoding: payload)
    case .udp:
        if let datagram = try? UDPDatagram(decoding: payload) {
            _ = try? DNSMessage(decoding: datagram.payload)
        }
    default:
        break
    }
}
