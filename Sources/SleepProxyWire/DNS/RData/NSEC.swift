/// RFC 4034 §4.1 NSEC RDATA: the next owner name and a bitmap of the types that exist at this name.
///
///     /                      Next Domain Name                         /
///     /                       Type Bit Maps                           /
///
/// The bitmap is a list of windows: window number, bitmap length (1-32), then the bits, most significant
/// first, for types `window * 256 + bit` (RFC 4034 §4.1.2). Windows appear in increasing order.
///
/// mDNS uses a restricted form to say "this name has only these types" (RFC 6762 §6.1): the next name is the
/// owner name itself and only window 0 appears. Both forms decode here; windows are kept exactly as received
/// (Apple trims trailing zero bytes, others may not) so a record re-encodes to the same bytes.
public struct NSECRecord: Hashable, Sendable {
    public static let recordType = DNSRecordType.nsec
    /// RFC 4034 §4.1.2: a window's bitmap is 1 to 32 bytes.
    public static let maximumBitmapLength = 32

    public struct Window: Hashable, Sendable {
        public var number: UInt8
        public var bitmap: [UInt8]
    }

    public var nextName: DNSName
    public private(set) var windows: [Window]

    /// Builds the canonical bitmap for `types`: sorted windows, each trimmed after its last non-zero byte.
    public init(nextName: DNSName, types: some Sequence<DNSRecordType>) {
        var byWindow: [UInt8: [UInt8]] = [:]
        for type in types {
            let window = UInt8(type.rawValue >> 8)
            let bit = Int(type.rawValue & 0xFF)
            var bitmap = byWindow[window] ?? []
            if bitmap.count <= bit / 8 { bitmap += Array(repeating: 0, count: bit / 8 + 1 - bitmap.count) }
            bitmap[bit / 8] |= 0x80 >> UInt8(bit % 8)
            byWindow[window] = bitmap
        }
        self.nextName = nextName
        self.windows = byWindow.keys.sorted().map { Window(number: $0, bitmap: byWindow[$0]!) }
    }

    public init(nextName: DNSName, windows: [Window]) throws(WireError) {
        var previous = -1
        for window in windows {
            guard Int(window.number) > previous,
                (1...NSECRecord.maximumBitmapLength).contains(window.bitmap.count)
            else { throw WireError(.invalidArgument, at: 0, "NSEC windows must increase and hold 1-32 bytes") }
            previous = Int(window.number)
        }
        self.nextName = nextName
        self.windows = windows
    }

    /// The types whose bits are set, in increasing order.
    public var types: [DNSRecordType] {
        var result: [DNSRecordType] = []
        for window in self.windows {
            for (byteIndex, byte) in window.bitmap.enumerated() where byte != 0 {
                for bit in 0..<8 where byte & (0x80 >> UInt8(bit)) != 0 {
                    result.append(DNSRecordType(rawValue: UInt16(window.number) << 8 | UInt16(byteIndex * 8 + bit)))
                }
            }
        }
        return result
    }

    public func contains(_ type: DNSRecordType) -> Bool {
        let windowNumber = UInt8(type.rawValue >> 8)
        let bit = Int(type.rawValue & 0xFF)
        guard let window = self.windows.first(where: { $0.number == windowNumber }), bit / 8 < window.bitmap.count
        else { return false }
        return window.bitmap[bit / 8] & (0x80 >> UInt8(bit % 8)) != 0
    }

    /// RFC 6762 §6.1: next name equals the owner and only window 0 is present.
    public func isRestrictedMDNSForm(owner: DNSName) -> Bool {
        self.nextName == owner && self.windows.allSatisfy { $0.number == 0 }
    }

    init(from reader: inout ByteReader) throws(WireError) {
        self.nextName = try reader.readName()
        var windows: [Window] = []
        var previous = -1
        while reader.remaining > 0 {
            let at = reader.position
            let number = try reader.readUInt8("NSEC window number")
            let length = Int(try reader.readUInt8("NSEC bitmap length"))
            guard Int(number) > previous else {
                throw WireError(.badRData, at: at, "NSEC window \(number) is not in increasing order")
            }
            guard (1...NSECRecord.maximumBitmapLength).contains(length) else {
                throw WireError(.badRData, at: at, "NSEC bitmap length \(length) outside 1-32")
            }
            windows.append(Window(number: number, bitmap: try reader.readBytes(length, "NSEC bitmap")))
            previous = Int(number)
        }
        self.windows = windows
    }

    func write(to writer: inout DNSWriter) {
        writer.writeName(self.nextName, compress: true)
        for window in self.windows {
            writer.writeUInt8(window.number)
            writer.writeUInt8(UInt8(window.bitmap.count))
            writer.writeBytes(window.bitmap)
        }
    }
}
