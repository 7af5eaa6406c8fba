/// RFC 1035 §3.3.14 TXT RDATA: one or more <character-string>s, each a length byte and up to 255 bytes.
///
/// RFC 6763 §6.1: a TXT record with no key/value data is a single empty string, i.e. the one byte 0x00
/// (`TXTRecord.empty`). An RDATA of zero bytes is malformed by that rule but is accepted and kept as zero
/// strings, so that it re-encodes exactly as received.
public struct TXTRecord: Hashable, Sendable {
    public static let recordType = DNSRecordType.txt
    /// RFC 1035 §3.3: a <character-string> holds at most 255 bytes.
    public static let maximumStringLength = 255
    /// RDLENGTH is 16 bits (RFC 1035 §3.2.1).
    public static let maximumRDataLength = 65535

    public private(set) var strings: [[UInt8]]

    /// The DNS-SD "no data" TXT: one empty string.
    public static let empty = TXTRecord(uncheckedStrings: [[]])

    init(uncheckedStrings: [[UInt8]]) { self.strings = uncheckedStrings }

    public init(strings: [[UInt8]]) throws(WireError) {
        var total = 0
        for (index, string) in strings.enumerated() {
            guard string.count <= TXTRecord.maximumStringLength else {
                throw WireError(.invalidArgument, at: index, "TXT string of \(string.count) bytes (limit 255)")
            }
            total += 1 + string.count
        }
        guard total <= TXTRecord.maximumRDataLength else {
            throw WireError(.invalidArgument, at: 0, "TXT RDATA of \(total) bytes (limit 65535)")
        }
        self.strings = strings
    }

    public init(_ strings: [String]) throws(WireError) {
        try self.init(strings: strings.map { Array($0.utf8) })
    }

    /// RFC 6763 §6.3-6.4: "key=value" pairs; a string without "=" is a boolean key (value nil).
    public var keyValuePairs: [(key: String, value: [UInt8]?)] {
        self.strings.compactMap { string in
            guard !string.isEmpty else { return nil }
            if let equals = string.firstIndex(of: UInt8(ascii: "=")) {
                return (String(decoding: string[..<equals], as: UTF8.self), Array(string[(equals + 1)...]))
            }
            return (String(decoding: string, as: UTF8.self), nil)
        }
    }

    init(from reader: inout ByteReader) throws(WireError) {
        var strings: [[UInt8]] = []
        while reader.remaining > 0 {
            let length = Int(try reader.readUInt8("TXT string length"))
            strings.append(try reader.readBytes(length, "TXT string"))
        }
        self.strings = strings
    }

    func write(to writer: inout DNSWriter) {
        for string in self.strings {
            writer.writeUInt8(UInt8(string.count))
            writer.writeBytes(string)
        }
    }
}
