/// A NetBIOS name service packet (RFC 1002 §4.2, UDP 137): the DNS header's shape, names first-level encoded,
/// and the few record types a B-node uses. Decoding accepts what Windows and Samba send (one label of 32
/// characters, no scope, a pointer only back to an earlier name) and throws on anything else.
public struct NetBIOSMessage: Hashable, Sendable {
    /// RFC 1002 §4.2.1.1: the opcodes.
    public enum Opcode: UInt8, Hashable, Sendable {
        case query = 0
        case registration = 5
        case release = 6
        case waitForAcknowledgement = 7
        case refresh = 8
        /// Windows refreshes with 9 as well (RFC 1002 lists 8; 9 is its alternative code).
        case refreshAlternative = 9
        case multihomedRegistration = 15
    }

    /// RFC 1002 §4.2.1.2: question and record types.
    public static let typeNB: UInt16 = 0x0020
    public static let typeNBSTAT: UInt16 = 0x0021
    public static let classIN: UInt16 = 0x0001
    /// RFC 1002 §4.2.1.1 NM_FLAGS (in the header's second word): authoritative, truncated, recursion desired and
    /// available, broadcast.
    public static let flagResponse: UInt16 = 0x8000
    public static let flagAuthoritative: UInt16 = 0x0400
    public static let flagRecursionDesired: UInt16 = 0x0100
    public static let flagRecursionAvailable: UInt16 = 0x0080
    public static let flagBroadcast: UInt16 = 0x0010
    /// RFC 1002 §4.2.1.3 NB_FLAGS: a group name.
    public static let groupBit: UInt16 = 0x8000
    /// Node-status name flags: active (`ACT`), as every name a running host lists is.
    public static let activeBit: UInt16 = 0x0400
    /// RFC 1002 §4.2.6: the negative registration response's RCODE when the name is another's (`ACT_ERR`).
    public static let activeError: UInt8 = 6
    /// The largest NetBIOS datagram on the name service port: RFC 1002 §4.2.1 limits it to 576 bytes, and a
    /// node-status answer with the most names (255 × 18 bytes) exceeds that, so the UDP payload bound is ours.
    public static let maximumSize = 1500

    public struct Question: Hashable, Sendable {
        public var name: NetBIOSName
        public var type: UInt16
        public init(name: NetBIOSName, type: UInt16) {
            self.name = name
            self.type = type
        }
    }

    public struct Record: Hashable, Sendable {
        public var name: NetBIOSName
        public var type: UInt16
        public var ttl: UInt32
        public var rdata: [UInt8]
        public init(name: NetBIOSName, type: UInt16, ttl: UInt32, rdata: [UInt8]) {
            self.name = name
            self.type = type
            self.ttl = ttl
            self.rdata = rdata
        }

        /// The NB records' (NB_FLAGS, IPv4 address) pairs (RFC 1002 §4.2.1.3); nil for other types or a length
        /// that is not a multiple of 6.
        public var addressEntries: [(flags: UInt16, address: IPv4Address)]? {
            guard self.type == NetBIOSMessage.typeNB, !self.rdata.isEmpty, self.rdata.count % 6 == 0 else {
                return nil
            }
            return stride(from: 0, to: self.rdata.count, by: 6).map { at in
                let flags = UInt16(self.rdata[at]) << 8 | UInt16(self.rdata[at + 1])
                let raw = self.rdata[at + 2..<at + 6].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
                return (flags, IPv4Address(rawValue: raw))
            }
        }
    }

    public var id: UInt16
    /// The header's second word as sent (response bit, opcode, NM_FLAGS, RCODE).
    public var flags: UInt16
    public var questions: [Question] = []
    public var answers: [Record] = []
    public var authorities: [Record] = []
    public var additionals: [Record] = []

    public init(id: UInt16, flags: UInt16) {
        self.id = id
        self.flags = flags
    }

    public var isResponse: Bool { self.flags & Self.flagResponse != 0 }
    public var opcode: Opcode? { Opcode(rawValue: UInt8((self.flags >> 11) & 0x0F)) }
    public var isBroadcast: Bool { self.flags & Self.flagBroadcast != 0 }
    public var responseCode: UInt8 { UInt8(self.flags & 0x0F) }

    // MARK: - Decoding

