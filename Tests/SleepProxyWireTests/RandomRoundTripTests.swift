import SleepProxyTestSupport
import Testing

@testable import SleepProxyWire

/// Random messages: build → encode → decode → equal, for both encoding forms.
@Suite("Random round trips")
struct RandomRoundTripTests {
    struct Generator {
        var rng: SplitMix64

        mutating func int(_ range: ClosedRange<Int>) -> Int { Int.random(in: range, using: &self.rng) }
        mutating func bool() -> Bool { Bool.random(using: &self.rng) }
        mutating func bytes(_ count: Int) -> [UInt8] {
            (0..<count).map { _ in UInt8.random(in: 0...255, using: &self.rng) }
        }

        /// Names share suffixes often, so compression gets exercised; labels include bytes of every kind.
        mutating func name() -> DNSName {
            let pool: [[UInt8]] = [
                Array("local".utf8), Array("_tcp".utf8), Array("_http".utf8), Array("LOCAL".utf8),
                Array("Büro Mac".utf8),
            ]
            var labels: [[UInt8]] = []
            for _ in 0..<self.int(0...4) {
                if self.bool() {
                    labels.append(pool[self.int(0...pool.count - 1)])
                } else {
                    labels.append(self.bytes(self.int(1...20)))
                }
            }
            return (try? DNSName(labelBytes: labels)) ?? .root
        }

        mutating func rdata() -> DNSRData {
            switch self.int(0...9) {
            case 0:
                return .a(ARecord(address: IPv4Address(rawValue: UInt32.random(in: 0...UInt32.max, using: &self.rng))))
            case 1: return .aaaa(AAAARecord(address: IPv6Address(high: self.rng.next(), low: self.rng.next())))
            case 2: return .ptr(PTRRecord(target: self.name()))
            case 3:
                return .srv(
                    SRVRecord(
                        priority: UInt16(self.int(0...65535)), weight: UInt16(self.int(0...65535)),
                        port: UInt16(self.int(0...65535)), target: self.name()))
            case 4:
                return .txt(try! TXTRecord(strings: (0..<self.int(0...4)).map { _ in self.bytes(self.int(0...40)) }))
            case 5: return .hinfo(try! HINFORecord(cpu: self.bytes(self.int(0...10)), os: self.bytes(self.int(0...10))))
            case 6:
                let types = (0..<self.int(0...6)).map { _ in DNSRecordType(rawValue: UInt16(self.int(0...700))) }
                return .nsec(NSECRecord(nextName: self.name(), types: types))
            case 7: return .null(try! NULLRecord(data: self.bytes(self.int(0...50))))
            case 8:
                var options: [EDNSOption] = [.updateLease(UpdateLeaseOption(lease: UInt32(self.int(0...100_000))))]
                let mac = MACAddress(rawValue: self.rng.next())
                options.append(
                    .owner(
                        OwnerOption(
                            sequence: UInt8(self.int(0...255)), primaryMAC: mac,
                            wakeMAC: self.bool() ? MACAddress(rawValue: self.rng.next()) : nil)))
                options.append(.unknown(code: UInt16(self.int(5...65535)), data: self.bytes(self.int(0...9))))
                return .opt(OPTRecord(options: options))
            default:
                return .unknown(
                    try! UnknownRecord(
                        type: DNSRecordType(rawValue: UInt16(self.int(256...65000))), data: self.bytes(self.int(0...30))
                    ))
            }
        }

        mutating func record() -> DNSResourceRecord {
            let rdata = self.rdata()
            if case .opt = rdata {
                return DNSResourceRecord.opt(
                    EDNSHeader(udpPayloadSize: UInt16(self.int(512...9000)), z: UInt16(self.int(0...0x7FFF))),
                    options: { if case .opt(let o) = rdata { return o.options } else { return [] } }())
            }
            return DNSResourceRecord(
                name: self.name(), rrclass: DNSClass(rawValue: UInt16(self.int(1...255))), cacheFlush: self.bool(),
                ttl: UInt32.random(in: 0...UInt32.max, using: &self.rng), rdata: rdata)
        }

        mutating func message() -> DNSMessage {
            DNSMessage(
                id: UInt16(self.int(0...65535)),
                flags: DNSHeaderFlags(rawValue: UInt16(self.int(0...65535))),
                questions: (0..<self.int(0...3)).map { _ in
                    DNSQuestion(
                        name: self.name(), type: DNSRecordType(rawValue: UInt16(self.int(0...300))), qclass: .in,
                        unicastResponse: self.bool())
                },
                answers: (0..<self.int(0...6)).map { _ in self.record() },
                authorities: (0..<self.int(0...3)).map { _ in self.record() },
                additionals: (0..<self.int(0...3)).map { _ in self.record() }
            )
        }
    }

    @Test(arguments: [1, 2, 3, 4])
    func randomMessagesRoundTrip(seed: UInt64) throws {
        var generator = Generator(rng: SplitMix64(seed: seed))
        for iteration in 0..<500 {
            let message = generator.message()
            for options in [
                DNSEncodingOptions.mdns, .appleUpdate,
                DNSEncodingOptions(compressNames: false, compressSRVTarget: false),
            ] {
                let bytes = message.encoded(options: options)
                let decoded = try DNSMessage(decoding: bytes)
                // Compact failures: a full dump of two random messages is unreadable.
                guard decoded == message else {
                    let diff = zip(
                        decoded.answers + decoded.authorities + decoded.additionals,
                        message.answers + message.authorities + message.additionals
                    ).first { $0 != $1 }
                    Issue.record(
                        "seed \(seed) iteration \(iteration): first differing record \(String(describing: diff))")
                    return
                }
                // Encoding is deterministic: decode → encode gives the same bytes.
                #expect(decoded.encoded(options: options) == bytes, "seed \(seed) iteration \(iteration)")
            }
        }
    }
}
