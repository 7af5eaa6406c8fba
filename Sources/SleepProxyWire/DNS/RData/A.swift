/// RFC 1035 §3.4.1 A RDATA: one IPv4 address.
///
///     +--+--+--+--+--+--+--+--+--+--+--+--+--+--+--+--+
///     |                    ADDRESS                    |
///     +--+--+--+--+--+--+--+--+--+--+--+--+--+--+--+--+
public struct ARecord: Hashable, Sendable {
    public static let recordType = DNSRecordType.a
    public var address: IPv4Address

    public init(address: IPv4Address) { self.address = address }

    init(from reader: inout ByteReader) throws(WireError) {
        guard reader.remaining == 4 else {
            throw WireError(.badRData, at: reader.position, "A RDATA must be 4 bytes, not \(reader.remaining)")
        }
        self.address = try reader.readIPv4("A address")
    }

    func write(to writer: inout DNSWriter) { writer.writeUInt32(self.address.rawValue) }
}
