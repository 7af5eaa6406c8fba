/// RFC 1035 §3.3.10 NULL RDATA: up to 65535 opaque bytes.
///
/// Apple's clients register TCP keepalive state as NULL records named `N._keepalive._dns-sd._udp.local.`
/// whose RDATA is a length byte, ASCII "t=... h=... d=..." text and a NUL (docs/protocol.md §6). The codec keeps
/// the bytes; interpreting them is the core's job.
public struct NULLRecord: Hashable, Sendable {
    public static let recordType = DNSRecordType.null
    public private(set) var data: [UInt8]

    public init(data: [UInt8]) throws(WireError) {
        guard data.count <= TXTRecord.maximumRDataLength else {
            throw WireError(.invalidArgument, at: 0, "NULL RDATA of \(data.count) bytes (limit 65535)")
        }
        self.data = data
    }

    init(from reader: inout ByteReader) throws(WireError) {
        self.data = try reader.readBytes(reader.remaining, "NULL data")
    }

    func write(to writer: inout DNSWriter) { writer.writeBytes(self.data) }
}
