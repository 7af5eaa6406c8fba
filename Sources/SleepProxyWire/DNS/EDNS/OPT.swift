/// RFC 6891 §6.1.2 OPT pseudo-record RDATA: a sequence of EDNS options.
///
/// The OPT record's CLASS holds the sender's UDP payload size and its TTL holds the extended RCODE, version and
/// flags (RFC 6891 §6.1.3); `DNSResourceRecord` exposes those through `ednsHeader`. Apple's packets carry
/// class 1440 and TTL 0x00001194, i.e. non-zero Z bits, which RFC 6891 says to ignore: they are accepted and
/// kept as they are.
public struct OPTRecord: Hashable, Sendable {
    public static let recordType = DNSRecordType.opt
    public var options: [EDNSOption]

    public init(options: [EDNSOption]) { self.options = options }

    public var updateLease: UpdateLeaseOption? {
        for case .updateLease(let lease) in self.options { return lease }
        return nil
    }

    public var owner: OwnerOption? {
        for case .owner(let owner) in self.options { return owner }
        return nil
    }

    /// Options must exactly fill the RDATA; Apple's parser discards an OPT whose options do not
    /// (docs/protocol.md §3.1), so a partial option header or an OPTION-LENGTH past the end is malformed.
    init(from reader: inout ByteReader) throws(WireError) {
        var options: [EDNSOption] = []
        while reader.remaining > 0 {
            guard reader.remaining >= 4 else {
                throw WireError(
                    .badOption, at: reader.position, "\(reader.remaining) bytes left, too few for an option")
            }
            let code = try reader.readUInt16("option code")
            let length = Int(try reader.readUInt16("option length"))
            guard length <= reader.remaining else {
                throw WireError(
                    .badOption, at: reader.position - 2,
                    "option \(code) claims \(length) bytes, \(reader.remaining) left")
            }
            options.append(EDNSOption(code: code, data: try reader.readBytes(length, "option data")))
        }
        self.options = options
    }

    /// OPT RDATA of options whose lengths are bounded by their types (lease, owner) or by the caller.
    func write(to writer: inout DNSWriter) {
        for option in self.options {
            let data = option.data
            writer.writeUInt16(option.code)
            writer.writeUInt16(UInt16(data.count))
            writer.writeBytes(data)
        }
    }
}

/// The fields RFC 6891 §6.1.3 packs into an OPT record's CLASS and TTL.
public struct EDNSHeader: Hashable, Sendable {
    /// RFC 6891 §6.2.3: the requester's UDP payload size; Apple sends 1440 (`NormalMaxDNSMessageData`).
    public var udpPayloadSize: UInt16
    public var extendedRCode: UInt8
    public var version: UInt8
    public var dnssecOK: Bool
    /// The 15 Z bits; must be ignored on receipt (Apple sends 0x1194 here).
    public var z: UInt16

    public init(
        udpPayloadSize: UInt16, extendedRCode: UInt8 = 0, version: UInt8 = 0, dnssecOK: Bool = false, z: UInt16 = 0
    ) {
        self.udpPayloadSize = udpPayloadSize
        self.extendedRCode = extendedRCode
        self.version = version
        self.dnssecOK = dnssecOK
        self.z = z & 0x7FFF
    }

    init(rrclass: UInt16, ttl: UInt32) {
        self.udpPayloadSize = rrclass
        self.extendedRCode = UInt8(ttl >> 24)
        self.version = UInt8(truncatingIfNeeded: ttl >> 16)
        self.dnssecOK = ttl & 0x8000 != 0
        self.z = UInt16(ttl & 0x7FFF)
    }

    var ttl: UInt32 {
        UInt32(self.extendedRCode) << 24 | UInt32(self.version) << 16 | (self.dnssecOK ? 0x8000 : 0) | UInt32(self.z)
    }
}
