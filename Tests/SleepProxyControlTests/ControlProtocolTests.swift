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
}
