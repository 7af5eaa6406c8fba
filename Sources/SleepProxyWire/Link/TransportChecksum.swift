/// Rewriting the checksums of a captured frame before it is sent again.
extension EthernetFrame {
    /// The frame (IPv4 or IPv6 carrying TCP) with its TCP checksum, and the IPv4 header checksum, computed
    /// afresh. A frame captured on the sender's own machine, or across a veth pair, can carry a checksum left to
    /// checksum offload that was never filled in; replayed to the host as it is, the host would drop it. Frames
    /// that are not TCP, or whose lengths do not add up, come back unchanged: the bytes came off the wire.
    public static func withTransportChecksumsRecomputed(_ input: [UInt8]) -> [UInt8] {
        var frame = input
        let ethernet = EthernetFrame.headerLength
        guard frame.count >= ethernet + 20 else { return frame }
        let etherType = UInt16(frame[12]) << 8 | UInt16(frame[13])
        func put(_ value: UInt16, at offset: Int) {
            frame[offset] = UInt8(value >> 8)
            frame[offset + 1] = UInt8(truncatingIfNeeded: value)
        }
        if etherType == EtherType.ipv4.rawValue {
            let headerLength = Int(frame[ethernet] & 0x0F) * 4
            let totalLength = Int(frame[ethernet + 2]) << 8 | Int(frame[ethernet + 3])
            guard frame[ethernet + 9] == IPProtocol.tcp.rawValue, headerLength >= 20,
                totalLength >= headerLength + TCPSegment.minimumHeaderLength,
                ethernet + totalLength <= frame.count
            else { return frame }
            put(0, at: ethernet + 10)
            var header = InternetChecksum()
            header.add(frame[ethernet..<ethernet + headerLength])
            put(header.value, at: ethernet + 10)
            let tcp = ethernet + headerLength
            put(0, at: tcp + 16)
            guard let source = IPv4Address(bytes: frame[ethernet + 12..<ethernet + 16]),
                let destination = IPv4Address(bytes: frame[ethernet + 16..<ethernet + 20])
            else { return input }
            put(
                InternetChecksum.ipv4(
                    source: source, destination: destination, protocol: IPProtocol.tcp.rawValue,
                    payload: frame[tcp..<ethernet + totalLength]), at: tcp + 16)
        } else if etherType == EtherType.ipv6.rawValue {
            let payloadLength = Int(frame[ethernet + 4]) << 8 | Int(frame[ethernet + 5])
            let tcp = ethernet + 40
            guard frame.count >= tcp, frame[ethernet + 6] == IPProtocol.tcp.rawValue,
                payloadLength >= TCPSegment.minimumHeaderLength, tcp + payloadLength <= frame.count,
                let source = IPv6Address(bytes: frame[ethernet + 8..<ethernet + 24]),
                let destination = IPv6Address(bytes: frame[ethernet + 24..<ethernet + 40])
            else { return frame }
            put(0, at: tcp + 16)
            put(
                InternetChecksum.ipv6(
                    source: source, destination: destination, nextHeader: IPProtocol.tcp.rawValue,
                    payload: frame[tcp..<tcp + payloadLength]), at: tcp + 16)
        }
        return frame
    }
}
