import SleepProxyTestSupport
import Testing

@testable import SleepProxyWire

/// The WS-Discovery reader and writer against the messages of wsdd standing in for a PC (docs/windows.md §5).
@Suite("WS-Discovery messages")
struct WSDiscoveryMessageTests {
    typealias M = WSDiscoveryMessage
    static let device = M.QName(namespace: "http://schemas.xmlsoap.org/ws/2006/02/devprof", local: "Device")
    static let computer = M.QName(namespace: "http://schemas.microsoft.com/windows/pub/2005/07", local: "Computer")
    static let epr = "urn:uuid:6bd51d6a-0000-4000-8000-025749000002"
    static let xaddrs = "http://192.0.2.2:5357/6bd51d6a-0000-4000-8000-025749000002"

    @Test func capturedMessagesRead() throws {
        let hello = try M(decoding: WindowsVectors.wsdHello)
        #expect(hello.kind == .hello && hello.endpoint == Self.epr && hello.xaddrs == Self.xaddrs)
        #expect(hello.metadataVersion == "1" && hello.instanceID == "1795825739" && hello.messageNumber == "0")
        let probe = try M(decoding: WindowsVectors.wsdProbe)
        #expect(probe.kind == .probe && probe.types == [Self.device] && probe.endpoint == nil)
        #expect(probe.messageID == "urn:uuid:3c1bba69-fe87-4bda-bc76-764f8865819c")
        let matches = try M(decoding: WindowsVectors.wsdProbeMatches)
        #expect(matches.kind == .probeMatches && matches.types == [Self.device, Self.computer])
        #expect(matches.relatesTo == probe.messageID && matches.xaddrs == nil && matches.endpoint == Self.epr)
        let resolve = try M(decoding: WindowsVectors.wsdResolve)
        #expect(resolve.kind == .resolve && resolve.endpoint == Self.epr)
        let resolved = try M(decoding: WindowsVectors.wsdResolveMatches)
        #expect(resolved.kind == .resolveMatches && resolved.xaddrs == Self.xaddrs)
    }

    @Test func whatItWritesReadsBackTheSame() throws {
        var answer = M(kind: .probeMatches, messageID: "urn:uuid:00000000-0000-4000-8000-000000000001")
        answer.relatesTo = "urn:uuid:3c1bba69-fe87-4bda-bc76-764f8865819c"
        answer.instanceID = "1795825739"
        answer.messageNumber = "7"
        answer.endpoint = Self.epr
        answer.types = [Self.device, Self.computer, M.QName(namespace: "urn:x-odd&\"ns", local: "Printer")]
        answer.metadataVersion = "1"
        answer.xaddrs = Self.xaddrs + "?a=1&b=<2>"
        #expect(try M(decoding: answer.encoded()) == answer)
    }

    static let malformed: [(String, [UInt8])] = {
        let probe = String(decoding: WindowsVectors.wsdProbe, as: UTF8.self)
        func edited(_ from: String, _ to: String) -> [UInt8] { Array(probe.replacing(from, with: to).utf8) }
        var cases: [(String, [UInt8])] = []
        cases.append(("empty", []))
        cases.append(("a DOCTYPE", Array(("<!DOCTYPE x [<!ENTITY a \"b\">]>" + probe).utf8)))
        cases.append(("an undeclared entity", edited("wsdp:Device", "&a;")))
        cases.append(("an unclosed tag", Array(probe.dropLast(3).utf8)))
        cases.append(("not a discovery action", edited("/discovery/Probe<", "/x<")))
        cases.append(("an undeclared prefix", edited("wsdp:Device", "zz:Device")))
        cases.append(
            ("no MessageID", edited("<wsa:MessageID>urn:uuid:3c1bba69-fe87-4bda-bc76-764f8865819c", "<wsa:MessageID>")))
        cases.append(("an end tag too many", Array((probe + "</x>").utf8)))
        cases.append(("too large", Array(repeating: 0x20, count: M.maximumSize + 1)))
        cases.append(
            ("too many elements", Array((String(repeating: "<a/>", count: M.maximumElements + 1) + probe).utf8)))
        return cases
    }()

    @Test(arguments: malformed)
    func malformedInputThrows(_ label: String, _ bytes: [UInt8]) {
        #expect(throws: WireError.self, "\(label)") { try M(decoding: bytes) }
    }

    @Test func theBoundsAreExact() throws {
        // N bytes read (the Probe padded with spaces), N + 1 do not.
        let padded =
            WindowsVectors.wsdProbe + Array(repeating: 0x20, count: M.maximumSize - WindowsVectors.wsdProbe.count)
        #expect(try M(decoding: padded).kind == .probe)
        #expect(throws: WireError.self) { try M(decoding: padded + [0x20]) }
        // N elements (the Probe has 8 of its own) read, N + 1 do not.
        let own = 8
        let filler = String(repeating: "<a/>", count: M.maximumElements - own)
        let probe = String(decoding: WindowsVectors.wsdProbe, as: UTF8.self)
        #expect(try M(decoding: Array((filler + probe).utf8)).kind == .probe)
        #expect(throws: WireError.self) { try M(decoding: Array(("<a/>" + filler + probe).utf8)) }
    }
}
