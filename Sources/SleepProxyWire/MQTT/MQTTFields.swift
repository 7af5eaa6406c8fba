/// CONNECT's fields (§3.1): who we are, what the broker publishes for us if we vanish, and our credentials.
public struct MQTTConnect: Hashable, Sendable {
    /// The message the broker publishes if the connection ends without DISCONNECT (§3.1.2.5).
    public struct Will: Hashable, Sendable {
        public var topic: String
        public var payload: [UInt8]
        public var qos: UInt8
        public var retain: Bool
        public init(topic: String, payload: [UInt8], qos: UInt8, retain: Bool) {
            self.topic = topic
            self.payload = payload
            self.qos = qos
            self.retain = retain
        }
    }

    public var clientID: String
    public var cleanSession: Bool
    /// Seconds; 0 turns the broker's keep-alive check off (§3.1.2.10).
    public var keepAlive: UInt16
    public var will: Will?
    public var userName: String?
    public var password: [UInt8]?

    public init(
        clientID: String, cleanSession: Bool = true, keepAlive: UInt16, will: Will? = nil, userName: String? = nil,
        password: [UInt8]? = nil
    ) {
        self.clientID = clientID
        self.cleanSession = cleanSession
        self.keepAlive = keepAlive
        self.will = will
        self.userName = userName
        self.password = password
    }

    /// The protocol name and level of MQTT 3.1.1 (§3.1.2.1, §3.1.2.2).
    static let protocolName = "MQTT"
    static let protocolLevel: UInt8 = 4

    init(reading reader: inout MQTTReader) throws(WireError) {
        let name = try reader.string("protocol name")
        let level = try reader.byte("protocol level")
        guard name == Self.protocolName, level == Self.protocolLevel else {
            throw WireError(.badHeader, at: 0, "protocol \(name) level \(level), not MQTT 4")
        }
        let flags = try reader.byte("connect flags")
        guard flags & 0x01 == 0 else { throw WireError(.badHeader, at: reader.offset - 1, "reserved flag (§3.1.2.3)") }
        let hasWill = flags & 0x04 != 0
        let willQoS = (flags >> 3) & 0x03
        let willRetain = flags & 0x20 != 0
        guard hasWill || (willQoS == 0 && !willRetain), willQoS <= 2 else {
            throw WireError(.badHeader, at: reader.offset - 1, "will QoS or retain without a will (§3.1.2.6)")
        }
        // §3.1.2.9: a password without a user name is malformed in 3.1.1.
        guard flags & 0x80 != 0 || flags & 0x40 == 0 else {
            throw WireError(.badHeader, at: reader.offset - 1, "a password without a user name (§3.1.2.9)")
        }
        self.cleanSession = flags & 0x02 != 0
        self.keepAlive = try reader.uint16("keep alive")
        self.clientID = try reader.string("client identifier")
        self.will =
            hasWill
            ? Will(
                topic: try reader.topicName("will topic"), payload: try reader.binary("will message"), qos: willQoS,
                retain: willRetain) : nil
        self.userName = flags & 0x80 != 0 ? try reader.string("user name") : nil
        self.password = flags & 0x40 != 0 ? try reader.binary("password") : nil
    }

    func write(to writer: inout MQTTWriter) throws(WireError) {
        try writer.string(Self.protocolName)
        writer.bytes.append(Self.protocolLevel)
        guard self.password == nil || self.userName != nil else {
            throw WireError(.invalidArgument, at: 0, "MQTT 3.1.1 takes a password only with a user name")
        }
        var flags: UInt8 = self.cleanSession ? 0x02 : 0
        if let will = self.will {
            guard will.qos <= 2 else { throw WireError(.invalidArgument, at: 0, "will QoS \(will.qos)") }
            flags |= 0x04 | will.qos << 3 | (will.retain ? 0x20 : 0)
        }
        if self.userName != nil { flags |= 0x80 }
        if self.password != nil { flags |= 0x40 }
        writer.bytes.append(flags)
        writer.uint16(self.keepAlive)
        try writer.string(self.clientID)
        if let will = self.will {
            try writer.topicName(will.topic)
            try writer.binary(will.payload)
        }
        if let userName = self.userName { try writer.string(userName) }
        if let password = self.password { try writer.binary(password) }
    }
}

/// PUBLISH's fields (§3.3). The packet identifier is there exactly when QoS is above 0.
public struct MQTTPublish: Hashable, Sendable {
    public var topic: String
    public var payload: [UInt8]
    public var qos: UInt8
    public var retain: Bool
    public var duplicate: Bool
    public var packetID: UInt16?

    public init(
        topic: String, payload: [UInt8], qos: UInt8 = 0, retain: Bool = false, duplicate: Bool = false,
        packetID: UInt16? = nil
    ) {
        self.topic = topic
        self.payload = payload
        self.qos = qos
        self.retain = retain
        self.duplicate = duplicate
        self.packetID = packetID
    }