    public init(decoding bytes: [UInt8]) throws(WireError) {
        guard bytes.count <= Self.maximumSize else {
            throw WireError(.tooLarge, at: 0, "NetBIOS packet of \(bytes.count) bytes")
        }
        var cursor = NetBIOSCursor(bytes: bytes)
        self.id = try cursor.u16("NetBIOS ID")
        self.flags = try cursor.u16("NetBIOS flags")
        let counts = [
            try cursor.u16("QDCOUNT"), try cursor.u16("ANCOUNT"), try cursor.u16("NSCOUNT"), try cursor.u16("ARCOUNT"),
        ]
        // Each question takes at least 38 bytes and each record 12 (a pointer for its name): a count past that
        // is a lie.
        let recordCount = Int(counts[1]) + Int(counts[2]) + Int(counts[3])
        guard 12 + Int(counts[0]) * 38 + recordCount * 12 <= bytes.count else {
            throw WireError(.badCount, at: 4, "NetBIOS counts \(counts) do not fit \(bytes.count) bytes")
        }
        for _ in 0..<counts[0] {
            let name = try cursor.name()
            let type = try cursor.u16("question type")
            _ = try cursor.u16("question class")
            self.questions.append(Question(name: name, type: type))
        }
        func records(_ count: UInt16) throws(WireError) -> [Record] {
            var result: [Record] = []
            for _ in 0..<count {
                let name = try cursor.name()
                let type = try cursor.u16("record type")
                _ = try cursor.u16("record class")
                let ttl = try cursor.u32("record TTL")
                let length = Int(try cursor.u16("RDLENGTH"))
                result.append(Record(name: name, type: type, ttl: ttl, rdata: try cursor.take(length, "RDATA")))
            }
            return result
        }
        self.answers = try records(counts[1])
        self.authorities = try records(counts[2])
        self.additionals = try records(counts[3])
        guard cursor.offset == bytes.count else {
            throw WireError(.trailingBytes, at: cursor.offset, "\(bytes.count - cursor.offset) bytes after the records")
        }
    }

    // MARK: - Encoding

    /// The packet's bytes. Names are written whole (no pointers): a B-node packet has one or two.
    public func encoded() -> [UInt8] {
        var bytes: [UInt8] = []
        func u16(_ value: UInt16) { bytes += [UInt8(value >> 8), UInt8(truncatingIfNeeded: value)] }
        func name(_ name: NetBIOSName) { bytes += [UInt8(NetBIOSName.encodedLength)] + name.firstLevelEncoded + [0] }
        u16(self.id)
        u16(self.flags)
        for count in [self.questions.count, self.answers.count, self.authorities.count, self.additionals.count] {
            u16(UInt16(count))
        }
        for question in self.questions {
            name(question.name)
            u16(question.type)
            u16(Self.classIN)
        }
        for record in self.answers + self.authorities + self.additionals {
            name(record.name)
            u16(record.type)
            u16(Self.classIN)
            u16(UInt16(record.ttl >> 16))
            u16(UInt16(truncatingIfNeeded: record.ttl))
            u16(UInt16(record.rdata.count))
            bytes += record.rdata
        }
        return bytes
    }

