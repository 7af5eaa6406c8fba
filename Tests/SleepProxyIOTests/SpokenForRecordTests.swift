import Foundation
import SleepProxyCore
import SleepProxyWire
import Testing

@testable import SleepProxyIO

/// What a clean stop leaves for the next start.
@Suite("Spoken-for record")
struct SpokenForRecordTests {
    /// The hosts and the identified proxies come back as written; a 0.5.0 file (no peers) still reads, and the
    /// file is taken away once read.
    @Test func hostsAndPeersComeBackAndAnOldFileStillReads() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("spoken-for-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let key = OwnerKey(interface: "eth0", primaryMAC: MACAddress("02:53:50:00:00:02")!)
        let peer = ProxyPeer(
            interface: "eth0", address: IPAddress("192.0.2.3")!, label: "80-40-60-65.0 second",
            mac: MACAddress("02:53:50:00:00:03")!, port: 5353, lastHeard: .seconds(1))
        let unidentified = ProxyPeer(
            interface: "eth0", address: IPAddress("192.0.2.8")!, label: "70-35-60-63.1 tv", mac: nil, port: nil,
            lastHeard: .seconds(1))
        try SpokenForRecord.write(
            SpokenForRecord(keys: [key], peers: [peer, unidentified], stoppedAt: Date()), directory: directory)
        let record = try #require(SpokenForRecord.take(directory: directory))
        #expect(record.keys == [key])
        let peers = record.record.proxyPeers(now: .seconds(9))
        #expect(peers.count == 1 && peers.first?.mac == peer.mac && peers.first?.address == peer.address)
        #expect(peers.first?.metric == 80_40_60 && peers.first?.port == 5353 && peers.first?.lastHeard == .seconds(9))
        #expect(SpokenForRecord.take(directory: directory) == nil, "taken away once read")

        let old = #"{"stoppedAt": 1000, "hosts": [{"interface": "eth0", "mac": "02:53:50:00:00:02"}]}"#
        try Data(old.utf8).write(to: directory.appendingPathComponent(SpokenForRecord.fileName))
        let read = try #require(SpokenForRecord.take(directory: directory))
        #expect(read.keys == [key] && read.record.proxyPeers(now: .seconds(9)).isEmpty)
    }

    /// A crash's live copy in a runtime directory in memory (a tmpfs, as /run is) is taken as of when it was last
    /// touched; a clean stop's record in the state directory wins over it, and both are taken away.
    @Test func theLiveCopyInMemoryIsTakenAsOfItsLastTouch() throws {
        let state = FileManager.default.temporaryDirectory.appendingPathComponent("spoken-for-\(UUID())")
        let runtime = URL(fileURLWithPath: "/dev/shm/spoken-for-\(UUID())")
        for directory in [state, runtime] {
            try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        }
        defer { for directory in [state, runtime] { try? FileManager.default.removeItem(at: directory) } }
        let key = OwnerKey(interface: "eth0", primaryMAC: MACAddress("02:53:50:00:00:02")!)
        let written = Date(timeIntervalSinceNow: -120)
        try SpokenForRecord.write(SpokenForRecord(keys: [key], stoppedAt: written), directory: runtime)
        let live = try #require(SpokenForRecord.take(stateDirectory: state, runtimeDirectory: runtime))
        #expect(live.keys == [key])
        #expect(
            abs(live.record.stoppedAt - Date().timeIntervalSince1970) < 5, "its modification time, not when written")
        try SpokenForRecord.write(SpokenForRecord(keys: [key], stoppedAt: written), directory: runtime)
        try SpokenForRecord.write(SpokenForRecord(keys: [], stoppedAt: Date()), directory: state)
        #expect(SpokenForRecord.take(stateDirectory: state, runtimeDirectory: runtime)?.keys == [])
        #expect(SpokenForRecord.take(stateDirectory: state, runtimeDirectory: runtime) == nil, "both taken away")
    }

    /// A record read ahead (before the state directory's lock) is used only while its file is the one read: one
    /// written over since (a daemon that was stopping) is read again, and one removed since is not resumed from.
    @Test func aRecordReadAheadIsUsedOnlyWhileItsFileIsTheSame() throws {
        let state = FileManager.default.temporaryDirectory.appendingPathComponent("spoken-for-\(UUID())")
        try FileManager.default.createDirectory(at: state, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: state) }
        let first = OwnerKey(interface: "eth0", primaryMAC: MACAddress("02:53:50:00:00:02")!)
        let second = OwnerKey(interface: "eth0", primaryMAC: MACAddress("02:53:50:00:00:03")!)

        try SpokenForRecord.write(SpokenForRecord(keys: [first], stoppedAt: Date()), directory: state)
        var ahead = SpokenForRecord.readAhead(stateDirectory: state, runtimeDirectory: nil)
        #expect(ahead.state?.keys == [first] && ahead.runtime == nil)
        #expect(FileManager.default.fileExists(atPath: state.appendingPathComponent(SpokenForRecord.fileName).path))
        // The same file: what was read ahead is what is taken (told apart from a fresh read by a key only the
        // reading ahead holds).
        ahead.state?.keys = [second]
        #expect(SpokenForRecord.take(stateDirectory: state, runtimeDirectory: nil, ahead: ahead)?.keys == [second])

        try SpokenForRecord.write(SpokenForRecord(keys: [first], stoppedAt: Date()), directory: state)
        ahead = SpokenForRecord.readAhead(stateDirectory: state, runtimeDirectory: nil)
        try SpokenForRecord.write(SpokenForRecord(keys: [second], stoppedAt: Date()), directory: state)
        #expect(SpokenForRecord.take(stateDirectory: state, runtimeDirectory: nil, ahead: ahead)?.keys == [second])

        try SpokenForRecord.write(SpokenForRecord(keys: [first], stoppedAt: Date()), directory: state)
        ahead = SpokenForRecord.readAhead(stateDirectory: state, runtimeDirectory: nil)
        try FileManager.default.removeItem(at: state.appendingPathComponent(SpokenForRecord.fileName))
        #expect(SpokenForRecord.take(stateDirectory: state, runtimeDirectory: nil, ahead: ahead) == nil)
    }
}
