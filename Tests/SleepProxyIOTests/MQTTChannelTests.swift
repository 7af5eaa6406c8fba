import NIOCore
import NIOEmbedded
import SleepProxyWire
import Testing

@testable import SleepProxyIO

@Suite("MQTT on a channel")
struct MQTTChannelTests {
    func channel() throws -> EmbeddedChannel {
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(MQTTPacketDecoder()))
        try channel.pipeline.syncOperations.addHandler(MessageToByteHandler(MQTTPacketEncoder()))
        return channel
    }

    @Test func packetsCutAnywhereInTheStreamComeOutWhole() throws {
        let channel = try self.channel()
        let packets: [MQTTPacket] = [
            .connectAcknowledgement(sessionPresent: false, returnCode: 0),
            .publish(MQTTPublish(topic: "homeassistant/status", payload: Array("online".utf8))),
            .pingResponse,
        ]
        let stream = try packets.flatMap { try $0.encoded() }
        for byte in stream { try channel.writeInbound(ByteBuffer(bytes: [byte])) }
        var read: [MQTTPacket] = []
        while let packet = try channel.readInbound(as: MQTTPacket.self) { read.append(packet) }
        #expect(read == packets)
        try channel.writeOutbound(MQTTPacket.pingRequest)
        #expect(try channel.readOutbound(as: ByteBuffer.self) == ByteBuffer(bytes: [0xC0, 0x00]))
        _ = try channel.finish()
    }

    @Test func aLengthPastTheBoundFailsBeforeItsBodyIsBuffered() throws {
        let channel = try self.channel()
        // A PUBLISH announcing 65,537 bytes: refused from its four header bytes, nothing waits for the rest.
        #expect(throws: WireError(.tooLarge, at: 1, "")) {
            try channel.writeInbound(ByteBuffer(bytes: [0x30, 0x81, 0x80, 0x04]))
        }
        _ = try? channel.finish()
    }

    @Test func garbageFromTheBrokerIsAnError() throws {
        let channel = try self.channel()
        // A web server on the broker's port: "H" reads as a PUBACK with flags set, "T" as 84 bytes to come.
        let page =
            "HTTP/1.1 400 Bad Request\r\nServer: nginx\r\nContent-Type: text/html\r\nContent-Length: 150\r\n\r\n<html>"
        #expect(throws: WireError(.badHeader, at: 0, "")) {
            try channel.writeInbound(ByteBuffer(bytes: Array(page.utf8)))
        }
        _ = try? channel.finish()
    }
}
