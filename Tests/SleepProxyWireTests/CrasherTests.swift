import Foundation
import Testing

@testable import SleepProxyWire

/// Every input the fuzzers ever found a problem with (Fixtures/crashers/) is replayed with the fuzzers' own
/// properties: decoding never traps, and what decodes re-encodes to an equal message.
@Suite("Fuzzer findings")
struct CrasherTests {
    static var crashers: [String] {
        let url = Bundle.module.url(forResource: "crashers", withExtension: nil, subdirectory: "Fixtures")!
        return (try? FileManager.default.contentsOfDirectory(atPath: url.path))?.sorted() ?? []
    }

    @Test(arguments: CrasherTests.crashers)
    func replay(name: String) throws {
        let bytes = try Fixtures.bytes("crashers/\(name)")
        if name.hasPrefix("ssdp-") {
            // FuzzSSDP's property: what decodes decodes again from its encoding, with the same trimmed values.
            guard let message = try? SSDPMessage(decoding: bytes) else { return }
            let again = try SSDPMessage(decoding: message.encoded())
            #expect(again.kind == message.kind && again.headers.map(\.name) == message.headers.map(\.name))
            for header in message.headers { #expect(again[header.name] == message[header.name]) }
            return
        }
        guard let message = try? DNSMessage(decoding: bytes) else { return }
        for options in [DNSEncodingOptions.mdns, .appleUpdate] {
            let encoded = message.encoded(options: options)
            guard encoded.count <= DNSMessage.maximumSize else { continue }
            let again = try DNSMessage(decoding: encoded)
            #expect(again == message)
        }
    }

    @Test func thereAreCrashersToReplay() {
        #expect(!CrasherTests.crashers.isEmpty)
    }
}
