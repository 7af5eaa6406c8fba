import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import SleepProxyWire
import Testing

@testable import SleepProxyIO

/// The registration socket's inbound handler on an EmbeddedChannel: what reaches the engine, what is dropped, and
/// that an error on the socket never closes it. (The multicast sockets are read by the engine thread itself:
/// MulticastReceivingTests.)
@Suite("UDP inbound handlers")
struct InboundHandlerTests {
    final class Sink: Sendable {
        let events = NIOLockedValueBox<[EngineRunner.Event]>([])
        func post(_ event: EngineRunner.Event) { self.events.withLockedValue { $0.append(event) } }
    }

    static let remote = try! SocketAddress(ipAddress: "192.0.2.2", port: 5353)
    static let info = AddressedEnvelope<ByteBuffer>.Metadata(
        ecnState: .transportNotCapable,
        packetInfo: NIOPacketInfo(
            destinationAddress: try! SocketAddress(ipAddress: "224.0.0.251", port: 5353), interfaceIndex: 3))

    static func envelope(size: Int, metadata: AddressedEnvelope<ByteBuffer>.Metadata? = info) -> AddressedEnvelope<
        ByteBuffer
    > {
        AddressedEnvelope(remoteAddress: remote, data: ByteBuffer(repeating: 0xAB, count: size), metadata: metadata)
    }

    @Test func registrationsUpToTheLargestDNSMessageReachTheEngineWithTheirInterface() throws {
        let sink = Sink()
        let channel = EmbeddedChannel(handler: RegistrationInboundHandler(sink: { sink.post($0) }))
        try channel.connect(to: Self.remote).wait()
        try channel.writeInbound(Self.envelope(size: DNSMessage.maximumSize))
        try channel.writeInbound(Self.envelope(size: DNSMessage.maximumSize + 1))
        let events = sink.events.withLockedValue { $0 }
        #expect(events.count == 1, "the one past RFC 6762's 9000 bytes is dropped")
        guard case .datagram(let bytes, let remote, let index, _) = events.first else {
            Issue.record("not a datagram: \(events)")
            return
        }
        #expect(bytes.count == DNSMessage.maximumSize && remote == Self.remote && index == 3)
        channel.pipeline.fireErrorCaught(IOError(errnoCode: 111, reason: "recvmsg"))
        #expect(channel.isActive, "an ICMP error after a reply must not close the socket")
        try channel.throwIfErrorCaught()  // swallowed by the handler, not passed on
    }
}
