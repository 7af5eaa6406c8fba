/// The MQTT 3.1.1 control packets the proxy's Home Assistant link speaks (OASIS MQTT 3.1.1, docs/home-assistant.md §5): CONNECT
/// with a last will and credentials, PUBLISH at QoS 0 or 1, SUBSCRIBE, keep-alive pings and DISCONNECT, each one
/// way and the other, so that a packet decodes from its own encoding.
///
/// QoS 2 (PUBREC, PUBREL, PUBCOMP) and UNSUBSCRIBE are never used: the proxy publishes at QoS 1 at most and
/// subscribes at QoS 0, so a broker that sends them is broken or hostile, and they decode as `.unsupported`.
///
/// Why our own codec and client (`MQTTClientStateMachine`) and not a package: the maintained NIO client
/// (swift-server-community/mqtt-nio) is not among the packages the project builds from, and the others keep their
/// own event loops or threads and reconnect on their own schedule, where the link must follow the engine's
/// clock and the daemon's `ServiceGroup`. What a discovery publisher needs of MQTT 3.1.1 is these few packets; the
/// codec is bounded at every length and fuzzed like the others (docs/fuzzing.md).
public enum MQTTPacket: Hashable, Sendable {
    case connect(MQTTConnect)
    case connectAcknowledgement(sessionPresent: Bool, returnCode: UInt8)
    case publish(MQTTPublish)
    case publishAcknowledgement(packetID: UInt16)
    case subscribe(packetID: UInt16, filters: [MQTTSubscription])
    case subscribeAcknowledgement(packetID: UInt16, returnCodes: [UInt8])
    case pingRequest
    case pingResponse
    case disconnect

    /// The largest remaining length this decoder takes: our bound, far below the protocol's 268,435,455
    /// (§2.2.3). What the proxy receives is a button press of a few bytes and Home Assistant's `online`; 64 KiB
    /// leaves room for anything a person might retain on those topics, and bounds what a hostile broker can make
    /// the daemon hold.
    public static let maximumRemainingLength = 65_536
    /// The protocol's own limit (§2.2.3: four bytes of seven bits).
    public static let protocolMaximumRemainingLength = 268_435_455
    /// The most topic filters one SUBSCRIBE carries here: ours names three.
    public static let maximumFilters = 16

    /// The control packet types of §2.2.1 this codec knows.
    enum Kind: UInt8 {
        case connect = 1, connectAcknowledgement, publish, publishAcknowledgement
        case subscribe = 8, subscribeAcknowledgement = 9
        case pingRequest = 12, pingResponse, disconnect
    }

    /// How many bytes the packet at the start of `bytes` takes, nil while its fixed header or body is incomplete.
    /// Throws when the remaining length is malformed (a fifth length byte) or past `maximumRemainingLength`, so a
    /// stream reader never waits for, or buffers, more than that.
    public static func frameLength(of bytes: some Collection<UInt8>) throws(WireError) -> Int? {
        guard let (headerSize, remaining) = try Self.fixedHeader(of: bytes) else { return nil }
        return bytes.count >= headerSize + remaining ? headerSize + remaining : nil
    }

    /// The fixed header's size and the remaining length it announces (§2.2.3), nil while incomplete.
    private static func fixedHeader(of bytes: some Collection<UInt8>) throws(WireError) -> (Int, Int)? {
        var length = 0
        var multiplier = 1
        var used = 1
        for byte in bytes.dropFirst() {
            length += Int(byte & 0x7F) * multiplier
            used += 1
            if byte & 0x80 == 0 {
                guard length <= Self.maximumRemainingLength else {
                    throw WireError(.tooLarge, at: 1, "remaining length \(length) past \(Self.maximumRemainingLength)")
                }
                return (used, length)
            }
            guard used < 5 else { throw WireError(.badHeader, at: 1, "remaining length longer than four bytes") }
            multiplier *= 128
        }
        return nil
    }

