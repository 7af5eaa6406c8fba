import NIOCore

/// A UDP header (RFC 768) and the payload its length field delimits.
///
///     src port (2) | dst port (2) | length (2) | checksum (2)
public struct UDPDatagram: Hashable, Sendable {
    public static let headerLength = 8

    public var sourcePort: UInt16
    public var destinationPort: UInt16
    public var checksum: UInt16
    public var payload: ByteBuffer

    public init(sourcePort: UInt16, destinationPort: UInt16, checksum: UInt16 = 0, payload: ByteBuffer) {
        self.sourcePort = sourcePort
        self.destinationPort = destinationPort
        self.checksum = checksum
        self.payload = payload
    }

    public init(decoding buffer: ByteBuffer) throws(WireError) {
        let (datagram, length) = try buffer.decode { (reader: inout ByteReader) throws(WireError) in
            let sourcePort = try reader.readUInt16("UDP source port")
            let destinationPort = try reader.readUInt16("UDP destination port")
            let length = Int(try reader.readUInt16("UDP length"))
            let checksum = try reader.readUInt16("UDP checksum")
            guard length >= UDPDatagram.headerLength else {
                throw WireError(.badHeader, at: 4, "UDP length \(length) < 8")
            }
            guard length <= reader.limit else {
                throw WireError(.truncated, at: 4, "UDP length \(length), \(reader.limit) bytes present")
            }
            return (
                UDPDatagram(
                    sourcePort: sourcePort, destinationPort: destinationPort, checksum: checksum, payload: ByteBuffer()),
                length
            )
        }
        self = datagram
        self.payload = buffer.slice(from: UDPDatagram.headerLength, length: length - UDPDatagram.headerLength)
    }

    public func write(to buffer: inout ByteBuffer) {
        buffer.writeInteger(self.sourcePort)
        buffer.writeInteger(self.destinationPort)
        buffer.writeInteger(UInt16(UDPDatagram.headerLength + self.payload.readableBytes))
        buffer.writeInteger(self.checksum)
        var payload = self.payload
        buffer.writeBuffer(&payload)
    }
}
