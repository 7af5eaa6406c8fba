import SleepProxyWire

// libFuzzer entry point for the Windows name protocols' codecs (docs/windows.md): each input is read as a NetBIOS
// name service packet (UDP 137) and as a WS-Discovery message (UDP 3702). Decoding must never trap; a NetBIOS
// packet that decodes must decode again from its own encoding to the same packet (the proxy answers with packets
// built from what it decoded, and keeps node-status tables it learned); a WS-Discovery message's own encoding must
// read back with the same kind, IDs, endpoint and types (the proxy's matches are built from what it read).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzNetBIOS(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: start, count: count))
    if let wsd = try? WSDiscoveryMessage(decoding: bytes) {
        guard let again = try? WSDiscoveryMessage(decoding: wsd.encoded()) else {
            preconditionFailure("a read WS-Discovery message's own encoding did not read")
        }
        precondition(again.kind == wsd.kind && again.messageID == wsd.messageID, "the round trip changed the header")
        precondition(again.endpoint == wsd.endpoint && again.types == wsd.types, "the round trip changed the body")
    }
    guard let message = try? NetBIOSMessage(decoding: bytes) else { return 0 }
    _ = (message.opcode, message.isBroadcast, message.answers.first?.addressEntries?.count)
    if let status = message.nodeStatus {
        precondition(status.names.count <= 255 && status.statistics.count <= NetBIOSMessage.statisticsLength)
    }
    // Pointers are written out whole, so an encoding may grow past the size bound; one within it round-trips.
    let encoded = message.encoded()
    guard encoded.count <= NetBIOSMessage.maximumSize else { return 0 }
    guard let again = try? NetBIOSMessage(decoding: encoded) else {
        preconditionFailure("a decoded packet's own encoding did not decode")
    }
    precondition(again == message, "the round trip changed the packet")
    return 0
}