    /// Decodes exactly one whole packet (as `frameLength` delimits it).
    public init(decoding bytes: [UInt8]) throws(WireError) {
        guard let (bodyStart, remaining) = try Self.fixedHeader(of: bytes), bytes.count >= bodyStart + remaining
        else { throw WireError(.truncated, at: 0, "\(bytes.count) bytes do not hold a whole packet") }
        let total = bodyStart + remaining
        guard total == bytes.count else {
            throw WireError(.trailingBytes, at: total, "\(bytes.count - total) bytes after the packet")
        }
        let header = bytes[0]
        let body = Array(bytes[bodyStart...])
        guard let kind = Kind(rawValue: header >> 4) else {
            throw WireError(.unsupported, at: 0, "control packet type \(header >> 4)")
        }
        let flags = header & 0x0F
        let required: UInt8 = kind == .subscribe ? 0x02 : 0x00
        guard kind == .publish || flags == required else {
            throw WireError(.badHeader, at: 0, "flags \(flags) on packet type \(kind.rawValue) (§2.2.2)")
        }
        var reader = MQTTReader(body, base: bodyStart)
        switch kind {
        case .connect:
            self = .connect(try MQTTConnect(reading: &reader))
        case .connectAcknowledgement:
            let acknowledgeFlags = try reader.byte("CONNACK flags")
            guard acknowledgeFlags & 0xFE == 0 else {
                throw WireError(.badHeader, at: bodyStart, "CONNACK reserved flags set (§3.2.2.1)")
            }
            self = .connectAcknowledgement(sessionPresent: acknowledgeFlags == 1, returnCode: try reader.byte("code"))
        case .publish:
            self = .publish(try MQTTPublish(reading: &reader, flags: flags))
        case .publishAcknowledgement:
            self = .publishAcknowledgement(packetID: try reader.packetID())
        case .subscribe:
            let packetID = try reader.packetID()
            var filters: [MQTTSubscription] = []
            while !reader.isEmpty {
                guard filters.count < Self.maximumFilters else {
                    throw WireError(.badCount, at: reader.offset, "more than \(Self.maximumFilters) topic filters")
                }
                let filter = try reader.string("topic filter")
                let qos = try reader.byte("requested QoS")
                guard qos <= 1 else { throw WireError(.badHeader, at: reader.offset - 1, "requested QoS \(qos)") }
                filters.append(MQTTSubscription(filter: filter, qos: qos))
            }
            guard !filters.isEmpty else { throw WireError(.truncated, at: reader.offset, "SUBSCRIBE without filters") }
            self = .subscribe(packetID: packetID, filters: filters)
            return
        case .subscribeAcknowledgement:
            let packetID = try reader.packetID()
            let codes = reader.rest()
            guard !codes.isEmpty, codes.count <= Self.maximumFilters else {
                throw WireError(.badCount, at: reader.offset, "SUBACK with \(codes.count) return codes")
            }
            guard codes.allSatisfy({ $0 <= 2 || $0 == 0x80 }) else {
                throw WireError(.badHeader, at: reader.offset, "SUBACK return code not 0, 1, 2 or 0x80 (§3.9.3)")
            }
            self = .subscribeAcknowledgement(packetID: packetID, returnCodes: codes)
            return
        case .pingRequest: self = .pingRequest
        case .pingResponse: self = .pingResponse
        case .disconnect: self = .disconnect
        }
        guard reader.isEmpty else {
            throw WireError(.trailingBytes, at: reader.offset, "\(reader.remaining) bytes after the packet's fields")
        }
    }

    /// The packet's bytes. Throws for a value the protocol cannot carry: a string or binary field past 65,535
    /// bytes, a packet past the protocol's length limit, QoS above 1, a topic with a wildcard.
    public func encoded() throws(WireError) -> [UInt8] {
        var writer = MQTTWriter()
        let kind: Kind
        var flags: UInt8 = 0
        switch self {
        case .connect(let connect):
            kind = .connect
            try connect.write(to: &writer)
        case .connectAcknowledgement(let sessionPresent, let returnCode):
            kind = .connectAcknowledgement
            writer.bytes += [sessionPresent ? 1 : 0, returnCode]
        case .publish(let publish):
            kind = .publish
            flags = try publish.write(to: &writer)
        case .publishAcknowledgement(let packetID):
            kind = .publishAcknowledgement
            writer.uint16(packetID)
        case .subscribe(let packetID, let filters):
            kind = .subscribe
            flags = 0x02
            guard !filters.isEmpty, filters.count <= Self.maximumFilters, filters.allSatisfy({ $0.qos <= 1 }) else {
                throw WireError(.invalidArgument, at: 0, "a SUBSCRIBE takes 1 to \(Self.maximumFilters) filters")
            }
            writer.uint16(packetID)
            for filter in filters {
                try writer.string(filter.filter)
                writer.bytes.append(filter.qos)
            }
        case .subscribeAcknowledgement(let packetID, let returnCodes):
            kind = .subscribeAcknowledgement
            writer.uint16(packetID)
            writer.bytes += returnCodes
        case .pingRequest: kind = .pingRequest
        case .pingResponse: kind = .pingResponse
        case .disconnect: kind = .disconnect
        }
        let length = writer.bytes.count
        guard length <= Self.protocolMaximumRemainingLength else {
            throw WireError(.invalidArgument, at: 0, "a packet of \(length) bytes is past MQTT's limit")
        }
        var packet: [UInt8] = [kind.rawValue << 4 | flags]
        var rest = length
        repeat {
            var byte = UInt8(rest % 128)
            rest /= 128
            if rest > 0 { byte |= 0x80 }
            packet.append(byte)
        } while rest > 0
        return packet + writer.bytes
    }
}

/// One topic filter of a SUBSCRIBE, with the QoS asked for.
public struct MQTTSubscription: Hashable, Sendable {
    public var filter: String
    public var qos: UInt8
    public init(filter: String, qos: UInt8) {
        self.filter = filter
        self.qos = qos
    }
}
