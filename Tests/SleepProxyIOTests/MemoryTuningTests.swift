import Foundation
import SleepProxyCore
import SleepProxyWire
import Testing

@testable import SleepProxyIO

/// Written before the release and read after: a writable segment must keep what the process wrote to it.
nonisolated(unsafe) private var written: UInt64 = 0

@Suite("Handing back start-up code")
struct MemoryTuningTests {
    /// Resident file-backed pages of this process (RssFile), in KiB.
    static func residentFileKiB() throws -> Int {
        let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        let line = try #require(status.split(separator: "\n").first { $0.hasPrefix("RssFile:") })
        return try #require(Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]))
    }

    @Test func codePagesLeaveTheResidentSetAndEverythingStillRuns() throws {
        written = UInt64.random(in: 1 ... .max)
        let kept = written
        let before = try Self.residentFileKiB()
        let released = MemoryTuning.releaseStartupCode()
        let after = try Self.residentFileKiB()
        #expect(released > 0)
        #expect(after < before, "RssFile \(before) KiB before, \(after) KiB after")
        // Writable data and relocated constants (RELRO: Swift's metadata pointers, the GOT) were left alone:
        // a written global keeps its value, and generic, existential and dynamically cast code still runs.
        #expect(written == kept)
        let values: [any CustomStringConvertible] = [IPAddress("192.0.2.1")!, MACAddress("02:00:00:00:00:01")!, 7]
        #expect(values.map(\.description) == ["192.0.2.1", "02:00:00:00:00:01", "7"])
        #expect((values[2] as? Int) == 7)
        let message = DNSMessage(questions: [DNSQuestion(name: try DNSName(parsing: "a.local."), type: .a)])
        #expect(try DNSMessage(decoding: message.encoded(options: .mdns)).questions.count == 1)
    }
}
