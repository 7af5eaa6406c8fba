import Foundation
import SleepProxyCore
import SleepProxyWire
import Testing

@testable import SleepProxyIO

/// The copy of what SSDP learned, kept across restarts.
@Suite("SSDP state file")
struct SSDPStateFileTests {
    static let key = OwnerKey(interface: "eth0", primaryMAC: MACAddress("02:53:50:00:00:02")!)

    static func entry(age: Int64, now: Timestamp) -> SSDPEntry {
        SSDPEntry(
            family: .v4, notificationType: "urn:schemas-upnp-org:device:MediaServer:1",
            uniqueServiceName: "uuid:1::urn:schemas-upnp-org:device:MediaServer:1",
            location: "http://192.0.2.2:8200/rootDesc.xml", server: "MiniDLNA", maximumAge: 1810, bootID: 3,
            configID: nil, refreshedAt: now - .seconds(age), interval: .seconds(895))
    }

    @Test func entriesComeBackAgedByTheTimeTheProxyWasStopped() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("ssdp-state-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let now = Timestamp.seconds(5000)
        let saved = Date(timeIntervalSince1970: 1_000_000)
        try SSDPStateFile([Self.key: [Self.entry(age: 100, now: now)]], now: now, savedAt: saved).write(
            directory: directory)
        // Read 20 s later, on a clock that restarted (a reboot): the entry is 120 s old.
        let later = Timestamp.seconds(7)
        let learned = try #require(try SSDPStateFile.read(directory: directory)).learned(
            now: later, at: saved.addingTimeInterval(20))
        let entry = try #require(learned[Self.key]?.first)
        #expect(entry == Self.entry(age: 120, now: later))
    }

    @Test func aFileThatIsNotOursIsRefusedWithAReason() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("ssdp-state-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        #expect(try SSDPStateFile.read(directory: directory) == nil, "no file: nothing to restore")
        let url = directory.appendingPathComponent(SSDPStateFile.fileName)
        try Data("{not json".utf8).write(to: url)
        #expect(throws: (any Error).self) { try SSDPStateFile.read(directory: directory) }
        try Data(count: SSDPStateFile.maximumBytes + 1).write(to: url)
        #expect(throws: EngineRunnerError.self) { try SSDPStateFile.read(directory: directory) }
        // Entries with impossible values are dropped one by one.
        var file = SSDPStateFile(
            [Self.key: [Self.entry(age: 1, now: .seconds(10))]], now: .seconds(10), savedAt: Date())
        file.hosts[0].entries.append(file.hosts[0].entries[0])
        file.hosts[0].entries[1].maxAge = 1
        file.hosts[0].entries.append(file.hosts[0].entries[0])
        file.hosts[0].entries[2].age = -5
        #expect(file.learned(now: .seconds(10), at: Date())[Self.key]?.count == 1)
    }

    /// An IPv6 entry keeps its scope across a restart; one written by 0.5.0, without it, takes its LOCATION's.
    @Test func anIPv6EntryKeepsItsScopeAndAnOldOneTakesItsLocations() throws {
        let now = Timestamp.seconds(10)
        func v6(_ location: String, _ scope: SSDPScope) -> SSDPEntry {
            SSDPEntry(
                family: .v6, scope: scope, notificationType: "upnp:rootdevice", uniqueServiceName: "uuid:1",
                location: location, server: nil, maximumAge: 1810, bootID: nil, configID: nil, refreshedAt: now)
        }
        let entries = [
            v6("http://[fe80::2]:8200/d.xml", .link), v6("http://[2001:db8::2]:8200/d.xml", .global),
            v6("http://[2001:db8::2]:8200/d.xml", .link),
        ]
        var file = SSDPStateFile([Self.key: entries], now: now, savedAt: Date())
        let decoded = try JSONDecoder().decode(SSDPStateFile.self, from: JSONEncoder().encode(file))
        #expect(decoded.learned(now: now, at: Date())[Self.key]?.map(\.scope) == [.link, .global, .link])
        for index in file.hosts[0].entries.indices { file.hosts[0].entries[index].scope = nil }
        #expect(file.learned(now: now, at: Date())[Self.key]?.map(\.scope) == [.link, .global, .global])
    }
}
