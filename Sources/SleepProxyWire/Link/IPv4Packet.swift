import NIOCore

/// An IPv4 header (RFC 791 §3.1). Options are skipped on decode and never written.
///
///     ver/IHL (1) | DSCP/ECN (1) | total length (2) | ID (2) | flags/fragment offset (2) | TTL (1) | proto (1)
///     | header checksum (2) | source (4) | destination (4) | options (IHL*4 - 20)
public struct IPv4Header: Hashable, Sendable {
    public static let minimumLength = 20

    public var typeOfService: UInt8 = 0
    public var identification: UInt16 = 0
    public var dontFragment: Bool = true
    public var moreFragments: Bool = false
    /// In 8-byte units; non-zero means this is not the first fragment and carries no transport header.
    public var fragmentOffset: UInt16 = 0
    public var ttl: UInt8
    public var proto: IPProtocol
    public var source: IPv4Address
    public var destination: IPv4Address
    /// Whether the received header checksum verified; true for headers built here.
    public var checksumValid: Bool = true

    /// Only the first fragment carries the transport header; later ones cannot be matched to a port.
    public var isFirstFragment: Bool { self.fragmentOffset == 0 }

    public init(source: IPv4Address, destination: IPv4Address, proto: IPProtocol, ttl: UInt8 = 64) {
        self.source = source
        self.destination = destination
        self.proto = proto
        self.ttl = ttl
    }
}

/// An IPv4 header and the payload its total length delimits (Ethernet padding after it is dropped).
public struct IPv4Packet: Hashable, Sendable {
    public var header: IPv4Header
    public var payload: ByteBuffer

    public init(header: IPv4Header, payload: ByteBuffer) {
        self.header = header
        self.payload = payload
    }

    public init(decoding buffer: ByteBuffer) throws(WireError) {
        let (header, offset, length) = try buffer.decode { (reader: inout ByteReader) throws(WireError) in
            let versionAndLength = try reader.readUInt8("IPv4 version/IHL")
            guard versionAndLength >> 4 == 4 else {
                throw WireError(.badHeader, at: 0, "IP version \(versionAndLength >> 4) in an IPv4 packet")
            }
            let headerLength = Int(versionAndLength & 0x0F) * 4
            guard headerLength >= IPv4Header.minimumLength else {
                throw WireError(.badHeader, at: 0, "IPv4 header length \(headerLength) < 20")
            }
            let tos = try reader.readUInt8("IPv4 TOS")
            let totalLength = Int(try reader.readUInt16("IPv4 total length"))
            guard totalLength >= headerLength else {
                throw WireError(.badHeader, at: 2, "IPv4 total length \(totalLength) < header length \(headerLength)")
            }
            guard totalLength <= reader.limit else {
                throw WireError(.truncated, at: 2, "IPv4 total length \(totalLength), \(reader.limit) bytes present")
            }
            let identification = try reader.readUInt16("IPv4 identification")
            let fragment = try reader.readUInt16("IPv4 flags/fragment")
            let ttl = try reader.readUInt8("IPv4 TTL")
            let proto = IPProtocol(rawValue: try reader.readUInt8("IPv4 protocol"))
            _ = try reader.readUInt16("IPv4 checksum")
            var header = IPv4Header(
                source: try reader.readIPv4("IPv4 source"),
                destination: try reader.readIPv4("IPv4 destination"),
                proto: proto,
                ttl: ttl
            )
            try reader.skip(headerLength - IPv4Header.minimumLength, "IPv4 options")
            header.typeOfService = tos
            header.identification = identification
            header.dontFragment = fragment & 0x4000 != 0
            header.moreFragments = fragment & 0x2000 != 0
            header.fragmentOffset = fragment & 0x1FFF
            var checksum = InternetChecksum()
            checksum.add(UnsafeRawBufferPointer(rebasing: reader.bytes[0..<headerLength]))
            header.checksumValid = checksum.value == 0
            return (header, headerLength, totalLength - headerLength)
        }
        self.header = header
        self.payload = buffer.slice(from: offset, length: length)
    }

    /// Appends a 20-byte header with a correct checksum, then the payload.
    public func write(to buffer: inout ByteBuffer) {
        let start = buffer.writerIndex
        let h = self.header
        buffer.writeInteger(UInt8(0x45))
        buffer.writeInteger(h.typeOfService)
        buffer.writeInteger(UInt16(IPv4Header.minimumLength + self.payload.readableBytes))
        buffer.writeInteger(h.identification)
        buffer.writeInteger((h.dontFragment ? 0x4000 : 0) | (h.moreFragments ? 0x2000 : 0) | h.fragmentOffset & 0x1FFF)
        buffer.writeInteger(h.ttl)
        buffer.writeInteger(h.proto.rawValue)
        buffer.writeInteger(UInt16(0))
        buffer.writeInteger(h.source.rawValue)
        buffer.writeInteger(h.destination.rawValue)
        var checksum = InternetChecksum()
        checksum.add(buffer.getBytes(at: start, length: IPv4Header.minimumLength)!)
        buffer.setInteger(checksum.value, at: start + 10)
        var payload = self.payload
        buffer.writeBuffer(&payload)
    }
}
