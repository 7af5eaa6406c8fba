/// A DNS RR TYPE (RFC 1035 §3.2.2 and the IANA registry). Unknown values are kept as they are (RFC 3597).
public struct DNSRecordType: RawRepresentable, Hashable, Sendable, Comparable, CustomStringConvertible {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    public static let a = DNSRecordType(rawValue: 1)
    public static let ns = DNSRecordType(rawValue: 2)
    public static let cname = DNSRecordType(rawValue: 5)
    public static let soa = DNSRecordType(rawValue: 6)
    public static let null = DNSRecordType(rawValue: 10)
    public static let ptr = DNSRecordType(rawValue: 12)
    public static let hinfo = DNSRecordType(rawValue: 13)
    public static let txt = DNSRecordType(rawValue: 16)
    public static let aaaa = DNSRecordType(rawValue: 28)
    public static let srv = DNSRecordType(rawValue: 33)
    public static let opt = DNSRecordType(rawValue: 41)
    public static let nsec = DNSRecordType(rawValue: 47)
    /// QTYPE 255 (RFC 1035 §3.2.3), "*" in zone files; in mDNS a probe asks with it (RFC 6762 §8.1).
    public static let any = DNSRecordType(rawValue: 255)

    public var description: String {
        switch self {
        case .a: return "A"
        case .ns: return "NS"
        case .cname: return "CNAME"
        case .soa: return "SOA"
        case .null: return "NULL"
        case .ptr: return "PTR"
        case .hinfo: return "HINFO"
        case .txt: return "TXT"
        case .aaaa: return "AAAA"
        case .srv: return "SRV"
        case .opt: return "OPT"
        case .nsec: return "NSEC"
        case .any: return "ANY"
        default: return "TYPE\(self.rawValue)"
        }
    }

    public static func < (lhs: DNSRecordType, rhs: DNSRecordType) -> Bool { lhs.rawValue < rhs.rawValue }
}

/// A DNS CLASS with the mDNS top bit already removed (RFC 6762 §18.12, §18.13).
public struct DNSClass: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    public static let `in` = DNSClass(rawValue: 1)
    /// RFC 2136 §2.4: class NONE marks "delete this RR" in an UPDATE.
    public static let none = DNSClass(rawValue: 254)
    /// RFC 1035 §3.2.5 QCLASS "*"; RFC 2136 §2.5.2 uses it to delete an RRset.
    public static let any = DNSClass(rawValue: 255)

    public var description: String {
        switch self {
        case .in: return "IN"
        case .none: return "NONE"
        case .any: return "ANY"
        default: return "CLASS\(self.rawValue)"
        }
    }
}

/// RFC 1035 §4.1.1 OPCODE; RFC 2136 adds UPDATE (5).
public struct DNSOpcode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue & 0x0F }

    public static let query = DNSOpcode(rawValue: 0)
    public static let update = DNSOpcode(rawValue: 5)

    public var description: String {
        switch self {
        case .query: return "QUERY"
        case .update: return "UPDATE"
        default: return "OPCODE\(self.rawValue)"
        }
    }
}

/// The 4-bit header RCODE (RFC 1035 §4.1.1, RFC 2136 §2.2).
public struct DNSResponseCode: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue & 0x0F }

    public static let noError = DNSResponseCode(rawValue: 0)
    public static let formatError = DNSResponseCode(rawValue: 1)
    public static let serverFailure = DNSResponseCode(rawValue: 2)
    public static let nameError = DNSResponseCode(rawValue: 3)
    public static let notImplemented = DNSResponseCode(rawValue: 4)
    public static let refused = DNSResponseCode(rawValue: 5)

    public var description: String {
        switch self {
        case .noError: return "NOERROR"
        case .formatError: return "FORMERR"
        case .serverFailure: return "SERVFAIL"
        case .nameError: return "NXDOMAIN"
        case .notImplemented: return "NOTIMP"
        case .refused: return "REFUSED"
        default: return "RCODE\(self.rawValue)"
        }
    }
}
