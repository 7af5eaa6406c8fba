/// RFC 1035 §3.3.2 HINFO RDATA: two <character-string>s, CPU and OS.
public struct HINFORecord: Hashable, Sendable {
    public static let recordType = DNSRecordType.hinfo
    public private(set) var cpu: [UInt8]
    public private(set) var os: [UInt8]

    public init(cpu: [UInt8], os: [UInt8]) throws(WireError) {
        guard cpu.count <= TXTRecord.maximumStringLength, os.count <= TXTRecord.maximumStringLength else {
            throw WireError(.invalidArgument, at: 0, "HINFO strings are at most 255 bytes")
        }
        self.cpu = cpu
        self.os = os
    }

    init(from reader: inout ByteReader) throws(WireError) {
        let cpuLength = Int(try reader.readUInt8("HINFO CPU length"))
        self.cpu = try reader.readBytes(cpuLength, "HINFO CPU")
        let osLength = Int(try reader.readUInt8("HINFO OS length"))
        self.os = try reader.readBytes(osLength, "HINFO OS")
    }

    func write(to writer: inout DNSWriter) {
        writer.writeUInt8(UInt8(self.cpu.count))
        writer.writeBytes(self.cpu)
        writer.writeUInt8(UInt8(self.os.count))
        writer.writeBytes(self.os)
    }
}
