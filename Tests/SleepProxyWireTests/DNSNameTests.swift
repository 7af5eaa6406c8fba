import Testing

@testable import SleepProxyWire

@Suite("DNSName")
struct DNSNameTests {
    @Test func parsesAndPrintsPresentationForm() throws {
        let name = try DNSName(parsing: "TestSvc._http._tcp.local")
        #expect(name.labelStrings == ["TestSvc", "_http", "_tcp", "local"])
        #expect(name.description == "TestSvc._http._tcp.local.")
        #expect(try DNSName(parsing: ".") == .root)
        #expect(try DNSName(parsing: "") == .root)
        #expect(DNSName.root.description == ".")
    }

    @Test func instanceLabelsKeepSpacesDotsAndUTF8() throws {
        let name = try DNSName(labels: ["Büro Mac.2", "_smb", "_tcp", "local"])
        #expect(name.labelCount == 4)
        #expect(name.labelStrings[0] == "Büro Mac.2")
        #expect(name.description == "Büro Mac\\.2._smb._tcp.local.")
        #expect(try DNSName(parsing: name.description) == name)
        #expect(try DNSName(parsing: "Wohnzimmer TV._airplay._tcp.local.").labelStrings[0] == "Wohnzimmer TV")
        #expect(try DNSName(parsing: "a\\046b.local").labelStrings == ["a.b", "local"])
    }

    @Test func comparesASCIICaseInsensitivelyButKeepsBytes() throws {
        let upper = try DNSName(parsing: "MyMac.LOCAL")
        let lower = try DNSName(parsing: "mymac.local")
        #expect(upper == lower)
        #expect(upper.hashValue == lower.hashValue)
        #expect(upper.labelStrings == ["MyMac", "LOCAL"])
        // RFC 6762 §16: only ASCII folds; "Ü" and "ü" are different names.
        #expect(try DNSName(labels: ["Ü"]) != DNSName(labels: ["ü"]))
        #expect(try DNSName(parsing: "x.y.local").isSubdomain(of: "LOCAL."))
        #expect(!(try DNSName(parsing: "local")).isSubdomain(of: "x.local."))
        #expect(DNSName("a.b.local.").parent == "b.local.")
    }

    @Test func labelLimitIs63() throws {
        let ok = String(repeating: "a", count: DNSName.maximumLabelLength)
        #expect(try DNSName(labels: [ok]).labels[0].count == 63)
        #expect(throws: WireError(.badLabel, at: 0, "")) { try DNSName(labels: [ok + "a"]) }
    }

    @Test func nameLimitIs255WireBytes() throws {
        // Four labels of 63 bytes = 4 × 64 + 1 = 257 > 255; three of 63 and one of 61 = 255 exactly.
        let l63 = String(repeating: "a", count: 63)
        let exact = try DNSName(labels: [l63, l63, l63, String(repeating: "b", count: 61)])
        #expect(exact.wireLength == DNSName.maximumWireLength)
        #expect(throws: WireError(.nameTooLong, at: 0, "")) {
            try DNSName(labels: [l63, l63, l63, String(repeating: "b", count: 62)])
        }
    }

    // MARK: Decoding hostile names

    /// A message with one question whose name is `nameBytes`, preceded by `prefix` bytes placed right after the
    /// header (reachable by pointers but not part of any section... they sit in a first question).
    private func query(_ names: [[UInt8]]) -> [UInt8] {
        var bytes: [UInt8] = [0, 0, 0, 0, 0, UInt8(names.count), 0, 0, 0, 0, 0, 0]
        for name in names { bytes += name + [0, 1, 0, 1] }
        return bytes
    }

    @Test func decodesBackwardPointers() throws {
        // "local" at offset 12, then "mac" + pointer to 12.
        let message = try DNSMessage(
            decoding: self.query([[5] + Array("local".utf8) + [0], [3] + Array("mac".utf8) + [0xC0, 12]]))
        #expect(message.questions[1].name == "mac.local.")
    }

    @Test func rejectsForwardAndSelfPointers() {
        // Pointer to itself (offset 12).
        #expect(throws: WireError(.badPointer, at: 12, "")) { try DNSMessage(decoding: self.query([[0xC0, 12]])) }
        // Pointer forward, past its own position.
        #expect(throws: WireError(.badPointer, at: 12, "")) {
            try DNSMessage(decoding: self.query([[0xC0, 20], [0]]))
        }
        // "a" + pointer back to the start of the same name: a loop.
        #expect(throws: WireError(.badPointer, at: 14, "")) {
            try DNSMessage(decoding: self.query([[1, 0x61, 0xC0, 12]]))
        }
    }

    @Test func pointerChainLimit() throws {
        // A chain of pointers, each to the previous one, ending at a root byte at offset 12.
        func chain(_ hops: Int) -> [UInt8] {
            var bytes: [UInt8] = [0, 0, 0, 0, 0, UInt8(hops + 1), 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 1]
            var target = 12
            for _ in 0..<hops {
                let here = bytes.count
                bytes += [0xC0 | UInt8(target >> 8), UInt8(target & 0xFF), 0, 1, 0, 1]
                target = here
            }
            return bytes
        }
        // The last question's name follows exactly `hops` pointers... but each hop must be its own question, and
        // the longest chain is the last question's. At the limit it decodes, one more is refused.
        #expect(
            try DNSMessage(decoding: chain(DNSName.maximumPointerHops)).questions.count == DNSName.maximumPointerHops
                + 1)
        #expect(throws: WireError(.badPointer, at: 0, "")) {
            try DNSMessage(decoding: chain(DNSName.maximumPointerHops + 1))
        }
    }

    @Test func rejectsReservedLabelTypes() {
        #expect(throws: WireError(.badLabel, at: 12, "")) { try DNSMessage(decoding: self.query([[0x41, 0]])) }
        #expect(throws: WireError(.badLabel, at: 12, "")) { try DNSMessage(decoding: self.query([[0x80, 0]])) }
    }

    @Test func decodedNameLimitIs255() throws {
        func name(_ lengths: [Int]) -> [UInt8] {
            lengths.flatMap { [UInt8($0)] + Array(repeating: 0x61, count: $0) } + [0]
        }
        #expect(try DNSMessage(decoding: self.query([name([63, 63, 63, 61])])).questions[0].name.wireLength == 255)
        #expect(throws: WireError(.nameTooLong, at: 0, "")) {
            try DNSMessage(decoding: self.query([name([63, 63, 63, 62])]))
        }
        // The same limit applies when the long name is assembled through a pointer.
        let first = name([63, 63, 63])
        let second: [UInt8] = [62] + Array(repeating: 0x62, count: 62) + [0xC0, 12]
        #expect(throws: WireError(.nameTooLong, at: 0, "")) { try DNSMessage(decoding: self.query([first, second])) }
    }
}
