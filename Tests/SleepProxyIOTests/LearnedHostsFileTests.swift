import Foundation
import NIOCore
import SleepProxyCore
import SleepProxyTestSupport
import SleepProxyWire
import Testing

@testable import SleepProxyIO

/// The copy of what adopted hosts taught, kept across restarts (docs/adoption.md §3).
@Suite("Learned hosts file")
struct LearnedHostsFileTests {
    static let mac = MACAddress("02:53:50:00:00:30")!

    static func directory() throws -> URL {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("learned-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        return directory
    }

    static func learned(now: Timestamp) -> OwnerRegistration {
        var adoption = Adoption()
        _ = adoption.setAdopted([mac])
        let message = DNSMessage(
            flags: DNSHeaderFlags(response: true, authoritative: true),
            answers: [
                DNSResourceRecord(
                    name: "pc.local.", cacheFlush: true, ttl: 120,
                    rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 30)))),
                DNSResourceRecord(
                    name: "_smb._tcp.local.", ttl: 4500, rdata: .ptr(PTRRecord(target: "PC._smb._tcp.local."))),
            ])
        let frame = TestFrames.udp(
            from: mac, to: MACAddress("01:00:5e:00:00:fb")!, source: IPAddress("192.0.2.30")!,
            destination: IPAddress("224.0.0.251")!, sourcePort: 5353, port: 5353,
            payload: message.encoded(options: .mdns))
        _ = adoption.heard(try! EthernetFrame(decoding: ByteBuffer(bytes: frame)), on: "eth0", now: now)
        return adoption.registration(of: mac, sequence: 0, now: now)!
    }

    @Test func whatWasLearnedComesBackWhole() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let now = Timestamp.seconds(100)
        let timeBase = TimeBase(
            bootID: Array(repeating: 1, count: 16), now: now, wallNanoseconds: 1_700_000_000_000_000_000)
        #expect(try LearnedHostsFile.read(directory: directory, timeBase: timeBase) == nil, "no file: nothing")
        let host = Self.learned(now: now)
        try LearnedHostsFile.write([host], timeBase: timeBase, directory: directory)
        // Read after a reboot (another boot, another clock): the same host, records and addresses.
        let later = TimeBase(
            bootID: Array(repeating: 2, count: 16), now: .seconds(5), wallNanoseconds: 1_700_000_060_000_000_000)
        let back = try #require(try LearnedHostsFile.read(directory: directory, timeBase: later))
        #expect(back.registrations.map(\.key) == [host.key])
        #expect(back.registrations.first?.records.map(\.record) == host.records.map(\.record))
        #expect(back.registrations.first?.adoptedAddresses == host.adoptedAddresses)
        #expect(back.problems.isEmpty)
    }

    @Test func aFileThatIsNotOursIsRefusedOrSkippedWithAReason() throws {
        let directory = try Self.directory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let timeBase = TimeBase(
            bootID: Array(repeating: 1, count: 16), now: .seconds(1), wallNanoseconds: 1_700_000_000_000_000_000)
        let url = directory.appendingPathComponent(LearnedHostsFile.fileName)
        // At the bound it is read (zeros are an empty journal's tail); one byte more is refused.
        try Data(count: LearnedHostsFile.maximumBytes).write(to: url)
        #expect(try LearnedHostsFile.read(directory: directory, timeBase: timeBase)?.registrations.isEmpty == true)
        try Data(count: LearnedHostsFile.maximumBytes + 1).write(to: url)
        #expect(throws: EngineRunnerError.self) { try LearnedHostsFile.read(directory: directory, timeBase: timeBase) }
        // Damage in one entry costs that entry, reported.
        try LearnedHostsFile.write([Self.learned(now: .seconds(1))], timeBase: timeBase, directory: directory)
        var bytes = Array(try Data(contentsOf: url))
        bytes[bytes.count / 2] ^= 0xFF
        try Data(bytes).write(to: url)
        let damaged = try #require(try LearnedHostsFile.read(directory: directory, timeBase: timeBase))
        #expect(damaged.registrations.isEmpty)
        #expect(!damaged.problems.isEmpty)
    }
}
