/// A resource record (RFC 1035 §4.1.3) as mDNS uses it.
///
/// The top bit of CLASS is the mDNS cache-flush bit (RFC 6762 §10.2) and is split out into `cacheFlush`, except
/// for OPT, whose CLASS is a payload size (RFC 6891 §6.1.2; RFC 6762 §10.2 excludes it): for OPT `rrclass` keeps
/// all 16 bits and `cacheFlush` is always false.
public struct DNSResourceRecord: Hashable, Sendable {
    public var name: DNSName
    public var rrclass: DNSClass
    public var cacheFlush: Bool
    public var ttl: UInt32
    public var rdata: DNSRData

    public var type: DNSRecordType { self.rdata.recordType }

    public init(name: DNSName, rrclass: DNSClass = .in, cacheFlush: Bool = false, ttl: UInt32, rdata: DNSRData) {
        self.name = name
        self.rrclass = rrclass
        self.cacheFlush = cacheFlush
        self.ttl = ttl
        self.rdata = rdata
    }

    /// An OPT pseudo-record with the root name (RFC 6891 §6.1.2).
    public static func opt(_ header: EDNSHeader, options: [EDNSOption]) -> DNSResourceRecord {
        DNSResourceRecord(
            name: .root,
            rrclass: DNSClass(rawValue: header.udpPayloadSize),
            cacheFlush: false,
            ttl: header.ttl,
            rdata: .opt(OPTRecord(options: options))
        )
    }

    /// For an OPT record: its CLASS and TTL read as RFC 6891 §6.1.3 fields. Nil for any other type.
    public var ednsHeader: EDNSHeader? {
        guard case .opt = self.rdata else { return nil }
        return EDNSHeader(rrclass: self.rrclass.rawValue, ttl: self.ttl)
    }

    /// Smallest encoding: root name (1) + type, class (4) + TTL (4) + RDLENGTH (2).
    static let minimumWireLength = 11

    /// Reads one record; nil when the record is well-formed on the outside but is to be skipped (see
    /// `DNSRData.decode`).
    static func read(from reader: inout ByteReader) throws(WireError) -> DNSResourceRecord? {
        let name = try reader.readName()
        let type = DNSRecordType(rawValue: try reader.readUInt16("record type"))
        let rawClass = try reader.readUInt16("record class")
        let ttl = try reader.readUInt32("record TTL")
        let length = Int(try reader.readUInt16("RDLENGTH"))
        let rdata: DNSRData?
        do throws(WireError) {
            rdata = try reader.withWindow(length, "RDATA") { (window: inout ByteReader) throws(WireError) in
                try DNSRData.decode(type: type, from: &window)
            }
        } catch {
            // RFC 2136 §2.4, §2.5: prerequisites and deletions of class ANY/NONE carry no RDATA whatever the type,
            // so an empty RDATA that its type cannot have is kept as such instead of failing the message.
            let bareClass = rawClass & 0x7FFF
            guard length == 0, type != .opt, bareClass == DNSClass.any.rawValue || bareClass == DNSClass.none.rawValue
            else {
                throw error
            }
            rdata = .unknown(try UnknownRecord(type: type, data: []))
        }
        guard let rdata else { return nil }
        if type == .opt {
            return DNSResourceRecord(
                name: name, rrclass: DNSClass(rawValue: rawClass), cacheFlush: false, ttl: ttl, rdata: rdata)
        }
        return DNSResourceRecord(
            name: name, rrclass: DNSClass(rawValue: rawClass & 0x7FFF), cacheFlush: rawClass & 0x8000 != 0, ttl: ttl,
            rdata: rdata)
    }

    func write(to writer: inout DNSWriter) {
        writer.writeName(self.name, compress: true)
        writer.writeUInt16(self.type.rawValue)
        if case .opt = self.rdata {
            writer.writeUInt16(self.rrclass.rawValue)
        } else {
            writer.writeUInt16(self.rrclass.rawValue & 0x7FFF | (self.cacheFlush ? 0x8000 : 0))
        }
        writer.writeUInt32(self.ttl)
        writer.writeLengthPrefixed { self.rdata.write(to: &$0) }
    }
}

extension DNSRData {
    /// The RDATA with every name written out in full (no compression): the form RFC 6762 §8.2 compares when two
    /// hosts probe for one name at once, and an upper bound on the RDATA's size in any message.
    public var uncompressedBytes: [UInt8] {
        var writer = DNSWriter(
            options: DNSEncodingOptions(compressNames: false, compressSRVTarget: false), capacity: 64)
        self.write(to: &writer)
        return writer.bytes
    }
}

extension DNSResourceRecord {
    /// The record's size with no name compressed: an upper bound on what it adds to any message.
    public var uncompressedWireLength: Int {
        self.name.wireLength + 10 + self.rdata.uncompressedBytes.count
    }

    /// RFC 6762 §8.1 / RFC 2181 "identical": name, type, class and RDATA equal (TTL and cache-flush bit aside).
    public func isIdentical(to other: DNSResourceRecord) -> Bool {
        self.rrclass == other.rrclass && self.rdata == other.rdata && self.name == other.name
    }
}
