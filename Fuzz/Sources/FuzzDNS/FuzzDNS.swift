import SleepProxyWire

// libFuzzer entry point. No `@main` and no top-level code: libFuzzer supplies `main` (docs/linux.md §5).
//
// Properties checked on every input:
// - decoding never traps (any trap is a finding);
// - whatever decodes re-encodes, in both encoder forms, to bytes that decode to an equal message, as long as
//   the re-encoding fits the 9000-byte limit (a hostile message can point names into TXT bytes, which our
//   encoder never does, so its re-encoding may be larger).
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzDNS(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: start, count: count))
    guard let message = try? DNSMessage(decoding: bytes) else { return 0 }
    for options in [DNSEncodingOptions.mdns, .appleUpdate] {
        let encoded = message.encoded(options: options)
        guard encoded.count <= DNSMessage.maximumSize else { continue }
        guard let again = try? DNSMessage(decoding: encoded) else {
            fatalError("re-encoded message does not decode")
        }
        precondition(again == message, "round trip changed the message")
    }
    return 0
}
