import NIOCore
import SleepProxyWire

/// Cuts the broker's byte stream into MQTT packets; a malformed one (or one past the size bound) is an error that
/// ends the connection. Never buffers more than one packet's bound (`MQTTPacket.maximumRemainingLength`).
struct MQTTPacketDecoder: ByteToMessageDecoder {
    typealias InboundOut = MQTTPacket

    mutating func decode(context: ChannelHandlerContext, buffer: inout ByteBuffer) throws -> DecodingState {
        guard let length = try MQTTPacket.frameLength(of: buffer.readableBytesView) else { return .needMoreData }
        let bytes = buffer.readBytes(length: length)!
        context.fireChannelRead(Self.wrapInboundOut(try MQTTPacket(decoding: bytes)))
        return .continue
    }

    mutating func decodeLast(context: ChannelHandlerContext, buffer: inout ByteBuffer, seenEOF: Bool) throws
        -> DecodingState
    {
        while try self.decode(context: context, buffer: &buffer) == .continue {}
        return .needMoreData
    }
}

/// Writes MQTT packets as bytes.
struct MQTTPacketEncoder: MessageToByteEncoder {
    typealias OutboundIn = MQTTPacket

    func encode(data: MQTTPacket, out: inout ByteBuffer) throws {
        out.writeBytes(try data.encoded())
    }
}

/// The link's end of one connection: hands what happens on the channel to `HomeAssistantLink`, which owns the
/// client state machine and drains its actions. Everything runs on the channel's event loop, which is the link's.
final class MQTTConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = MQTTPacket

    private let link: HomeAssistantLink

    init(link: HomeAssistantLink) { self.link = link }

    func channelActive(context: ChannelHandlerContext) {
        self.link.opened(context.channel)
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        self.link.received(Self.unwrapInboundIn(data))
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { self.link.flush() }
        context.fireChannelWritabilityChanged()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.link.failed(error)
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.link.closed(context.channel)
        context.fireChannelInactive()
    }
}
