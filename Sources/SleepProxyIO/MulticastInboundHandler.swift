import NIOCore
import SleepProxyWire

/// Hands each datagram of a multicast socket to the engine thread, with the interface it came in on and where it
/// was sent (packet info); oversized ones are dropped here, before any copy.
final class MulticastInboundHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>

    private let profile: MulticastProfile
    private let sink: @Sendable (EngineRunner.Event) -> Void

    init(profile: MulticastProfile, sink: @escaping @Sendable (EngineRunner.Event) -> Void) {
        self.profile = profile
        self.sink = sink
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let envelope = Self.unwrapInboundIn(data)
        guard envelope.data.readableBytes <= self.profile.maximumSize, let info = envelope.metadata?.packetInfo else {
            return
        }
        self.sink(
            self.profile.event(
                Array(envelope.data.readableBytesView), envelope.remoteAddress, Int(info.interfaceIndex),
                IPAddress(info.destinationAddress)))
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        // ICMP errors after a unicast answer must not close the socket.
    }
}
