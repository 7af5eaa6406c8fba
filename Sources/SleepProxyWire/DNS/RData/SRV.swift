/// RFC 2782 SRV RDATA: where a service instance runs.
///
///     +--+--+--+--+--+--+--+--+--+--+--+--+--+--+--+--+
///     |                   PRIORITY                    |
///     |                    WEIGHT                     |
///     |                     PORT                      |
///     /                    TARGET                     /
///     +--+--+--+--+--+--+--+--+--+--+--+--+--+--+--+--+
///
/// The target is read whether or not it is compressed (Apple compresses it in mDNS); whether it is compressed
/// on write is `DNSEncodingOptions.compressSRVTarget`.
public struct SRVRecord: Hashable, Sendable {
    public static let recordType = DNSRecordType.srv
    public var priority: UInt16
    public var weight: UInt16
    public var port: UInt16
    public var target: DNSName

    public init(priority: UInt16 = 0, weight: UInt16 = 0, port: UInt16, target: DNSName) {
        self.priority = priority
        self.weight = weight
        self.port = port
        self.target = target
    }

    init(from reader: inout ByteReader) throws(WireError) {
        self.priority = try reader.readUInt16("SRV priority")
        self.weight = try reader.readUInt16("SRV weight")
        self.port = try reader.readUInt16("SRV port")
        self.target = try reader.readName()
    }

    func write(to writer: inout DNSWriter) {
        writer.writeUInt16(self.priority)
        writer.writeUInt16(self.weight)
        writer.writeUInt16(self.port)
        writer.writeName(self.target, compress: writer.options.compressSRVTarget)
    }
}
