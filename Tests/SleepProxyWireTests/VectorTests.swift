import NIOCore
import SleepProxyTestSupport
import Testing

@testable import SleepProxyWire

/// Every bundled capture decodes layer by layer, and no truncation of any of it crashes the decoders.
@Suite("Captured vectors")
struct VectorTests {
    /// What a frame decoded to, down to the DNS message when there is one.
    enum Decoded {
        case arp(ARPPacket)
        case dns(DNSMessage, udp: UDPDatagram)
        case neighborDiscovery(NeighborDiscoveryMessage)
        case tcp(TCPSegment)
        case other(EtherType, IPProtocol?)
    }

    static func decodeFully(_ frameBytes: [UInt8]) throws -> Decoded {
        let frame = try EthernetFrame(decoding: ByteBuffer(bytes: frameBytes))
        switch frame.etherType {
        case .arp:
            return .arp(try ARPPacket(decoding: frame.payload))
        case .ipv4:
            let packet = try IPv4Packet(decoding: frame.payload)
            return try decodeTransport(packet.header.proto, packet.payload, v6: nil)
        case .ipv6:
            let packet = try IPv6Packet(decoding: frame.payload)
            return try decodeTransport(packet.upperLayerProtocol, packet.payload, v6: packet)
        default:
            return .other(frame.etherType, nil)
        }
    }

    static func decodeTransport(_ proto: IPProtocol, _ payload: ByteBuffer, v6: IPv6Packet?) throws -> Decoded {
        switch proto {
        case .udp:
            let udp = try UDPDatagram(decoding: payload)
            return .dns(try DNSMessage(decoding: udp.payload), udp: udp)
        case .tcp:
            return .tcp(try TCPSegment(decoding: payload))
        case .icmpv6:
            if let v6, let first = payload.getInteger(at: payload.readerIndex, as: UInt8.self),
                first == 135 || first == 136
            {
                return .neighborDiscovery(try NeighborDiscoveryMessage(decoding: v6))
            }
            return .other(.ipv6, proto)
        default:
            return .other(.ipv4, proto)
        }
    }

    @Test func sleepCycleCaptureDecodesEveryFrame() throws {
        let pcap = try PcapFile(try Fixtures.bytes("apple-posix-sleep-cycle.pcap"))
        #expect(pcap.linkType == 1)
        #expect(pcap.records.count == 80)
        var registrations = 0
        var replies = 0
        var ownerSequences: [Int: UInt8] = [:]
        var arps = 0
        for (index, record) in pcap.records.enumerated() {
            let decoded = try Self.decodeFully(record.data)
            switch decoded {
            case .dns(let message, _):
                if message.flags.opcode == .update {
                    if message.flags.isResponse { replies += 1 } else { registrations += 1 }
                }
                if let owner = message.ednsOptions?.owner { ownerSequences[index + 1] = owner.sequence }
            case .arp:
                arps += 1
            default:
                break
            }
        }
        // The README of the vectors: the registration is sent three times (frames 39, 44, 46), the proxy
        // replies, and after waking the client's packets carry Owner sequence 1 (frames 55 onward).
        #expect(registrations == 3)
        #expect(replies >= 1)
        #expect(arps >= 1)
        for frame in [39, 44, 46] { #expect(ownerSequences[frame] == 0, "frame \(frame)") }
        #expect(ownerSequences.filter { $0.key >= 55 }.values.contains(1))
        #expect(!ownerSequences.filter { $0.key >= 55 }.values.contains(0))
    }

    @Test func registrationInTheCaptureMatchesTheStandaloneVector() throws {
        let pcap = try PcapFile(try Fixtures.bytes("apple-posix-sleep-cycle.pcap"))
        guard case .dns(let message, let udp) = try Self.decodeFully(pcap.records[38].data) else {
            Issue.record("frame 39 is not DNS")
            return
        }
        let standalone = try DNSMessage(decoding: try Fixtures.bytes("apple-posix-registration.bin"))
        #expect(message.updates == standalone.updates)
        #expect(udp.destinationPort == 5599)  // the stand-in proxy's SRV port
    }

    @Test func quQueryFromOpenWrt() throws {
        let pcap = try PcapFile(try Fixtures.bytes("query_qu.pcap"))
        #expect(pcap.records.count == 1)
        guard case .dns(let message, let udp) = try Self.decodeFully(pcap.records[0].data) else {
            Issue.record("not a DNS frame")
            return
        }
        #expect(udp.sourcePort == 5353 && udp.destinationPort == 5353)
        #expect(message.id == 0)
        #expect(
            message.questions == [DNSQuestion(name: "_services._dns-sd._udp.local.", type: .ptr, unicastResponse: true)]
        )
        #expect(message.answers.isEmpty && message.authorities.isEmpty && message.additionals.isEmpty)
    }

