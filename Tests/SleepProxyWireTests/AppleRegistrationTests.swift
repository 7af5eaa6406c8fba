import NIOCore
import Testing

@testable import SleepProxyWire

/// The real registration sent by Apple's mDNSResponder core (POSIX build) before sleeping; see
/// Fixtures/PROVENANCE.md for what it holds.
@Suite("Apple registration vector")
struct AppleRegistrationTests {
    let bytes: [UInt8]
    let message: DNSMessage

    init() throws {
        self.bytes = try Fixtures.bytes("apple-posix-registration.bin")
        self.message = try DNSMessage(decoding: self.bytes)
    }

    @Test func headerIsAnUpdateWithoutZone() {
        #expect(self.bytes.count == 331)
        #expect(self.message.id == 0xDC65)
        #expect(self.message.flags.rawValue == 0x2800)
        #expect(self.message.flags.opcode == .update)
        #expect(!self.message.flags.isResponse)
        #expect(self.message.zone.isEmpty)
        #expect(self.message.prerequisites.isEmpty)
        #expect(self.message.updates.count == 8)
        #expect(self.message.additionals.count == 1)
    }

    @Test func updateSectionHoldsExactlyTheDocumentedRecords() throws {
        let host: DNSName = "vm.local."
        let instance: DNSName = "TestSvc._http._tcp.local."
        let expected: [DNSResourceRecord] = [
            DNSResourceRecord(
                name: "2.2.0.192.in-addr.arpa.", cacheFlush: true, ttl: 4500, rdata: .ptr(PTRRecord(target: host))),
            DNSResourceRecord(
                name: "2.0.0.0.0.0.E.F.F.F.0.5.3.5.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.8.E.F.ip6.arpa.",
                cacheFlush: true, ttl: 4500, rdata: .ptr(PTRRecord(target: host))),
            DNSResourceRecord(name: instance, cacheFlush: true, ttl: 4500, rdata: .txt(try TXTRecord(["path=/x"]))),
            DNSResourceRecord(
                name: "_services._dns-sd._udp.local.", ttl: 4500, rdata: .ptr(PTRRecord(target: "_http._tcp.local."))),
            DNSResourceRecord(name: "_http._tcp.local.", ttl: 4500, rdata: .ptr(PTRRecord(target: instance))),
            DNSResourceRecord(
                name: instance, cacheFlush: true, ttl: 4500, rdata: .srv(SRVRecord(port: 8080, target: host))),
            DNSResourceRecord(
                name: host, cacheFlush: true, ttl: 4500, rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 2)))),
            DNSResourceRecord(
                name: host, cacheFlush: true, ttl: 4500,
                rdata: .aaaa(AAAARecord(address: IPv6Address("fe80::53:50ff:fe00:2")!))),
        ]
        #expect(self.message.updates == expected)
        // Reverse-mapping nibbles are upper case on the wire and must stay so.
        #expect(self.message.updates[1].name.labelStrings[6] == "E")
    }

    @Test func optCarriesLeaseAndOwnerWithAppleZBits() throws {
        let opt = try #require(self.message.opt)
        #expect(opt.name.isRoot)
        let header = try #require(opt.ednsHeader)
        #expect(header.udpPayloadSize == 1440)
        #expect(header.version == 0)
        #expect(header.extendedRCode == 0)
        #expect(!header.dnssecOK)
        #expect(header.z == 0x1194)
        let options = try #require(self.message.ednsOptions)
        #expect(options.updateLease == UpdateLeaseOption(lease: 7200))
        #expect(options.owner == OwnerOption(sequence: 0, primaryMAC: MACAddress("02:53:50:00:00:02")!))
        #expect(options.owner?.effectiveWakeMAC == MACAddress("02:53:50:00:00:02"))
    }

    @Test func reencodesToAnEqualMessageOfTheSameSize() throws {
        let encoded = self.message.encoded(options: .appleUpdate)
        #expect(encoded.count == self.bytes.count)
        #expect(try DNSMessage(decoding: encoded) == self.message)
        // SRV targets stay uncompressed in Apple's form: the target's bytes appear literally after the port.
        let srvTarget: [UInt8] = [0x1F, 0x90, 2] + Array("vm".utf8) + [5] + Array("local".utf8) + [0]
        #expect(encoded.firstRange(of: srvTarget) != nil)
    }

    @Test func everyTruncationThrowsTruncatedOrCount() {
        for length in 0..<self.bytes.count {
            #expect(throws: WireError.self) { try DNSMessage(decoding: Array(self.bytes[..<length])) }
        }
    }
}
