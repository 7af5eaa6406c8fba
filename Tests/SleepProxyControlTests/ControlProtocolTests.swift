import Foundation
import Testing

@testable import SleepProxyControl

@Suite("Control protocol framing")
struct ControlProtocolTests {
    struct Probe: Codable, Equatable {
        var name: String
        var when: Date
    }

    @Test func oneObjectPerLineRoundTrips() throws {
        let value = Probe(name: "Büro Mac\nwith a newline", when: Date(timeIntervalSince1970: 1_700_000_000))
        let line = try ControlProtocol.frame(value)
        #expect(line.last == 0x0A)
        #expect(line.dropLast().contains(0x0A) == false)  // JSON escapes the newline inside the string
        var buffer = line + Array(try ControlProtocol.frame(value).prefix(5))
        let lines = try ControlProtocol.takeLines(from: &buffer)
        #expect(lines.count == 1)
        #expect(buffer.count == 5)  // the partial second line stays for the next read
        #expect(try ControlProtocol.decode(Probe.self, from: lines[0]) == value)
    }

    @Test func lineLengthLimit() throws {
        var exact = [UInt8](repeating: 0x61, count: ControlProtocol.maximumLineLength) + [0x0A]
        #expect(try ControlProtocol.takeLines(from: &exact).first?.count == ControlProtocol.maximumLineLength)
        let over = [UInt8](repeating: 0x61, count: ControlProtocol.maximumLineLength + 1)
        #expect(throws: ControlProtocol.FramingError.lineTooLong(ControlProtocol.maximumLineLength + 1)) {
            var buffer = over
            _ = try ControlProtocol.takeLines(from: &buffer)
        }
    }

    @Test func garbageIsAnErrorNotACrash() {
        #expect(throws: (any Error).self) { try ControlProtocol.decode(Probe.self, from: Array("{\"name\":".utf8)) }
    }

    /// The typed vocabulary keeps the JSON words the wake log and scripts already use.
    @Test func typedStatesAndKindsKeepTheirJSONWords() throws {
        let status = DaemonStatus(
            version: SleepProxyVersion.current, startedAt: Date(timeIntervalSince1970: 0), uptimeSeconds: 1,
            interfaces: ["eth0"], advertisedName: nil,
            hosts: 3, records: 30, registrationsAccepted: 3, refusals: [:], queriesAnswered: 0, wakes: 1,
            magicPackets: 1,
            hostsByState: [.asleep: 2, .waking: 1, .starting: 0, .awake: 0],
            upnp: DaemonStatus.UPnPStatus(hosts: 1, entries: 6, responses: 12, announcements: 30))
        let json = String(decoding: try ControlProtocol.frame(status), as: UTF8.self)
        #expect(
            json.contains(#""hostsByState":{"#) && json.contains(#""asleep":2"#) && json.contains(#""waking":1"#),
            "\(json)")
        #expect(try ControlProtocol.decode(DaemonStatus.self, from: Array(json.utf8.dropLast())) == status)
        // A daemon before 0.5 (or with --no-ssdp) sends no "upnp": still a status.
        let older = json.replacingOccurrences(
            of: #","upnp":{"announcements":30,"entries":6,"hosts":1,"responses":12}"#, with: "")
        #expect(older != json, "\(json)")
        #expect(try ControlProtocol.decode(DaemonStatus.self, from: Array(older.utf8.dropLast())).upnp == nil)
        let entry =
            #"{"kind":"no-response","time":"2026-11-23T00:00:00Z","mac":"02:53:50:00:00:02","interface":"eth0","trigger":{"type":"address-conflict","address":"192.0.2.2","from":"02:53:50:00:00:33"},"attempts":15,"summary":"x"}"#
        let decoded = try ControlProtocol.decode(WakeLogEntry.self, from: Array(entry.utf8))
        #expect(decoded.kind == .noResponse && decoded.trigger.type == .addressConflict)
        #expect(HostDetail.AddressState.Phase(rawValue: "owner-seen") == .ownerSeen)
    }
}
