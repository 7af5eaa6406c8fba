import Foundation
import SleepProxyCore
import SleepProxyWire
import Testing

@testable import SleepProxyIO

/// `adopted.json`: the hosts adopted with `sleepproxyctl adopt`, kept across restarts (docs/adoption.md).
@Suite("Adopted hosts kept across restarts")
struct AdoptionFileTests {
    static func directory() throws -> URL {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("adoption-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        return url
    }

    @Test func whatIsWrittenIsReadBackAndNoFileIsNoHosts() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        #expect(try AdoptionFile.read(directory: directory) == nil)
        let macs: Set<MACAddress> = [MACAddress("02:53:50:00:00:30")!, MACAddress("02:53:50:00:00:02")!]
        try AdoptionFile(macs).write(directory: directory)
        #expect(try AdoptionFile.read(directory: directory)?.macs() == macs)
        // Sorted, so that the file reads the same whatever the order of adoption.
        #expect(try AdoptionFile.read(directory: directory)?.adopted == ["02:53:50:00:00:02", "02:53:50:00:00:30"])
    }

    @Test func aFileNamingAnythingButHostMACsOrTooManyIsRefusedWhole() throws {
        for bad in ["01:00:5e:00:00:fb", "ff:ff:ff:ff:ff:ff", "00:00:00:00:00:00", "not a mac"] {
            #expect(throws: EngineRunnerError.self) { try AdoptionFile(adopted: ["02:53:50:00:00:02", bad]).macs() }
        }
        let atLimit = (0..<AdoptionRules.maximumAdopted).map { MACAddress(rawValue: 0x0253_5001_0000 + UInt64($0)) }
        #expect(try AdoptionFile(Set(atLimit)).macs().count == AdoptionRules.maximumAdopted)
        let over = atLimit + [MACAddress(rawValue: 0x0253_5002_0000)]
        #expect(throws: EngineRunnerError.self) { try AdoptionFile(Set(over)).macs() }
    }

    @Test func aFileLargerThanOursIsRefused() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let big = Data(repeating: 0x20, count: AdoptionFile.maximumBytes + 1)
        try big.write(to: directory.appendingPathComponent(AdoptionFile.fileName))
        #expect(throws: EngineRunnerError.self) { try AdoptionFile.read(directory: directory) }
    }
}
