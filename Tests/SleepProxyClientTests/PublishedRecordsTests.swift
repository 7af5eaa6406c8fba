import Testing

@testable import SleepProxyClient
@testable import SleepProxyCore
@testable import SleepProxyWire

/// Picking a host's own records out of what its responder answered.
@Suite("Records a host publishes for itself")
struct PublishedRecordsTests {
    static let host = IPAddress("192.0.2.2")!
    static let hostV6 = IPAddress("2001:db8::2")!
    static let other = IPAddress("192.0.2.3")!
    static let instance: DNSName = "My Web Server._http._tcp.local."
    /// Many strings, a space, UTF-8, "=" inside a value, an empty string: in the host's wire order.
    static let txt = try! TXTRecord(strings: [
        Array("path=/index.html".utf8), Array("version=1.0".utf8), Array("note=a=b c".utf8), Array("name=Küche".utf8),
        [], Array("flag".utf8),
    ])

    static func response(_ records: [DNSResourceRecord], additionals: [DNSResourceRecord] = []) -> DNSMessage {
        DNSMessage(
            flags: DNSHeaderFlags(response: true, authoritative: true), answers: records, additionals: additionals)
    }

    /// What avahi-daemon multicasts for host `sleeper` with one web server, in its own order and TTLs.
    static var avahiAnswers: [DNSMessage] {
        [
            response([
                DNSResourceRecord(
                    name: "_services._dns-sd._udp.local.", ttl: 4500,
                    rdata: .ptr(PTRRecord(target: "_http._tcp.local.")))
            ]),
            response(
                [DNSResourceRecord(name: "_http._tcp.local.", ttl: 4500, rdata: .ptr(PTRRecord(target: instance)))],
                additionals: [
                    DNSResourceRecord(name: instance, cacheFlush: true, ttl: 4500, rdata: .txt(txt)),
                    DNSResourceRecord(
                        name: instance, cacheFlush: true, ttl: 120,
                        rdata: .srv(SRVRecord(port: 8080, target: "sleeper.local."))),
                    DNSResourceRecord(
                        name: "sleeper.local.", cacheFlush: true, ttl: 120,
                        rdata: .aaaa(AAAARecord(address: IPv6Address("2001:db8::2")!))),
                    DNSResourceRecord(
                        name: "sleeper.local.", cacheFlush: true, ttl: 120,
                        rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 2)))),
                    DNSResourceRecord(
                        name: instance, cacheFlush: true, ttl: 120,
                        rdata: .nsec(NSECRecord(nextName: instance, types: [.txt, .srv]))),
                ]),
            response([
                DNSResourceRecord(
                    name: ReverseMapping.name(for: host), cacheFlush: true, ttl: 120,
                    rdata: .ptr(PTRRecord(target: "sleeper.local."))),
                DNSResourceRecord(
                    name: ReverseMapping.name(for: hostV6), cacheFlush: true, ttl: 120,
                    rdata: .ptr(PTRRecord(target: "sleeper.local."))),
            ]),
        ]
    }

    @Test func theHostsOwnRecordsComeOutByteForByteInApplesOrder() throws {
        var published = PublishedRecords(addresses: [Self.host, Self.hostV6, IPAddress("fe80::2")!])
        for message in Self.avahiAnswers { published.add(message, from: Self.host) }
        #expect(published.hostNames == ["sleeper.local."])
        #expect(published.instances == [Self.instance])
        let records = published.registrationRecords
        #expect(records.map(\.type) == [.ptr, .ptr, .txt, .ptr, .ptr, .srv, .aaaa, .a])
        let txt = try #require(records.first { $0.type == .txt })
        #expect(txt.rdata == .txt(Self.txt) && txt.cacheFlush && txt.ttl == 4500)
        #expect(records.first { $0.type == .srv }?.ttl == 120)
        #expect(records.first { $0.name == "_http._tcp.local." }?.cacheFlush == false)
        #expect(!records.contains { $0.type == .nsec }, "NSECs are made on the fly, never registered")
        #expect(
            !records.contains { if case .aaaa(let a) = $0.rdata { return a.address.isLinkLocal } else { return false } }
        )
        // Re-encoded as part of an UPDATE, the TXT rdata is the host's, byte for byte.
        let decoded = try DNSMessage(decoding: DNSMessage(authorities: records).encoded())
        #expect(
            decoded.authorities.first { $0.type == .txt }?.rdata.uncompressedBytes
                == DNSRData.txt(Self.txt).uncompressedBytes)
    }

    @Test func otherHostsAndOtherSourcesAreLeftOut() throws {
        var published = PublishedRecords(addresses: [Self.host])
        for message in Self.avahiAnswers { published.add(message, from: Self.host) }
        // Another host's service answered from its own address, and the proxy speaking from its address.
        published.add(
            Self.response([
                DNSResourceRecord(
                    name: "_http._tcp.local.", ttl: 4500, rdata: .ptr(PTRRecord(target: "Other._http._tcp.local."))),
                DNSResourceRecord(
                    name: "Other._http._tcp.local.", cacheFlush: true, ttl: 120,
                    rdata: .srv(SRVRecord(port: 80, target: "other.local."))),
            ]), from: Self.other)
        // A query from the host is no answer; a goodbye is no record.
        published.add(DNSMessage(questions: [DNSQuestion(name: "_http._tcp.local.", type: .ptr)]), from: Self.host)
        published.add(
            Self.response([
                DNSResourceRecord(
                    name: "Gone._http._tcp.local.", cacheFlush: true, ttl: 0,
                    rdata: .srv(SRVRecord(port: 1, target: "sleeper.local.")))
            ]), from: Self.host)
        let names = Set(published.registrationRecords.map(\.name))
        #expect(!names.contains("Other._http._tcp.local.") && !names.contains("Gone._http._tcp.local."))
        #expect(
            !published.registrationRecords.contains {
                if case .ptr(let ptr) = $0.rdata {
                    return ptr.target == "Other._http._tcp.local."
                } else {
                    return false
                }
            })
    }

    @Test func nothingFromTheHostMeansNothingToRegister() {
        var published = PublishedRecords(addresses: [Self.host])
        for message in Self.avahiAnswers { published.add(message, from: Self.other) }
        #expect(published.registrationRecords.isEmpty && published.hostNames.isEmpty)
    }

    @Test func recordsAreBoundedAtTheLimitAndOneMore() {
        func flood(_ count: Int) -> Int {
            var published = PublishedRecords(addresses: [Self.host])
            let records = (0..<count).map {
                DNSResourceRecord(
                    name: try! DNSName(parsing: "r\($0).sleeper.local."), ttl: 120,
                    rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 9))))
            }
            published.add(Self.response(records), from: Self.host)
            return published.storedCount
        }
        #expect(flood(PublishedRecords.maximumRecords) == PublishedRecords.maximumRecords)
        #expect(flood(PublishedRecords.maximumRecords + 1) == PublishedRecords.maximumRecords)
    }
}
