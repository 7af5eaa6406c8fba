/// RDATA of a type this codec does not interpret, kept as opaque bytes (RFC 3597 §5) so that it is stored and
/// served again exactly as registered.
///
/// RFC 3597 §4 forbids compression inside the RDATA of types that are not well known, so the bytes can be
/// copied into any message unchanged.
public struct UnknownRecord: Hashable, Sendable {
    public var type: DNSRecordType
    public private(set) var data: [UInt8]

    public init(type: DNSRecordType, data: [UInt8]) throws(WireError) {
        guard data.count <= TXTRecord.maximumRDataLength else {
            throw WireError(.invalidArgument, at: 0, "RDATA of \(data.count) bytes (limit 65535)")
        }
        self.type = type
        self.data = data
    }

    init(type: DNSRecordType, from reader: inout ByteReader) throws(WireError) {
        self.type = type
        self.data = try reader.readBytes(reader.remaining, "RDATA")
    }

    func write(to writer: inout DNSWriter) { writer.writeBytes(self.data) }
}
