import SleepProxyTestSupport
import Testing

@testable import SleepProxyWire

@Suite("SSDP message codec")
struct SSDPMessageTests {
    static func bytes(_ lines: [String]) -> [UInt8] { Array((lines.joined(separator: "\r\n") + "\r\n\r\n").utf8) }

    /// The alive announcement a minidlna-like media server multicasts (UDA 1.1 §1.2.2).
    static let alive = bytes([
        "NOTIFY * HTTP/1.1", "HOST: 239.255.255.250:1900", "CACHE-CONTROL: max-age=1810",
        "LOCATION: http://192.0.2.2:8200/rootDesc.xml", "SERVER: Debian/12 DLNADOC/1.50 UPnP/1.0 MiniDLNA/1.3.0",
        "NT: urn:schemas-upnp-org:device:MediaServer:1",
        "USN: uuid:4d696e69-444c-164e-9d41-b827ebfe7a11::urn:schemas-upnp-org:device:MediaServer:1",
        "NTS: ssdp:alive", "01-NLS: 1", "BOOTID.UPNP.ORG: 1700000000", "CONFIGID.UPNP.ORG: 1337",
    ])

    @Test func anAliveAnnouncementDecodesAndEncodesAgain() throws {
        let message = try SSDPMessage(decoding: Self.alive)
        #expect(message.kind == .notify && message.headers.count == 10)
        #expect(message.notificationSubtype == "ssdp:alive")
        #expect(message.notificationType == "urn:schemas-upnp-org:device:MediaServer:1")
        #expect(message.location == "http://192.0.2.2:8200/rootDesc.xml")
        #expect(message.maxAge == 1810 && message.bootID == 1_700_000_000 && message.configID == 1337)
        #expect(message["usn"] == message.uniqueServiceName, "header names are case-insensitive")
        #expect(message.encoded() == Self.alive, "sent again byte for byte")
        #expect(try SSDPMessage(decoding: message.encoded()) == message)
    }

    @Test func aSearchAndItsResponse() throws {
        let search = try SSDPMessage(
            decoding: Self.bytes([
                "M-SEARCH * HTTP/1.1", "HOST: 239.255.255.250:1900", "MAN: \"ssdp:discover\"", "MX: 3", "ST: ssdp:all",
            ]))
        #expect(
            search.kind == .search && search.isDiscover && search.maximumWait == 3 && search.searchTarget == "ssdp:all")
        // UDA 1.1 §1.3.2: an MX above 5 is taken as 5; a unicast search may carry none.
        var long = search
        long.headers[2] = .init("MX", "120")
        #expect(long.maximumWait == 5)
        let response = try SSDPMessage(
            decoding: Self.bytes([
                "HTTP/1.1 200 OK", "CACHE-CONTROL: max-age = 1800", "EXT:",
                "LOCATION: http://192.0.2.2:8200/rootDesc.xml",
                "ST: upnp:rootdevice", "USN: uuid:4d696e69::upnp:rootdevice",
            ]))
        #expect(response.kind == .response && response.maxAge == 1800 && response["EXT"] == "")
        let built = SSDPMessage(kind: .search, headers: [.init("ST", "upnp:rootdevice")])
        #expect(built.encoded() == Array("M-SEARCH * HTTP/1.1\r\nST: upnp:rootdevice\r\n\r\n".utf8))
    }

    /// Every limit at N and N+1: the datagram size, the number of headers and the length of a line.
    @Test func limitsHoldAtTheirBoundAndOnePast() throws {
        func message(headers: Int, valueLength: Int = 1) -> [UInt8] {
            Self.bytes(
                ["NOTIFY * HTTP/1.1"] + (0..<headers).map { "X-\($0): " + String(repeating: "v", count: valueLength) })
        }
        #expect(throws: Never.self) { try SSDPMessage(decoding: message(headers: SSDPMessage.maximumHeaders)) }
        #expect(throws: WireError(.badCount, at: 0, "")) {
            try SSDPMessage(decoding: message(headers: SSDPMessage.maximumHeaders + 1))
        }
        let fits = SSDPMessage.maximumLineLength - "X-0: ".utf8.count
        #expect(throws: Never.self) { try SSDPMessage(decoding: message(headers: 1, valueLength: fits)) }
        #expect(throws: WireError(.tooLarge, at: 0, "")) {
            try SSDPMessage(decoding: message(headers: 1, valueLength: fits + 1))
        }
        // The whole datagram: padded with headers up to exactly the bound, then one byte more.
        var lines = ["NOTIFY * HTTP/1.1"]
        while Self.bytes(lines).count + 1_000 < SSDPMessage.maximumSize {
            lines.append("X-\(lines.count): " + String(repeating: "v", count: 990))
        }
        let room = SSDPMessage.maximumSize - Self.bytes(lines + ["Y: "]).count
        let exact = Self.bytes(lines + ["Y: " + String(repeating: "v", count: room)])
        #expect(exact.count == SSDPMessage.maximumSize)
        #expect(throws: Never.self) { try SSDPMessage(decoding: exact) }
        let over = Self.bytes(lines + ["Y: " + String(repeating: "v", count: room + 1)])
        #expect(throws: WireError(.tooLarge, at: 0, "")) { try SSDPMessage(decoding: over) }
    }

    @Test func malformedInputIsAnErrorNotACrash() {
        let cases: [(String, [UInt8], WireError.Code)] = [
            ("LF alone", Array("NOTIFY * HTTP/1.1\nNT: a\n\n".utf8), .badHeader),
            ("no empty line", Array("NOTIFY * HTTP/1.1\r\nNT: a\r\n".utf8), .truncated),
            ("a body", Self.bytes(["NOTIFY * HTTP/1.1", "NT: a"]) + Array("body".utf8), .trailingBytes),
            ("no colon", Self.bytes(["NOTIFY * HTTP/1.1", "NT a"]), .badHeader),
            ("a name that is no token", Self.bytes(["NOTIFY * HTTP/1.1", "N T: a"]), .badHeader),
            ("a control byte", Self.bytes(["NOTIFY * HTTP/1.1", "NT: a\u{01}b"]), .badHeader),
            ("another start line", Self.bytes(["GET / HTTP/1.1", "HOST: x"]), .unsupported),
            ("a lone CR", Array("NOTIFY * HTTP/1.1\rNT: a\r\n\r\n".utf8), .badHeader),
            ("nothing", [], .truncated),
            ("only the end", Array("\r\n".utf8), .badHeader),
        ]
        for (label, bytes, code) in cases {
            #expect(throws: WireError(code, at: 0, ""), "\(label)") { try SSDPMessage(decoding: bytes) }
        }
        // Invalid UTF-8 in a value.
        #expect(throws: WireError(.badHeader, at: 0, "")) {
            try SSDPMessage(decoding: Array("NOTIFY * HTTP/1.1\r\nX: ".utf8) + [0xFF] + Array("\r\n\r\n".utf8))
        }
    }

    /// Random damage to a real announcement: every outcome is a message or a `WireError`.
    @Test func randomDamageNeverCrashes() {
        var generator = SplitMix64(seed: 1900)
        for _ in 0..<20_000 {
            var bytes = Self.alive
            for _ in 0..<(1 + Int(generator.next() % 4)) {
                let index = Int(generator.next() % UInt64(bytes.count))
                switch generator.next() % 3 {
                case 0: bytes[index] = UInt8(truncatingIfNeeded: generator.next())
                case 1: bytes.remove(at: index)
                default: bytes.insert(UInt8(truncatingIfNeeded: generator.next()), at: index)
                }
            }
            _ = try? SSDPMessage(decoding: bytes)
        }
    }
}
