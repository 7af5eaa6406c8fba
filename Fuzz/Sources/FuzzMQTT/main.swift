import SleepProxyWire

// libFuzzer entry point for what a broker sends the Home Assistant link: a TCP stream cut into MQTT packets as
// the connection handler cuts it. Cutting and decoding must never trap, never take a packet past the bound, and a
// packet that decodes must decode again, equal, from its own encoding.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzMQTT(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    var stream = Array(UnsafeBufferPointer(start: start, count: count))[...]
    while let length = try? MQTTPacket.frameLength(of: stream) {
        precondition(length >= 2 && length <= stream.count, "a frame outside the stream")
        precondition(length <= MQTTPacket.maximumRemainingLength + 5, "a frame past the bound")
        let bytes = Array(stream.prefix(length))
        stream = stream.dropFirst(length)
        guard let packet = try? MQTTPacket(decoding: bytes) else { continue }
        guard let encoded = try? packet.encoded() else { preconditionFailure("a decoded packet does not encode") }
        precondition((try? MQTTPacket(decoding: encoded)) == packet, "the round trip changed \(packet)")
    }
    return 0
}