    init(reading reader: inout MQTTReader, flags: UInt8) throws(WireError) {
        self.qos = (flags >> 1) & 0x03
        self.retain = flags & 0x01 != 0
        self.duplicate = flags & 0x08 != 0
        // §3.3.1-4: QoS 3 is malformed; QoS 2 is never asked for here (see MQTTPacket).
        guard self.qos <= 1 else { throw WireError(.unsupported, at: 0, "PUBLISH at QoS \(self.qos)") }
        guard self.qos > 0 || !self.duplicate else { throw WireError(.badHeader, at: 0, "DUP at QoS 0 (§3.3.1.1)") }
        self.topic = try reader.topicName("topic name")
        self.packetID = self.qos > 0 ? try reader.packetID() : nil
        self.payload = reader.rest()
    }

    func write(to writer: inout MQTTWriter) throws(WireError) -> UInt8 {
        guard self.qos <= 1, (self.qos > 0) == (self.packetID != nil), self.qos > 0 || !self.duplicate else {
            throw WireError(.invalidArgument, at: 0, "QoS \(self.qos) with packet identifier \(self.packetID as Any)")
        }
        try writer.topicName(self.topic)
        if let packetID = self.packetID {
            guard packetID != 0 else { throw WireError(.invalidArgument, at: 0, "packet identifier 0 (§2.3.1)") }
            writer.uint16(packetID)
        }
        writer.bytes += self.payload
        return (self.duplicate ? 0x08 : 0) | self.qos << 1 | (self.retain ? 0x01 : 0)
    }
}

/// Reads a packet's body; offsets in errors count from the packet's first byte.
struct MQTTReader {
    private let bytes: [UInt8]
    private var position = 0
    private let base: Int

    init(_ bytes: [UInt8], base: Int) {
        self.bytes = bytes
        self.base = base
    }

    var isEmpty: Bool { self.position == self.bytes.count }
    var remaining: Int { self.bytes.count - self.position }
    var offset: Int { self.base + self.position }

    mutating func byte(_ what: StaticString) throws(WireError) -> UInt8 {
        guard self.position < self.bytes.count else { throw WireError(.truncated, at: self.offset, "\(what)") }
        defer { self.position += 1 }
        return self.bytes[self.position]
    }

    mutating func uint16(_ what: StaticString) throws(WireError) -> UInt16 {
        UInt16(try self.byte(what)) << 8 | UInt16(try self.byte(what))
    }

    /// §2.3.1: a packet identifier is never 0.
    mutating func packetID() throws(WireError) -> UInt16 {
        let id = try self.uint16("packet identifier")
        guard id != 0 else { throw WireError(.badHeader, at: self.offset - 2, "packet identifier 0 (§2.3.1)") }
        return id
    }

    mutating func binary(_ what: StaticString) throws(WireError) -> [UInt8] {
        let count = Int(try self.uint16(what))
        guard count <= self.remaining else {
            throw WireError(.truncated, at: self.offset, "\(what) of \(count) bytes, \(self.remaining) left")
        }
        defer { self.position += count }
        return Array(self.bytes[self.position..<self.position + count])
    }

    /// §1.5.3: well-formed UTF-8 without U+0000.
    mutating func string(_ what: StaticString) throws(WireError) -> String {
        let start = self.offset
        let bytes = try self.binary(what)
        guard let text = String(validating: bytes, as: UTF8.self), !bytes.contains(0) else {
            throw WireError(.badHeader, at: start, "\(what) is not well-formed UTF-8 (§1.5.3)")
        }
        return text
    }

    /// §4.7.3, §3.3.2-2: a topic name is not empty and holds no wildcard.
    mutating func topicName(_ what: StaticString) throws(WireError) -> String {
        let start = self.offset
        let topic = try self.string(what)
        guard MQTTWriter.isTopicName(topic) else {
            throw WireError(.badHeader, at: start, "\(what) is empty or holds a wildcard (§4.7)")
        }
        return topic
    }

    mutating func rest() -> [UInt8] {
        defer { self.position = self.bytes.count }
        return Array(self.bytes[self.position...])
    }
}

struct MQTTWriter {
    var bytes: [UInt8] = []

    mutating func uint16(_ value: UInt16) { self.bytes += [UInt8(value >> 8), UInt8(value & 0xFF)] }

    mutating func binary(_ value: [UInt8]) throws(WireError) {
        guard value.count <= Int(UInt16.max) else {
            throw WireError(.invalidArgument, at: 0, "a field of \(value.count) bytes is past 65,535 (§1.5.3)")
        }
        self.uint16(UInt16(value.count))
        self.bytes += value
    }

    mutating func string(_ value: String) throws(WireError) {
        guard !value.utf8.contains(0) else { throw WireError(.invalidArgument, at: 0, "U+0000 in a string (§1.5.3)") }
        try self.binary(Array(value.utf8))
    }

    mutating func topicName(_ value: String) throws(WireError) {
        guard Self.isTopicName(value) else {
            throw WireError(.invalidArgument, at: 0, "topic \"\(value)\" is empty or holds a wildcard (§4.7)")
        }
        try self.string(value)
    }

    static func isTopicName(_ topic: String) -> Bool {
        !topic.isEmpty && !topic.utf8.contains(UInt8(ascii: "#")) && !topic.utf8.contains(UInt8(ascii: "+"))
    }
}
