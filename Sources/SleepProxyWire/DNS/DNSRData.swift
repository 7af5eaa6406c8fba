/// The RDATA of a resource record, one case per type this codec understands, and `.unknown` for the rest.
public enum DNSRData: Hashable, Sendable {
    case a(ARecord)
    case aaaa(AAAARecord)
    case ptr(PTRRecord)
    case srv(SRVRecord)
    case txt(TXTRecord)
    case hinfo(HINFORecord)
    case nsec(NSECRecord)
    case null(NULLRecord)
    case opt(OPTRecord)
    case unknown(UnknownRecord)

    public var recordType: DNSRecordType {
        switch self {
        case .a: return .a
        case .aaaa: return .aaaa
        case .ptr: return .ptr
        case .srv: return .srv
        case .txt: return .txt
        case .hinfo: return .hinfo
        case .nsec: return .nsec
        case .null: return .null
        case .opt: return .opt
        case .unknown(let record): return record.type
        }
    }

    /// Decodes RDATA of `type`; `reader` is limited to the RDATA window. Returns nil for a record that is to be
    /// skipped rather than fail the whole message.
    static func decode(type: DNSRecordType, from reader: inout ByteReader) throws(WireError) -> DNSRData? {
        switch type {
        case .a: return .a(try ARecord(from: &reader))
        case .aaaa: return .aaaa(try AAAARecord(from: &reader))
        case .ptr: return .ptr(try PTRRecord(from: &reader))
        case .srv: return .srv(try SRVRecord(from: &reader))
        case .txt: return .txt(try TXTRecord(from: &reader))
        case .hinfo: return .hinfo(try HINFORecord(from: &reader))
        case .null: return .null(try NULLRecord(from: &reader))
        case .opt: return .opt(try OPTRecord(from: &reader))
        case .nsec:
            // RFC 6762 §6.1: receivers "MUST NOT reject a whole message" for an NSEC they cannot parse. The record
            // is skipped, not kept as bytes: its next-name may hold a compression pointer that only means
            // something at its original offset (found by fuzzing: copied elsewhere, it turned into a valid name).
            let start = reader.position
            do throws(WireError) {
                return .nsec(try NSECRecord(from: &reader))
            } catch {
                reader.position = start
                try reader.skip(reader.remaining, "NSEC RDATA")
                return nil
            }
        default:
            if UnknownRecord.compressibleLayouts[type] != nil {
                return .unknown(try UnknownRecord(decompressing: type, from: &reader))
            }
            return .unknown(try UnknownRecord(type: type, from: &reader))
        }
    }

    func write(to writer: inout DNSWriter) {
        switch self {
        case .a(let record): record.write(to: &writer)
        case .aaaa(let record): record.write(to: &writer)
        case .ptr(let record): record.write(to: &writer)
        case .srv(let record): record.write(to: &writer)
        case .txt(let record): record.write(to: &writer)
        case .hinfo(let record): record.write(to: &writer)
        case .nsec(let record): record.write(to: &writer)
        case .null(let record): record.write(to: &writer)
        case .opt(let record): record.write(to: &writer)
        case .unknown(let record): record.write(to: &writer)
        }
    }
}
