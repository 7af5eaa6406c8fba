// libFuzzer entry point for the composed engine (docs/fuzzing.md): the input is a program of registrations, mDNS,
// SSDP, frames, admin commands and time steps (EngineProgram); a trap or a broken invariant is a finding.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzEngine(_ start: UnsafePointer<UInt8>, _ count: Int) -> CInt {
    // The first byte's low bits also say how many hosts are adopted from the start (none to three).
    var program = EngineProgram(
        Array(UnsafeBufferPointer(start: start, count: count)), adopting: count > 0 ? Int(start[0] & 3) : 0)
    if let violation = program.run() {
        preconditionFailure("invariant broken at \(violation)")
    }
    return 0
}
