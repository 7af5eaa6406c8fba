import Testing

@testable import SleepProxyWire

@Suite("MQTT 3.1.1 codec")
struct MQTTPacketTests {
    /// A CONNECT with a retained last will and credentials, laid out byte by byte as §3.1 describes it.
    static let connectBytes: [UInt8] =
        [0x10, 45]  // CONNECT, remaining length
        + [0, 4] + Array("MQTT".utf8) + [4]  // protocol name and level
        + [0x80 | 0x40 | 0x20 | 0x08 | 0x04 | 0x02]  // user, password, will retain, will QoS 1, will, clean
        + [0, 30]  // keep alive
        + [0, 3] + Array("spx".utf8)
        + [0, 10] + Array("spx/status".utf8) + [0, 7] + Array("offline".utf8)
        + [0, 2] + Array("ha".utf8) + [0, 3] + Array("pw!".utf8)

    @Test func aConnectWithWillAndCredentialsHasTheLayoutOfTheStandard() throws {
        let connect = MQTTConnect(
            clientID: "spx", keepAlive: 30,
            will: .init(topic: "spx/status", payload: Array("offline".utf8), qos: 1, retain: true), userName: "ha",
            password: Array("pw!".utf8))
        #expect(try MQTTPacket.connect(connect).encoded() == Self.connectBytes)
        #expect(try MQTTPacket(decoding: Self.connectBytes) == .connect(connect))
    }

    @Test func everyPacketDecodesFromItsOwnEncoding() throws {
        let packets: [MQTTPacket] = [
            .connect(MQTTConnect(clientID: "", keepAlive: 0)),
            .connectAcknowledgement(sessionPresent: true, returnCode: 0),
            .connectAcknowledgement(sessionPresent: false, returnCode: 5),
            .publish(MQTTPublish(topic: "a/b", payload: [])),
            .publish(MQTTPublish(topic: "sleepproxy/x/state", payload: Array("asleep".utf8), retain: true)),
            .publish(MQTTPublish(topic: "ü/ß", payload: [0, 255], qos: 1, duplicate: true, packetID: 65_535)),
            .publishAcknowledgement(packetID: 1),
            .subscribe(
                packetID: 7, filters: [.init(filter: "homeassistant/status", qos: 0), .init(filter: "a/+/#", qos: 1)]),
            .subscribeAcknowledgement(packetID: 7, returnCodes: [0, 0x80]),
            .pingRequest, .pingResponse, .disconnect,
        ]
        for packet in packets {
            let bytes = try packet.encoded()
            #expect(try MQTTPacket.frameLength(of: bytes) == bytes.count)
            #expect(try MQTTPacket.frameLength(of: bytes.dropLast()) == nil, "incomplete: wait for more")
            #expect(try MQTTPacket(decoding: bytes) == packet)
        }
        #expect(try MQTTPacket.pingRequest.encoded() == [0xC0, 0x00])
        #expect(try MQTTPacket.disconnect.encoded() == [0xE0, 0x00])
    }