    @Test func openWrtCrashInputIsRejectedCleanly() throws {
        let bytes = try Fixtures.bytes("crash-68e33cae6500804f6856f5a92dca26626ad0479c")
        #expect(throws: WireError.self) { try DNSMessage(decoding: bytes) }
    }

    @Test func everyCapturedFrameTruncatedAtEveryOffsetThrows() throws {
        var frames = try PcapFile(try Fixtures.bytes("apple-posix-sleep-cycle.pcap")).records.map(\.data)
        frames += try PcapFile(try Fixtures.bytes("query_qu.pcap")).records.map(\.data)
        var checked = 0
        for frame in frames {
            // Frames decode in full; shorter prefixes must throw (an IP, UDP or DNS length no longer fits).
            // ARP frames carry Ethernet padding, so only cuts inside the 28 ARP bytes must fail for them.
            let isARP = frame.count >= 14 && frame[12] == 0x08 && frame[13] == 0x06
            let mustFailBelow = isARP ? EthernetFrame.headerLength + ARPPacket.length : frame.count
            for length in 0..<mustFailBelow {
                #expect(throws: WireError.self, "frame of \(frame.count) cut to \(length)") {
                    try Self.decodeFully(Array(frame[..<length]))
                }
                checked += 1
            }
        }
        #expect(checked > 10_000)
    }

    @Test func corruptingAnyByteOfTheRegistrationNeverCrashes() throws {
        // Not a fuzzer, but every single-byte change to every position of the vector, with a few values each,
        // must either decode or throw.
        let bytes = try Fixtures.bytes("apple-posix-registration.bin")
        var decoded = 0
        for index in bytes.indices {
            for value: UInt8 in [0x00, 0x01, 0x3F, 0x40, 0x7F, 0xC0, 0xFF, bytes[index] ^ 0x80] {
                var copy = bytes
                copy[index] = value
                if let message = try? DNSMessage(decoding: copy) {
                    decoded += 1
                    // Whatever decodes must re-encode to something that decodes to the same value.
                    #expect(try DNSMessage(decoding: message.encoded()) == message)
                }
            }
        }
        #expect(decoded > 0)
    }
}

@Suite("Fuzzing dictionary")
struct FuzzDictionaryTests {
    /// libFuzzer dictionary lines: `"token"` with `\xNN` escapes, or comments.
    static func parse(_ text: String) throws -> [[UInt8]] {
        try text.split(separator: "\n").compactMap { line -> [UInt8]? in
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty || trimmed.hasPrefix("#") { return nil }
            guard let open = trimmed.firstIndex(of: "\""), let close = trimmed.lastIndex(of: "\""), open < close else {
                throw Fixtures.FixtureError.badPcap("not a dictionary line: \(trimmed)")
            }
            var bytes: [UInt8] = []
            var chars = Array(trimmed[trimmed.index(after: open)..<close].utf8)[...]
            while let c = chars.popFirst() {
                if c == UInt8(ascii: "\\"), chars.first == UInt8(ascii: "x"), chars.count >= 3 {
                    chars.removeFirst()
                    bytes.append(UInt8(String(decoding: chars.prefix(2), as: UTF8.self), radix: 16)!)
                    chars.removeFirst(2)
                } else if c == UInt8(ascii: "\\"), let next = chars.popFirst() {
                    bytes.append(next)
                } else {
                    bytes.append(c)
                }
            }
            return bytes
        }
    }

    @Test func mdnsDictionaryParses() throws {
        let tokens = try Self.parse(String(decoding: try Fixtures.bytes("mdns.dict"), as: UTF8.self))
        #expect(tokens.count == 6)
        // Among them the mDNS TTL byte pattern and the cache-flush class 0x8001.
        #expect(tokens.contains([0x80, 0x01]))
    }
}
