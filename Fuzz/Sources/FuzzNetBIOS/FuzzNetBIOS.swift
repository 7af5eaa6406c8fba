import SleepProxyWire

// libFuzzer entry point for NetBIOS name service packets (UDP 137). Decoding must never trap, and a packet that
// decodes must decode again from its own encoding to the same packet: the proxy answers with packets built from
// what it decoded, and keeps node-status tables it learned.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzNetBIOS(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: start, count: count))
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