    @Test func theRemainingLengthUsesOneToFourBytes() throws {
        // §2.2.3's table: 127 in one byte, 128 in two, 16,383 in two, 16,384 in three.
        for (size, lengthBytes) in [(0, 1), (127, 1), (128, 2), (16_383, 2), (16_384, 3), (65_000, 3)] {
            let topicAndPayload = MQTTPublish(
                topic: "t", payload: [UInt8](repeating: 1, count: size - 3 < 0 ? 0 : size - 3))
            let bytes = try MQTTPacket.publish(topicAndPayload).encoded()
            guard size >= 3 else { continue }
            #expect(bytes.count == 1 + lengthBytes + size)
            #expect(try MQTTPacket(decoding: bytes) == .publish(topicAndPayload))
        }
        #expect(throws: WireError(.badHeader, at: 1, "")) {
            try MQTTPacket.frameLength(of: [0x30, 0xFF, 0xFF, 0xFF, 0xFF, 0x01])
        }
    }

    @Test func theLargestPacketTakenIsTheBoundAndOneByteMoreIsRefused() throws {
        let limit = MQTTPacket.maximumRemainingLength
        func publish(remaining: Int) throws -> [UInt8] {
            try MQTTPacket.publish(MQTTPublish(topic: "t", payload: [UInt8](repeating: 0x41, count: remaining - 3)))
                .encoded()
        }
        let atLimit = try publish(remaining: limit)
        #expect(try MQTTPacket.frameLength(of: atLimit) == atLimit.count)
        let past = try publish(remaining: limit + 1)
        #expect(throws: WireError(.tooLarge, at: 1, "")) { try MQTTPacket.frameLength(of: past.prefix(4)) }
        #expect(throws: WireError(.tooLarge, at: 1, "")) { try MQTTPacket(decoding: past) }
    }

    @Test func aSubscribeTakesSixteenFiltersAndNotSeventeen() throws {
        func subscribe(_ count: Int) -> MQTTPacket {
            .subscribe(packetID: 1, filters: (0..<count).map { .init(filter: "t/\($0)", qos: 0) })
        }
        let sixteen = try subscribe(MQTTPacket.maximumFilters).encoded()
        #expect(try MQTTPacket(decoding: sixteen) == subscribe(16))
        #expect(throws: WireError(.invalidArgument, at: 0, "")) { try subscribe(17).encoded() }
        // Built by hand: a seventeenth filter appended to the sixteen.
        var seventeen = Array(sixteen.dropFirst(2)) + [0, 4] + Array("t/16".utf8) + [0]
        seventeen = [0x82, UInt8(seventeen.count)] + seventeen
        #expect(throws: WireError(.badCount, at: 0, "")) { try MQTTPacket(decoding: seventeen) }
    }

    @Test func malformedPacketsFromABrokerAreRefusedWithTheirReason() {
        let cases: [([UInt8], WireError.Code)] = [
            ([0x20, 0x02, 0x02, 0x00], .badHeader),  // CONNACK reserved flag
            ([0x20, 0x01, 0x00], .truncated),
            ([0x20, 0x03, 0x00, 0x00, 0x00], .trailingBytes),
            ([0x32, 0x05, 0x00, 0x01, 0x74, 0x00, 0x00], .badHeader),  // QoS 1 with packet identifier 0
            ([0x34, 0x05, 0x00, 0x01, 0x74, 0x00, 0x01], .unsupported),  // QoS 2
            ([0x36, 0x05, 0x00, 0x01, 0x74, 0x00, 0x01], .unsupported),  // QoS 3
            ([0x38, 0x03, 0x00, 0x01, 0x74], .badHeader),  // DUP at QoS 0
            ([0x30, 0x03, 0x00, 0x01, 0x23], .badHeader),  // wildcard in a topic name
            ([0x30, 0x02, 0x00, 0x00], .badHeader),  // empty topic name
            ([0x30, 0x04, 0x00, 0x02, 0xC3, 0x28], .badHeader),  // not UTF-8
            ([0x30, 0x03, 0x00, 0x01, 0x00], .badHeader),  // U+0000
            ([0x30, 0x03, 0x00, 0x05, 0x74], .truncated),  // topic longer than the packet
            ([0x90, 0x03, 0x00, 0x01, 0x03], .badHeader),  // SUBACK return code 3
            ([0x90, 0x02, 0x00, 0x01], .badCount),  // SUBACK without return codes
            ([0xC1, 0x00], .badHeader),  // flags on PINGREQ
            ([0x50, 0x02, 0x00, 0x01], .unsupported),  // PUBREC: QoS 2 is never used
            ([0xB0, 0x02, 0x00, 0x01], .unsupported),  // UNSUBACK
            ([0x00, 0x00], .unsupported),  // reserved type 0
            ([0xF0, 0x00], .unsupported),  // reserved type 15
            ([0xD0, 0x01, 0x00], .trailingBytes),  // PINGRESP with a body
            ([0x40], .truncated),
        ]
        for (bytes, code) in cases {
            #expect(throws: WireError(code, at: 0, "")) { try MQTTPacket(decoding: bytes) }
        }
    }

    @Test func valuesThePacketCannotCarryAreRefusedWhenEncoding() {
        let long = String(repeating: "a", count: 65_536)
        let refused: [MQTTPacket] = [
            .publish(MQTTPublish(topic: long, payload: [])),
            .publish(MQTTPublish(topic: "a/#", payload: [])),
            .publish(MQTTPublish(topic: "", payload: [])),
            .publish(MQTTPublish(topic: "a", payload: [], qos: 1)),  // QoS 1 without a packet identifier
            .publish(MQTTPublish(topic: "a", payload: [], qos: 2, packetID: 1)),
            .publish(MQTTPublish(topic: "a", payload: [], qos: 1, packetID: 0)),
            .connect(MQTTConnect(clientID: "x", keepAlive: 1, password: [1])),  // password without a user (§3.1.2.9)
            .connect(MQTTConnect(clientID: "a\u{0}b", keepAlive: 1)),
        ]
        for packet in refused {
            #expect(throws: WireError(.invalidArgument, at: 0, "")) { try packet.encoded() }
        }
        #expect(throws: Never.self) {
            try MQTTPacket.publish(MQTTPublish(topic: String(long.dropFirst()), payload: [])).encoded()
        }
    }
}
