import NIOCore

/// The fixed IPv6 header (RFC 8200 §3).
///
///     ver/class/flow (4) | payload length (2) | next header (1) | hop limit (1) | source (16) | destination (16)
public struct IPv6Header: Hashable, Sendable {
    public static let length = 40

    public var trafficClass: UInt8 = 0
    public var flowLabel: UInt32 = 0
    public var nextHeader: IPProtocol
    public var hopLimit: UInt8
    public var source: IPv6Address
    public var destination: IPv6Address

    public init(source: IPv6Address, destination: IPv6Address, nextHeader: IPProtocol, hopLimit: UInt8 = 64) {
        self.source = source
        self.destination = destination
        self.nextHeader = nextHeader
        self.hopLimit = hopLimit
    }
}

/// An IPv6 packet with its extension headers walked to the upper-layer protocol.
///
/// Extension headers are skipped explicitly (RFC 8200 §4): hop-by-hop, routing, destination options and
/// authentication headers by their length fields, the first fragment's fragment header by its fixed 8 bytes.
/// A later fragment has no transport header and is refused as `.unsupported`; so is anything behind ESP, which
/// is encrypted. At most `maximumExtensionHeaders` are walked.
public struct IPv6Packet: Hashable, Sendable {
    /// RFC 8200 §4.1 recommends at most one of each kind (two destination options); a longer chain is refused
    /// so a crafted packet cannot make the walk long.
    public static let maximumExtensionHeaders = 8

    public var header: IPv6Header
    /// The protocol of `payload` after every extension header (TCP, UDP, ICMPv6, or ESP/NoNextHeader).
    public var upperLayerProtocol: IPProtocol
    /// The bytes after the extension headers, up to the payload length.
    public var payload: ByteBuffer

    public init(header: IPv6Header, payload: ByteBuffer) {
        self.header = header
        self.upperLayerProtocol = header.nextHeader
        self.payload = payload
    }

    public init(decoding buffer: ByteBuffer) throws(WireError) {
        let (header, proto, offset, length) = try buffer.decode { (reader: inout ByteReader) throws(WireError) in
            let first = try reader.readUInt32("IPv6 version/class/flow")
            guard first >> 28 == 6 else {
                throw WireError(.badHeader, at: 0, "IP version \(first >> 28) in an IPv6 packet")
            }
            let payloadLength = Int(try reader.readUInt16("IPv6 payload length"))
            let nextHeader = IPProtocol(rawValue: try reader.readUInt8("IPv6 next header"))
            let hopLimit = try reader.readUInt8("IPv6 hop limit")
            var header = IPv6Header(
                source: try reader.readIPv6("IPv6 source"),
                destination: try reader.readIPv6("IPv6 destination"),
                nextHeader: nextHeader,
                hopLimit: hopLimit
            )
            header.trafficClass = UInt8(truncatingIfNeeded: first >> 20)
            header.flowLabel = first & 0xF_FFFF
            guard payloadLength <= reader.remaining else {
                throw WireError(
                    .truncated, at: 4, "IPv6 payload length \(payloadLength), \(reader.remaining) bytes present")
            }
            let end = reader.position + payloadLength
            reader.limit = end
            var proto = nextHeader
            var walked = 0
            walk: while true {
                switch proto {
                case .hopByHop, .routing, .destinationOptions, .authentication, .fragment:
                    walked += 1
                    guard walked <= IPv6Packet.maximumExtensionHeaders else {
                        throw WireError(
                            .unsupported, at: reader.position,
                            "more than \(IPv6Packet.maximumExtensionHeaders) extension headers")
                    }
                    let at = reader.position
                    let next = IPProtocol(rawValue: try reader.readUInt8("extension next header"))
                    let lengthField = Int(try reader.readUInt8("extension length"))
                    let total: Int
                    switch proto {
                    case .fragment:
                        // RFC 8200 §4.5: fixed 8 bytes; offset in the top 13 bits of bytes 2-3.
                        let offsetAndFlags = try reader.readUInt16("fragment offset")
                        guard offsetAndFlags >> 3 == 0 else {
                            throw WireError(.unsupported, at: at, "a non-first IPv6 fragment has no transport header")
                        }
                        total = 8
                        try reader.skip(total - 4, "fragment header")
                    case .authentication:
                        // RFC 4302 §2.2: length in 4-byte units, minus 2.
                        total = (lengthField + 2) * 4
                        try reader.skip(total - 2, "authentication header")
                    default:
                        // RFC 8200 §4.3: length in 8-byte units, not counting the first 8 bytes.
                        total = (lengthField + 1) * 8
                        try reader.skip(total - 2, "extension header")
                    }
                    proto = next
                default:
                    break walk
                }
            }
            return (header, proto, reader.position, end - reader.position)
        }
        self.header = header
        self.upperLayerProtocol = proto
        self.payload = buffer.slice(from: offset, length: length)
    }

    /// Appends the fixed header (next header = `header.nextHeader`, no extension headers) and the payload.
    public func write(to buffer: inout ByteBuffer) {
        let h = self.header
        buffer.writeInteger(UInt32(6) << 28 | UInt32(h.trafficClass) << 20 | h.flowLabel & 0xF_FFFF)
        buffer.writeInteger(UInt16(self.payload.readableBytes))
        buffer.writeInteger(h.nextHeader.rawValue)
        buffer.writeInteger(h.hopLimit)
        buffer.writeInteger(h.source.high)
        buffer.writeInteger(h.source.low)
        buffer.writeInteger(h.destination.high)
        buffer.writeInteger(h.destination.low)
        var payload = self.payload
        buffer.writeBuffer(&payload)
    }
}
