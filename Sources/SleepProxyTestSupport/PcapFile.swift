/// A reader for classic libpcap files (not pcapng): enough to pull frames out of the bundled captures.
public struct PcapFile: Sendable {
    public struct Record: Sendable {
        public var seconds: UInt32
        /// Microseconds (or nanoseconds in the nanosecond format) past `seconds`.
        public var fraction: UInt32
        public var data: [UInt8]
    }

    public var linkType: UInt32
    public var records: [Record]

    public init(_ bytes: [UInt8]) throws(PcapError) {
        guard bytes.count >= 24 else { throw PcapError("short global header") }
        func u32(_ at: Int, _ little: Bool) -> UInt32 {
            let b = bytes[at..<at + 4].map(UInt32.init)
            return little ? b[0] | b[1] << 8 | b[2] << 16 | b[3] << 24 : b[3] | b[2] << 8 | b[1] << 16 | b[0] << 24
        }
        let magics: Set<UInt32> = [0xA1B2_C3D4, 0xA1B2_3C4D]
        let little: Bool
        if magics.contains(u32(0, true)) {
            little = true
        } else if magics.contains(u32(0, false)) {
            little = false
        } else {
            throw PcapError("bad magic")
        }
        self.linkType = u32(20, little)
        var records: [Record] = []
        var offset = 24
        while offset < bytes.count {
            guard offset + 16 <= bytes.count else { throw PcapError("short record header") }
            let length = Int(u32(offset + 8, little))
            guard offset + 16 + length <= bytes.count else { throw PcapError("short record") }
            records.append(
                Record(
                    seconds: u32(offset, little), fraction: u32(offset + 4, little),
                    data: Array(bytes[offset + 16..<offset + 16 + length])))
            offset += 16 + length
        }
        self.records = records
    }
}

/// A capture file that is not a classic libpcap file, or is cut short.
public struct PcapError: Error, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}
