/// One entry of the question section (RFC 1035 §4.1.2); in an UPDATE, the zone section (RFC 2136 §2.3).
public struct DNSQuestion: Hashable, Sendable {
    public var name: DNSName
    public var type: DNSRecordType
    public var qclass: DNSClass
    /// RFC 6762 §5.4: the top bit of QCLASS asks for a unicast response ("QU"); clear means "QM".
    public var unicastResponse: Bool

    public init(name: DNSName, type: DNSRecordType, qclass: DNSClass = .in, unicastResponse: Bool = false) {
        self.name = name
        self.type = type
        self.qclass = qclass
        self.unicastResponse = unicastResponse
    }

    /// Smallest encoding: root name (1) + type (2) + class (2).
    static let minimumWireLength = 5

    init(from reader: inout ByteReader) throws(WireError) {
        self.name = try reader.readName()
        self.type = DNSRecordType(rawValue: try reader.readUInt16("question type"))
        let rawClass = try reader.readUInt16("question class")
        self.qclass = DNSClass(rawValue: rawClass & 0x7FFF)
        self.unicastResponse = rawClass & 0x8000 != 0
    }

    func write(to writer: inout DNSWriter) {
        writer.writeName(self.name, compress: true)
        writer.writeUInt16(self.type.rawValue)
        writer.writeUInt16(self.qclass.rawValue | (self.unicastResponse ? 0x8000 : 0))
    }
}
