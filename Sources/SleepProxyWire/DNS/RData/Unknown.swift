/// RDATA of a type this codec does not interpret, kept as opaque bytes (RFC 3597 §5) so that it is stored and
/// served again exactly as registered.
///
/// RFC 3597 §4 forbids compression inside the RDATA of types that are not well known, so their bytes can be
/// copied into any message unchanged. The RFC 1035 types that may be compressed (NS, CNAME, SOA, MX...) are
/// the exception: their names are decompressed on read, and `data` holds the uncompressed form, so no stored
/// byte ever depends on its position in the message it arrived in.
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

    /// One part of a compressible type's RDATA layout.
    enum Field {
        case name
        case bytes(Int)
    }

    /// RFC 3597 §4: the well-known types whose RDATA may contain compressed names (RFC 1035 §3.3), with their
    /// layouts. PTR is decoded as `PTRRecord` and is not listed.
    static let compressibleLayouts: [DNSRecordType: [Field]] = [
        DNSRecordType(rawValue: 2): [.name],  // NS
        DNSRecordType(rawValue: 3): [.name],  // MD
        DNSRecordType(rawValue: 4): [.name],  // MF
        DNSRecordType(rawValue: 5): [.name],  // CNAME
        DNSRecordType(rawValue: 6): [.name, .name, .bytes(20)],  // SOA: MNAME, RNAME, 5 × 32-bit
        DNSRecordType(rawValue: 7): [.name],  // MB
        DNSRecordType(rawValue: 8): [.name],  // MG
        DNSRecordType(rawValue: 9): [.name],  // MR
        DNSRecordType(rawValue: 14): [.name, .name],  // MINFO
        DNSRecordType(rawValue: 15): [.bytes(2), .name],  // MX: preference, exchange
    ]

    init(decompressing type: DNSRecordType, from reader: inout ByteReader) throws(WireError) {
        var data: [UInt8] = []
        for field in UnknownRecord.compressibleLayouts[type] ?? [] {
            switch field {
            case .name:
                data += try reader.readName().storage + [0]
            case .bytes(let count):
                data += try reader.readBytes(count, "RDATA field")
            }
        }
        self.type = type
        self.data = data
    }

    func write(to writer: inout DNSWriter) { writer.writeBytes(self.data) }
}