    /// A positive name query response (RFC 1002 §4.2.13) as Windows and Samba send it: flags `0x8580`, the name
    /// repeated as the answer's, one NB entry.
    public static func nameQueryResponse(
        to query: NetBIOSMessage, name: NetBIOSName, ttl: UInt32, nbFlags: UInt16, address: IPv4Address
    ) -> NetBIOSMessage {
        var response = NetBIOSMessage(
            id: query.id, flags: flagResponse | flagAuthoritative | flagRecursionDesired | flagRecursionAvailable)
        let raw = address.rawValue
        response.answers = [
            Record(
                name: name, type: typeNB, ttl: ttl,
                rdata: [UInt8(nbFlags >> 8), UInt8(truncatingIfNeeded: nbFlags)]
                    + [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: raw >> $0) })
        ]
        return response
    }

    /// A node status response (RFC 1002 §4.2.18): flags `0x8400`, TTL 0, the name table (each name with its
    /// flags), then the statistics, whose first six bytes are the unit ID.
    public static func nodeStatusResponse(to query: NetBIOSMessage, names: [NodeStatusEntry], statistics: [UInt8])
        -> NetBIOSMessage
    {
        var response = NetBIOSMessage(id: query.id, flags: flagResponse | flagAuthoritative)
        var rdata: [UInt8] = [UInt8(min(names.count, Int(UInt8.max)))]
        for entry in names.prefix(Int(UInt8.max)) {
            rdata +=
                entry.name.padded + [
                    entry.name.suffix, UInt8(entry.flags >> 8), UInt8(truncatingIfNeeded: entry.flags),
                ]
        }
        response.answers = [Record(name: .wildcard, type: typeNBSTAT, ttl: 0, rdata: rdata + statistics)]
        return response
    }

    /// A node status query (RFC 1002 §4.2.17), unicast to the host asked.
    public static func nodeStatusQuery(id: UInt16) -> NetBIOSMessage {
        var query = NetBIOSMessage(id: id, flags: 0)
        query.questions = [Question(name: .wildcard, type: typeNBSTAT)]
        return query
    }

    /// One name of a node-status table and its flags (`groupBit`, `activeBit`).
    public struct NodeStatusEntry: Hashable, Sendable {
        public var name: NetBIOSName
        public var flags: UInt16
        public init(name: NetBIOSName, flags: UInt16) {
            self.name = name
            self.flags = flags
        }
        public var isGroup: Bool { self.flags & NetBIOSMessage.groupBit != 0 }
    }

    /// The statistics that follow the table: the unit ID (6 bytes) and the 40 counters of RFC 1002 §4.2.18.
    public static let statisticsLength = 46

    /// A node-status answer's table and statistics; nil when this is not one or its length does not add up.
    public var nodeStatus: (names: [NodeStatusEntry], statistics: [UInt8])? {
        guard self.isResponse, let record = self.answers.first, record.type == Self.typeNBSTAT,
            let count = record.rdata.first.map(Int.init), record.rdata.count >= 1 + count * 18
        else { return nil }
        var names: [NodeStatusEntry] = []
        for index in 0..<count {
            let at = 1 + index * 18
            names.append(
                NodeStatusEntry(
                    name: NetBIOSName(raw: record.rdata[at..<at + 16]),
                    flags: UInt16(record.rdata[at + 16]) << 8 | UInt16(record.rdata[at + 17])))
        }
        let statistics = Array(record.rdata[(1 + count * 18)...].prefix(Self.statisticsLength))
        return (names, statistics)
    }
}

/// Reads NetBIOS fields, each read bounds-checked.
struct NetBIOSCursor {
    let bytes: [UInt8]
    var offset = 0

    mutating func take(_ count: Int, _ what: StaticString) throws(WireError) -> [UInt8] {
        guard count >= 0, self.bytes.count - self.offset >= count else {
            throw WireError(.truncated, at: self.offset, "\(what) needs \(count) bytes")
        }
        defer { self.offset += count }
        return Array(self.bytes[self.offset..<self.offset + count])
    }

    mutating func u16(_ what: StaticString) throws(WireError) -> UInt16 {
        let two = try self.take(2, what)
        return UInt16(two[0]) << 8 | UInt16(two[1])
    }

    mutating func u32(_ what: StaticString) throws(WireError) -> UInt32 {
        try self.take(4, what).reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
    }

    /// A name: its 32-character label and the root, or a pointer back to an earlier such name (RFC 1002 §4.1:
    /// the record of a response names the question's name through one). A scope (more labels) is not decoded:
    /// Windows and Samba use none on a LAN.
    mutating func name() throws(WireError) -> NetBIOSName {
        let at = self.offset
        let length = try self.take(1, "name length")[0]
        if length & 0xC0 == 0xC0 {
            let target = Int(length & 0x3F) << 8 | Int(try self.take(1, "name pointer")[0])
            guard target < at else { throw WireError(.badPointer, at: at, "NetBIOS name pointer to \(target)") }
            var earlier = NetBIOSCursor(bytes: self.bytes, offset: target)
            guard earlier.bytes.count > target, earlier.bytes[target] & 0xC0 == 0 else {
                throw WireError(.badPointer, at: at, "NetBIOS name pointer to a pointer")
            }
            return try earlier.name()
        }
        guard Int(length) == NetBIOSName.encodedLength else {
            throw WireError(.badLabel, at: at, "NetBIOS name label of \(length) characters, not 32")
        }
        let label = try self.take(NetBIOSName.encodedLength, "NetBIOS name")
        guard try self.take(1, "name end")[0] == 0 else {
            throw WireError(.unsupported, at: at, "NetBIOS name with a scope")
        }
        guard let name = NetBIOSName(firstLevelEncoded: label) else {
            throw WireError(.badLabel, at: at, "NetBIOS name characters outside A-P")
        }
        return name
    }
}
