import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

extension ResponderTests {
    // MARK: Announcements, goodbyes, hand-back, conflicts

    @Test func newRecordsAreAnnouncedTwiceAndRetransmissionsAreNot() throws {
        var h = H()
        h.register(Lab.registration())
        let sent = H.transmissions(h.run(for: .seconds(5))).filter {
            $0.1.destination == .multicast(interfaceIndex: 2, family: .v4)
        }
        let shared = sent.filter { $0.1.message.answers.contains { $0.type == .ptr } }
        let unique = sent.filter { $0.1.message.answers.contains { $0.type == .srv } }
        #expect(shared.count == 2 && unique.count == 2)
        #expect(shared[0].0 == Lab.t0 + .seconds(5) && shared[1].0 - shared[0].0 == .seconds(1))
        #expect(unique[0].0 - shared[0].0 == .milliseconds(900))
        // Reverse-mapping PTRs are never announced (docs/protocol.md §4.2).
        #expect(!sent.contains { $0.1.message.answers.contains { ReverseMapping.address(from: $0.name) != nil } })
        #expect(unique[0].1.message.additionals.contains { $0.type == .nsec })
        h.register(Lab.registration())
        #expect(H.transmissions(h.run(for: .seconds(5))).isEmpty)
    }

    @Test func expiryGoodbyesSpareRecordsOthersStillHold() throws {
        var h = H()
        let acceptance = h.register(Lab.registration())
        h.register(
            Lab.registration(
                id: 9, mac: MACAddress("02:53:50:00:00:03")!, host: "other.local.",
                addresses: [IPAddress("192.0.2.3")!], services: [("Other._http._tcp", 80)]))
        _ = h.run(for: .seconds(10))
        let taken = h.registrar.remove(acceptance.registration.key)
        let removed = try #require(taken)
        h.responder.removed(removed, farewell: true, now: h.now)
        let start = h.now
        let sent = H.transmissions(h.run(for: .seconds(10))).filter {
            $0.1.destination == .multicast(interfaceIndex: 2, family: .v4)
        }
        #expect(sent.map { $0.0 - start } == [.zero, .seconds(2), .seconds(4)])
        let records = sent[0].1.message.answers
        #expect(records.allSatisfy { $0.ttl == 0 })
        #expect(records.contains { $0.type == .srv } && records.contains { $0.name == "vm.local." })
        #expect(
            !records.contains { $0.name == "_services._dns-sd._udp.local." }, "the other host still registers this PTR")
    }

    @Test func differentDataForAUniqueRecordIsAConflictIdenticalIsNot() throws {
        var h = H()
        let acceptance = h.register(Lab.registration())
        _ = h.run(for: .seconds(10))
        let rival = IPAddress("192.0.2.30")!
        let identical = DNSResourceRecord(
            name: "vm.local.", cacheFlush: true, ttl: 120, rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 2))))
        #expect(h.receive(DNSMessage(flags: DNSHeaderFlags(response: true), answers: [identical]), from: rival).isEmpty)
        let shared = DNSResourceRecord(
            name: "_http._tcp.local.", ttl: 4500, rdata: .ptr(PTRRecord(target: "Theirs._http._tcp.local.")))
        #expect(h.receive(DNSMessage(flags: DNSHeaderFlags(response: true), answers: [shared]), from: rival).isEmpty)
        var different = identical
        different.rdata = .a(ARecord(address: IPv4Address(192, 0, 2, 30)))
        let actions = h.receive(DNSMessage(flags: DNSHeaderFlags(response: true), answers: [different]), from: rival)
        #expect(actions == [.conflict(acceptance.registration.key, record: different, from: rival)])
        // A goodbye claims nothing, and responses from ports other than 5353 are not mDNS (RFC 6762 §6).
        different.ttl = 0
        #expect(h.receive(DNSMessage(flags: DNSHeaderFlags(response: true), answers: [different]), from: rival).isEmpty)
        different.ttl = 120
        #expect(
            h.receive(DNSMessage(flags: DNSHeaderFlags(response: true), answers: [different]), from: rival, port: 1234)
                .isEmpty)
    }

    @Test func duplicateAnswerFromAnotherResponderCancelsOurs() throws {
        var h = H()
        h.register(Lab.registration())
        _ = h.run(for: .seconds(10))
        _ = h.receive(DNSMessage(questions: [DNSQuestion(name: "_http._tcp.local.", type: .ptr)]))
        let same = DNSResourceRecord(name: "_http._tcp.local.", ttl: 4500, rdata: .ptr(PTRRecord(target: Self.http)))
        _ = h.receive(
            DNSMessage(flags: DNSHeaderFlags(response: true), answers: [same]), from: IPAddress("192.0.2.30")!)
        #expect(H.transmissions(h.run(for: .seconds(1))).isEmpty)
    }

    @Test func hostileInputIsDroppedWithoutEffect() throws {
        var h = H()
        h.register(Lab.registration())
        _ = h.run(for: .seconds(10))
        let query = DNSMessage(questions: [DNSQuestion(name: "vm.local.", type: .a)])
        // Off-link source (RFC 6762 §11), unknown interface, garbage.
        #expect(h.receive(query, from: IPAddress("198.51.100.7")!).isEmpty)
        #expect(
            h.responder.receive(
                query.encoded(), from: H.querierV4, port: 5353, destination: H.mdnsV4, interfaceIndex: 99,
                store: h.registrar.store, now: h.now
            ).isEmpty)
        let bytes = query.encoded()
        for cut in 0..<bytes.count {
            _ = h.responder.receive(
                Array(bytes[0..<cut]), from: H.querierV4, port: 5353, destination: H.mdnsV4, interfaceIndex: 2,
                store: h.registrar.store, now: h.now)
        }
        #expect(h.responder.statistics.malformed == bytes.count)
        #expect(h.responder.statistics.offLink == 1)
        // A flood of TC queries from distinct sources holds at most the bound.
        var truncated = query
        truncated.flags.isTruncated = true
        for n in 0..<(MDNSRules.maximumHeldQueries + 10) {
            _ = h.receive(
                truncated, from: .v6(IPv6Address(high: 0xFE80 << 48, low: UInt64(n + 100))), to: .v6(.mdnsGroup))
        }
        #expect(h.responder.held.count == MDNSRules.maximumHeldQueries)
    }
}
