import SleepProxyWire

// libFuzzer entry point for SSDP datagrams (HTTP over UDP, port 1900). Decoding must never trap, and a message
// that decodes must decode again from its own encoding with the same kind and the same header names and
// (trimmed) values: the proxy re-sends hosts' responses and announcements built from what it decoded.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSSDP(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: start, count: count))
    guard let message = try? SSDPMessage(decoding: bytes) else { return 0 }
    _ = (message.maxAge, message.maximumWait, message.bootID, message.configID, message.isDiscover)
    let encoded = message.encoded()
    guard encoded.count <= SSDPMessage.maximumSize + message.headers.count else {
        preconditionFailure("encoding grew a message past the size bound by more than one byte a header")
    }
    guard let again = try? SSDPMessage(decoding: encoded) else {
        // Encoding may add a space after each colon, which can push a line or the whole past a bound.
        return 0
    }
    precondition(again.kind == message.kind, "the round trip changed the start line")
    precondition(again.headers.map(\.name) == message.headers.map(\.name), "the round trip changed a header name")
    for header in message.headers {
        precondition(again[header.name] == message[header.name], "the round trip changed \(header.name)")
    }
    return 0
}
