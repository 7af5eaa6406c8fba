import NIOCore
import Testing

@testable import SleepProxyWire

@Suite("DNS message codec")
struct DNSCodecTests {
    @Test func qSectionBitsAndCacheFlush() throws {
        let message = DNSMessage(
            questions: [DNSQuestion(name: "_http._tcp.local.", type: .ptr, unicastResponse: true)],
            answers: [
                DNSResourceRecord(
                    name: "h.local.", cacheFlush: true, ttl: 120, rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 9)))
                )
            ]
        )
        let bytes = message.encoded()
        // Question class 0x8001, answer class 0x8001.
        #expect(Array(bytes[(12 + 18 + 2)..<(12 + 18 + 4)]) == [0x80, 0x01])
        let decoded = try DNSMessage(decoding: bytes)
        #expect(decoded.questions[0].unicastResponse)
        #expect(decoded.questions[0].qclass == .in)
        #expect(decoded.answers[0].cacheFlush)
        #expect(decoded.answers[0].rrclass == .in)
        #expect(decoded == message)
    }

    @Test func messageSizeLimitIs9000() throws {
        // One TXT answer padded so the whole message is exactly N bytes.
        func message(size: Int) throws -> [UInt8] {
            // header 12 + root name 1 + type/class/ttl/rdlength 10 = 23, then TXT strings.
            var remaining = size - 23
            var strings: [[UInt8]] = []
            while remaining > 0 {
                let n = min(remaining - 1, 255)
                strings.append(Array(repeating: 0x78, count: n))
                remaining -= n + 1
            }
            let m = DNSMessage(answers: [
                DNSResourceRecord(name: .root, ttl: 1, rdata: .txt(try TXTRecord(strings: strings)))
            ])
            let bytes = m.encoded()
            #expect(bytes.count == size)
            return bytes
        }
        #expect(try DNSMessage(decoding: try message(size: DNSMessage.maximumSize)).answers.count == 1)
        #expect(throws: WireError(.tooLarge, at: 0, "")) {
            try DNSMessage(decoding: try message(size: DNSMessage.maximumSize + 1))
        }
    }

    @Test func countsBeyondTheBytesAreRefusedBeforeAllocating() {
        var bytes: [UInt8] = [0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF]
        #expect(throws: WireError(.badCount, at: 4, "")) { try DNSMessage(decoding: bytes) }
        bytes = [0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]  // one question needs 5 bytes, 4 present
        #expect(throws: WireError(.badCount, at: 4, "")) { try DNSMessage(decoding: bytes) }
    }

    @Test func trailingBytesAreRefused() {
        let bytes: [UInt8] = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xAB]
        #expect(throws: WireError(.trailingBytes, at: 12, "")) { try DNSMessage(decoding: bytes) }
    }

    @Test func rdataMustFillItsLength() {
        // A record with RDLENGTH 5 for an A record.
        let bytes: [UInt8] = [0, 0, 0x84, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 120, 0, 5, 1, 2, 3, 4, 5]
        #expect(throws: WireError(.badRData, at: 23, "")) { try DNSMessage(decoding: bytes) }
        // A PTR whose name ends before RDLENGTH: trailing bytes inside the RDATA.
        let ptr: [UInt8] = [0, 0, 0x84, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 12, 0, 1, 0, 0, 0, 120, 0, 3, 0, 0, 0]
        #expect(throws: WireError(.trailingBytes, at: 24, "")) { try DNSMessage(decoding: ptr) }
    }

    @Test func emptyTXTIsOneZeroByte() throws {
        let m = DNSMessage(answers: [DNSResourceRecord(name: "x.local.", ttl: 4500, rdata: .txt(.empty))])
        let bytes = m.encoded()
        #expect(Array(bytes.suffix(3)) == [0, 1, 0])  // RDLENGTH 1, one empty string
        #expect(try DNSMessage(decoding: bytes) == m)
        let tooLong = [UInt8](repeating: 0x61, count: TXTRecord.maximumStringLength + 1)
        #expect(throws: WireError(.invalidArgument, at: 0, "")) { try TXTRecord(strings: [tooLong]) }
        #expect(try TXTRecord(strings: [Array(tooLong.dropLast())]).strings[0].count == 255)
    }

    @Test func hinfoAndNullAndUnknownRoundTrip() throws {
        let keepalive = [UInt8(12)] + Array("t=7200 h=1.2".utf8) + [0]
        let m = DNSMessage(answers: [
            DNSResourceRecord(
                name: "h.local.", cacheFlush: true, ttl: 120,
                rdata: .hinfo(try HINFORecord(cpu: Array("ARM".utf8), os: Array("Linux".utf8)))),
            DNSResourceRecord(
                name: "1._keepalive._dns-sd._udp.local.", cacheFlush: true, ttl: 4500,
                rdata: .null(try NULLRecord(data: keepalive))),
            DNSResourceRecord(
                name: "h.local.", ttl: 120,
                rdata: .unknown(try UnknownRecord(type: DNSRecordType(rawValue: 65), data: [1, 0, 0]))),
        ])
        let decoded = try DNSMessage(decoding: m.encoded())
        #expect(decoded == m)
        #expect(decoded.answers[2].type.rawValue == 65)
    }

    @Test func nsecRestrictedAndGeneralForms() throws {
        let owner: DNSName = "2.2.0.192.in-addr.arpa."
        let restricted = NSECRecord(nextName: owner, types: [.ptr])
        // Apple's observed bitmap for "PTR only": window 0, length 2, 00 08.
        #expect(restricted.windows == [NSECRecord.Window(number: 0, bitmap: [0x00, 0x08])])
        #expect(restricted.isRestrictedMDNSForm(owner: owner))
        let general = NSECRecord(
            nextName: "z.example.",
            types: [.a, .aaaa, .nsec, DNSRecordType(rawValue: 65), DNSRecordType(rawValue: 1234)])
        #expect(general.types.map(\.rawValue) == [1, 28, 47, 65, 1234])
        #expect(general.windows.map(\.number) == [0, 4])
        #expect(!general.isRestrictedMDNSForm(owner: owner))
        #expect(general.contains(.aaaa) && !general.contains(.txt))
        let m = DNSMessage(answers: [
            DNSResourceRecord(name: owner, cacheFlush: true, ttl: 120, rdata: .nsec(restricted)),
            DNSResourceRecord(name: "x.example.", ttl: 120, rdata: .nsec(general)),
        ])
        let bytes = m.encoded()
        #expect(try DNSMessage(decoding: bytes) == m)
        // Compressed next name: the restricted NSEC's next name is a 2-byte pointer to its owner.
        #expect(bytes[12 + owner.wireLength + 10] == 0xC0)
    }

    @Test func nsecBitmapLengthLimitIs32() throws {
        func message(bitmapLength: Int) -> [UInt8] {
            let rdata: [UInt8] = [0, 0, UInt8(bitmapLength)] + Array(repeating: 0x40, count: bitmapLength)
            return [0, 0, 0x84, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 47, 0x80, 1, 0, 0, 0, 120, 0, UInt8(rdata.count)]
                + rdata
        }
        let decoded = try DNSMessage(decoding: message(bitmapLength: NSECRecord.maximumBitmapLength))
        guard case .nsec(let nsec) = decoded.answers.first?.rdata else {
            Issue.record("a 32-byte bitmap is valid")
            return
        }
        #expect(nsec.windows[0].bitmap.count == 32)
        // 33 bytes: the NSEC is malformed and skipped (RFC 6762 §6.1), the message survives.
        #expect(try DNSMessage(decoding: message(bitmapLength: NSECRecord.maximumBitmapLength + 1)).answers.isEmpty)
    }

    @Test func malformedNSECIsSkippedNotFatal() throws {
        // An NSEC whose window has bitmap length 0 (invalid), then an A record: the message still decodes, without
        // the NSEC (RFC 6762 §6.1), and nothing of its bytes is kept.
        let bytes: [UInt8] = [
            0, 0, 0x84, 0, 0, 0, 0, 2, 0, 0, 0, 0,
            0, 0, 47, 0x80, 1, 0, 0, 0, 120, 0, 3, 0, 0, 0,
            0, 0, 1, 0x80, 1, 0, 0, 0, 120, 0, 4, 192, 0, 2, 1,
        ]
        let message = try DNSMessage(decoding: bytes)
        #expect(message.answers.map(\.type) == [.a])
        // A malformed NSEC that is truncated on the outside (RDLENGTH past the end) still fails the message.
        #expect(throws: WireError.self) { try DNSMessage(decoding: Array(bytes[..<24])) }
    }

    @Test func legacyCompressedTypesAreStoredDecompressed() throws {
        // A CNAME whose target is a pointer to the question name: kept as an uncompressed name, so it can be
        // written into any other message.
        let bytes: [UInt8] =
            [
                0, 0, 0x84, 0, 0, 1, 0, 1, 0, 0, 0, 0,
                3, 0x77, 0x77, 0x77, 5,
            ] + Array("local".utf8) + [
                0, 0, 5, 0, 1,
                0xC0, 12, 0, 5, 0, 1, 0, 0, 0, 120, 0, 2, 0xC0, 16,
            ]
        let message = try DNSMessage(decoding: bytes)
        let expected = Array(DNSName("local.").storage) + [0]
        #expect(message.answers[0].rdata == .unknown(try UnknownRecord(type: .cname, data: expected)))
        #expect(try DNSMessage(decoding: message.encoded()) == message)
    }

    @Test func ownerOptionLengths() throws {
        let mac = MACAddress("02:53:50:00:00:02")!
        let wake = MACAddress("02:53:50:00:00:03")!
        let cases: [(OwnerOption, Int)] = [
            (OwnerOption(sequence: 3, primaryMAC: mac), 8),
            (OwnerOption(sequence: 3, primaryMAC: mac, wakeMAC: wake), 14),
            (
                OwnerOption(
                    sequence: 3, primaryMAC: mac, wakeMAC: wake, password: SecureOnPassword(bytes: [1, 2, 3, 4])), 18
            ),
            (
                OwnerOption(
                    sequence: 3, primaryMAC: mac, wakeMAC: wake, password: SecureOnPassword(bytes: [1, 2, 3, 4, 5, 6])),
                20
            ),
        ]
        for (owner, length) in cases {
            #expect(owner.data.count == length)
            let decoded = try #require(OwnerOption(data: owner.data))
            #expect(decoded == owner)
        }
        // Every other length is not an Owner option: it stays an unknown option with code 4.
        for length in [0, 7, 9, 12, 13, 15, 19, 21, 22, 24] {
            let option = EDNSOption(code: EDNSOption.Code.owner, data: Array(repeating: 0, count: length))
            #expect(option == .unknown(code: 4, data: Array(repeating: 0, count: length)), "length \(length)")
        }
        // Version is kept so callers can refuse non-zero versions.
        #expect(OwnerOption(data: [1, 0] + mac.bytes)?.version == 1)
        // A password without a wake MAC is written with the primary MAC as the wake MAC.
        let pw = OwnerOption(sequence: 0, primaryMAC: mac, password: SecureOnPassword(bytes: [9, 9, 9, 9]))
        #expect(pw.data.count == 18)
        #expect(OwnerOption(data: pw.data)?.wakeMAC == mac)
    }

    @Test func updateLeaseLengths() {
        #expect(UpdateLeaseOption(data: [0, 0, 0x1C, 0x20]) == UpdateLeaseOption(lease: 7200))
        #expect(
            UpdateLeaseOption(data: [0, 0, 0x1C, 0x20, 0, 1, 0, 0]) == UpdateLeaseOption(lease: 7200, keyLease: 65536))
        for length in [0, 3, 5, 6, 7, 9] {
            #expect(
                EDNSOption(code: 2, data: Array(repeating: 1, count: length))
                    == .unknown(code: 2, data: Array(repeating: 1, count: length)))
        }
        #expect(UpdateLeaseOption(lease: 7200, keyLease: 1).data.count == 8)
    }

    @Test func optionsMustExactlyFillTheOPT() throws {
        func message(optRData: [UInt8]) -> [UInt8] {
            [0, 0, 0x28, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 41, 0x05, 0xA0, 0, 0, 0x11, 0x94, 0, UInt8(optRData.count)]
                + optRData
        }
        #expect(
            try DNSMessage(decoding: message(optRData: [0, 2, 0, 4, 0, 0, 0x1C, 0x20])).ednsOptions?.updateLease?.lease
                == 7200)
        // Three stray bytes after a complete option.
        #expect(throws: WireError(.badOption, at: 0, "")) {
            try DNSMessage(decoding: message(optRData: [0, 2, 0, 4, 0, 0, 0x1C, 0x20, 0, 0, 0]))
        }
        // An option claiming more bytes than the RDATA holds.
        #expect(throws: WireError(.badOption, at: 0, "")) {
            try DNSMessage(decoding: message(optRData: [0, 4, 0, 8, 0, 0]))
        }
        // Unknown options are kept as bytes and round-trip.
        let unknown = message(optRData: [0xFD, 0xE9, 0, 5, 1, 0, 0, 0x0A, 0x28])
        let decoded = try DNSMessage(decoding: unknown)
        #expect(decoded.ednsOptions?.options == [.unknown(code: 65001, data: [1, 0, 0, 0x0A, 0x28])])
        #expect(decoded.encoded() == unknown)
    }

    @Test func compressionPreservesCaseAndShrinks() throws {
        let m = DNSMessage(answers: [
            DNSResourceRecord(name: "MyMac.local.", ttl: 120, rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 1)))),
            DNSResourceRecord(name: "mymac.local.", ttl: 120, rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 2)))),
            DNSResourceRecord(
                name: "_ssh._tcp.local.", ttl: 4500, rdata: .ptr(PTRRecord(target: "MyMac._ssh._tcp.local."))),
        ])
        let compressed = m.encoded()
        let plain = m.encoded(options: DNSEncodingOptions(compressNames: false, compressSRVTarget: false))
        #expect(compressed.count < plain.count)
        let decoded = try DNSMessage(decoding: compressed)
        #expect(decoded.answers.map { $0.name.labelStrings[0] } == ["MyMac", "mymac", "_ssh"])
        #expect(decoded == m)
        #expect(try DNSMessage(decoding: plain) == m)
    }

    @Test func decodesFromAByteBufferWithAReaderOffset() throws {
        let m = DNSMessage(id: 7, questions: [DNSQuestion(name: "a.local.", type: .a)])
        var buffer = ByteBuffer(bytes: [0xEE, 0xEE])
        m.write(to: &buffer)
        buffer.moveReaderIndex(forwardBy: 2)
        #expect(try DNSMessage(decoding: buffer) == m)
    }
}

@Suite("DNS UPDATE forms")
struct DNSUpdateFormTests {
    @Test func deletionsWithoutRDataDecode() throws {
        // RFC 2136 §2.5.2 "delete an RRset": class ANY, TTL 0, RDLENGTH 0, for a type that normally has RDATA.
        let message = DNSMessage(
            flags: DNSHeaderFlags(response: false, opcode: .update),
            questions: [DNSQuestion(name: "local.", type: .soa)],
            authorities: [
                DNSResourceRecord(
                    name: "vm.local.", rrclass: .any, ttl: 0, rdata: .unknown(try UnknownRecord(type: .a, data: [])))
            ]
        )
        let decoded = try DNSMessage(decoding: message.encoded())
        #expect(decoded == message)
        #expect(decoded.updates[0].type == .a && decoded.updates[0].rrclass == .any)
        // The same empty RDATA in class IN is still a malformed A record.
        var inClass = message
        inClass.updates[0].rrclass = .in
        #expect(throws: WireError(.badRData, at: 0, "")) { try DNSMessage(decoding: inClass.encoded()) }
    }
}
