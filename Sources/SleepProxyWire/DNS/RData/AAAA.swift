/// RFC 3596 §2.2 AAAA RDATA: one IPv6 address in 16 bytes, network order.
public struct AAAARecord: Hashable, Sendable {
    public static let recordType = DNSRecordType.aaaa
    public var address: IPv6Address

    public init(address: IPv6Address) { self.address = address }

    init(from reader: inout ByteReader) throws(WireError) {
        guard reader.remaining == 16 else {
            throw WireError(.badRData, at: reader.position, "AAAA RDATA must be 16 bytes, not \(reader.remaining)")
        }
        self.address = try reader.readIPv6("AAAA address")
    }

    func write(to writer: inout DNSWriter) {
        writer.writeUInt64(self.address.high)
        writer.writeUInt64(self.address.low)
    }
}
