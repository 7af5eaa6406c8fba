/// RFC 1035 §3.3.12 PTR RDATA: one domain name, which may be compressed.
///
///     +--+--+--+--+--+--+--+--+--+--+--+--+--+--+--+--+
///     /                   PTRDNAME                    /
///     +--+--+--+--+--+--+--+--+--+--+--+--+--+--+--+--+
///
/// DNS-SD browsing (`_svc._tcp.local. PTR Inst._svc._tcp.local.`), service enumeration and reverse mapping
/// (`2.2.0.192.in-addr.arpa. PTR host.local.`) all use it; a sleep proxy learns which addresses to claim from
/// the reverse-mapping ones (docs/protocol.md §4.1).
public struct PTRRecord: Hashable, Sendable {
    public static let recordType = DNSRecordType.ptr
    public var target: DNSName

    public init(target: DNSName) { self.target = target }

    init(from reader: inout ByteReader) throws(WireError) {
        self.target = try reader.readName()
    }

    func write(to writer: inout DNSWriter) { writer.writeName(self.target, compress: true) }
}
