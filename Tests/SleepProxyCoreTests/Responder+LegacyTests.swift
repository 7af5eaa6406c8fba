import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

extension ResponderTests {
    @Test func legacyAnswersAreReusedOnlyWhileWhatTheyCameFromHolds() throws {
        var h = H()
        h.register(Lab.registration())
        _ = h.run(for: .seconds(10))
        func ask(_ name: DNSName, _ type: DNSRecordType, id: UInt16, edns: UInt16? = nil) -> MDNSTransmission? {
            let additionals = edns.map { [DNSResourceRecord.opt(EDNSHeader(udpPayloadSize: $0), options: [])] } ?? []
            return H.transmissions(
                h.receive(
                    DNSMessage(id: id, questions: [DNSQuestion(name: name, type: type)], additionals: additionals),
                    port: 40000)
            ).first
        }
        let first = try #require(ask("vm.local.", .a, id: 1))
        let again = try #require(ask("vm.local.", .a, id: 2))
        #expect(h.responder.legacyCache.count == 1)
        // The reused reply is the same packet with the new ID, and decodes to it.
        #expect(Array(again.bytes.dropFirst(2)) == Array(first.bytes.dropFirst(2)) && again.bytes.prefix(2) == [0, 2])
        #expect(try DNSMessage(decoding: again.bytes) == again.message && again.message.id == 2)
        // The question is echoed in the querier's own case, never the cached one's.
        let shouted = try #require(ask("VM.local.", .a, id: 3))
        #expect(shouted.message.questions.first?.name.storage == DNSName("VM.local.").storage)
        #expect(try DNSMessage(decoding: shouted.bytes).questions.first?.name.storage == DNSName("VM.local.").storage)
        // A different payload size is another entry.
        _ = try #require(ask("vm.local.", .a, id: 4, edns: 1232))
        #expect(h.responder.legacyCache.count == 2)
        // A renumbered host: the next answer carries the new address, not the cached one.
        h.register(Lab.registration(sequence: 1, addresses: [IPAddress("192.0.2.9")!, Lab.hostV6]))
        let renumbered = try #require(ask("vm.local.", .a, id: 5))
        #expect(renumbered.message.answers.map(\.rdata) == [.a(ARecord(address: IPv4Address(192, 0, 2, 9)))])
        // A host that went away is not answered from the cache.
        let taken = h.registrar.remove(OwnerKey(interface: "eth0", primaryMAC: Lab.hostMAC))
        h.responder.removed(try #require(taken), farewell: false, now: h.now)
        #expect(ask("vm.local.", .a, id: 6) == nil)
        // The proxy's own records: a rename changes the answer at once.
        let ownHost = try #require(OwnAdvertisement.hostName(h.responder.configuration.hostLabel))
        #expect(ask(ownHost, .a, id: 7) != nil)
        _ = h.responder.rename(conflictingName: ownHost, now: h.now)
        #expect(ask(ownHost, .a, id: 8) == nil, "the old name is no longer ours")
    }

    @Test func legacyAnswerCacheIsBoundedInEntries() throws {
        var h = H()
        h.register(Lab.registration())
        _ = h.run(for: .seconds(10))
        // Each payload size is its own entry; at the bound, the next insertion starts the cache again.
        let sizes = (0..<MDNSRules.maximumCachedLegacyAnswers).map { 600 + $0 }
        for (n, size) in sizes.enumerated() {
            let query = DNSMessage(
                id: UInt16(n & 0xFFFF), questions: [DNSQuestion(name: "vm.local.", type: .a)],
                additionals: [.opt(EDNSHeader(udpPayloadSize: UInt16(size)), options: [])])
            #expect(!H.transmissions(h.receive(query, port: 40000)).isEmpty)
        }
        #expect(h.responder.legacyCache.count == MDNSRules.maximumCachedLegacyAnswers)
        let oneMore = DNSMessage(
            questions: [DNSQuestion(name: "vm.local.", type: .a)],
            additionals: [.opt(EDNSHeader(udpPayloadSize: 8000), options: [])])
        #expect(!H.transmissions(h.receive(oneMore, port: 40000)).isEmpty)
        #expect(h.responder.legacyCache.count == 1)
    }

    @Test func legacyAnswerCacheIsBoundedInBytes() throws {
        var h = H()
        // A 7,500-byte TXT record: each reply for it is about 7.5 KB, so the byte bound comes long before the count.
        let txt = DNSResourceRecord(
            name: "big.local.", ttl: 4500,
            rdata: .txt(try TXTRecord(strings: (0..<30).map { _ in Array(repeating: 0x61, count: 249) })))
        h.register(Lab.registration(extra: [txt]))
        _ = h.run(for: .seconds(10))
        func ask(size: Int) -> Int {
            let query = DNSMessage(
                questions: [DNSQuestion(name: "big.local.", type: .txt)],
                additionals: [.opt(EDNSHeader(udpPayloadSize: UInt16(size)), options: [])])
            return H.transmissions(h.receive(query, port: 40000)).first?.bytes.count ?? 0
        }
        var size = 8000
        let replyLength = ask(size: size)
        #expect(replyLength > 7000)
        while h.responder.legacyCache.byteCount + replyLength <= MDNSRules.maximumCachedLegacyBytes {
            size += 1
            #expect(ask(size: size) == replyLength)
        }
        let full = h.responder.legacyCache.count
        #expect(full == MDNSRules.maximumCachedLegacyBytes / replyLength)
        size += 1
        #expect(ask(size: size) == replyLength)
        #expect(h.responder.legacyCache.count == 1, "one more reply would pass the byte bound: the cache starts again")
    }

    @Test func knownAnswersWithHalfTheTTLSuppress() throws {
        var h = H()
        h.register(Lab.registration())
        _ = h.run(for: .seconds(10))
        let srv = try #require(
            h.registrar.store.records(named: Self.http, on: "eth0").first { $0.1.record.type == .srv }?.1.record)
        var known = srv
        known.ttl = 2250
        _ = h.receive(DNSMessage(questions: [DNSQuestion(name: Self.http, type: .srv)], answers: [known]))
        #expect(H.transmissions(h.run(for: .seconds(1))).isEmpty)
        known.ttl = 2249
        _ = h.receive(DNSMessage(questions: [DNSQuestion(name: Self.http, type: .srv)], answers: [known]))
        #expect(H.transmissions(h.run(for: .seconds(1))).count == 1)
    }

    @Test func truncatedQueryWaitsForItsKnownAnswers() throws {
        var h = H()
        h.register(Lab.registration())
        h.register(
            Lab.registration(
                id: 9, mac: MACAddress("02:53:50:00:00:03")!, host: "other.local.",
                addresses: [IPAddress("192.0.2.3")!], services: [("Other._http._tcp", 80)]))
        _ = h.run(for: .seconds(10))
        var first = DNSMessage(questions: [DNSQuestion(name: "_http._tcp.local.", type: .ptr)])
        first.flags.isTruncated = true
        _ = h.receive(first)
        #expect(H.transmissions(h.run(for: .milliseconds(300))).isEmpty)
        // The continuation lists one of the two instances as known.
        let known = DNSResourceRecord(name: "_http._tcp.local.", ttl: 4500, rdata: .ptr(PTRRecord(target: Self.http)))
        _ = h.receive(DNSMessage(answers: [known]))
        let start = h.now - .milliseconds(300)
        let sent = H.transmissions(h.run(for: .seconds(1)))
        let response = try #require(sent.first)
        #expect(response.0 - start >= .milliseconds(400) && response.0 - start <= .milliseconds(500))
        #expect(response.1.message.answers.map(\.rdata) == [.ptr(PTRRecord(target: "Other._http._tcp.local."))])
    }

    @Test func aRecordIsMulticastAtMostOncePerSecond() throws {
        var h = H()
        h.register(Lab.registration())
        _ = h.run(for: .seconds(10))
        let query = DNSMessage(questions: [DNSQuestion(name: Self.http, type: .srv)])
        _ = h.receive(query)
        let first = H.transmissions(h.run(for: .milliseconds(200)))
        _ = h.receive(query)
        let second = H.transmissions(h.run(for: .seconds(2)))
        #expect(first.count == 1 && second.count == 1)
        #expect(second[0].0 - first[0].0 >= .seconds(1))
    }

    /// RFC 6762 §6.2 counts the second from when a record was multicast: the I/O layer sends a pass's mDNS after the
    /// pass's work and says when (`multicastSent(at:)`), and the record's next multicast waits a second from then.
    /// Counted from the pass's time, two answers a busy pass apart left 0.987 s apart (docs/busy-lan.md).
    @Test func theSecondCountsFromWhenTheRecordLeft() throws {
        var h = H()
        h.register(Lab.registration())
        _ = h.run(for: .seconds(10))
        let query = DNSMessage(questions: [DNSQuestion(name: Self.http, type: .srv)])
        _ = h.receive(query)
        let first = H.transmissions(h.run(for: .milliseconds(200)))
        #expect(first.count == 1)
        let left = first[0].0 + .milliseconds(40)
        h.responder.multicastSent(at: left)
        _ = h.receive(query)
        let second = H.transmissions(h.run(for: .seconds(2)))
        #expect(second.count == 1)
        #expect(second.first.map { $0.0 - left >= .seconds(1) } == true, "a second from when the first left")
        #expect(second.first.map { $0.0 - left } == .seconds(1), "and not later")
    }

    /// The stamps waiting for the I/O layer's word are bounded (`Responder.stampsAwaitingSend`): at the bound every
    /// one moves to the time of sending, one past it stays at its pass's time.
    @Test func stampsAwaitingTheirSendAreBounded() throws {
        var h = H()
        let bound = Responder.stampsAwaitingSend
        let channel = Responder.Channel(interfaceIndex: Lab.eth0.index, family: .v4)
        let keys = (0...bound).map { n in
            Responder.MulticastKey(
                channel: channel, name: try! DNSName(parsing: "r\(n).local."),
                rdata: .a(ARecord(address: IPv4Address(rawValue: 0xC000_0200 &+ UInt32(n)))))
        }
        let before = h.responder.stampedSinceSent.count
        for key in keys[..<(bound - before)] { h.responder.stamp(key, now: h.now) }
        #expect(h.responder.stampedSinceSent.count == bound)
        h.responder.stamp(keys[bound], now: h.now)
        #expect(h.responder.stampedSinceSent.count == bound, "one past the bound is not kept")
        let left = h.now + .milliseconds(30)
        h.responder.multicastSent(at: left)
        #expect(h.responder.lastMulticast[keys[bound - before - 1]] == left)
        #expect(h.responder.lastMulticast[keys[bound]] == h.now)
        #expect(h.responder.stampedSinceSent.isEmpty)
    }

    @Test func largeResponsesSplitAcrossPackets() throws {
        var h = H()
        let bigTXT = try TXTRecord(strings: (0..<2).map { _ in Array(repeating: UInt8(ascii: "x"), count: 215) })
        var services: [(String, UInt16)] = []
        for n in 0..<12 { services.append(("Service \(n)._http._tcp", UInt16(8000 + n))) }
        var message = Lab.registration(services: services)
        message.authorities = message.authorities.map { record in
            guard record.type == .txt else { return record }
            var copy = record
            copy.rdata = .txt(bigTXT)
            return copy
        }
        h.register(message)
        _ = h.run(for: .seconds(10))
        let questions = services.map { DNSQuestion(name: try! DNSName(parsing: $0.0 + ".local."), type: .txt) }
        _ = h.receive(DNSMessage(questions: questions))
        let sent = H.transmissions(h.run(for: .seconds(1)))
        #expect(sent.count > 1)
        #expect(sent.allSatisfy { $0.1.bytes.count <= MDNSRules.maximumResponsePayload })
        #expect(sent.reduce(0) { $0 + $1.1.message.answers.count } == 12)
    }

    @Test func legacyQueryWithHundredsOfQuestionsGetsOneTruncatedReply() throws {
        var h = H()
        var services: [(String, UInt16)] = []
        for n in 0..<40 { services.append(("Service \(n)._http._tcp", UInt16(8000 + n))) }
        h.register(Lab.registration(services: services))
        _ = h.run(for: .seconds(10))
        let questions = (0..<300).map {
            DNSQuestion(name: try! DNSName(labels: ["Service \($0 % 40)", "_http", "_tcp", "local"]), type: .any)
        }
        let sent = H.transmissions(h.receive(DNSMessage(id: 3, questions: questions), port: 40000))
        #expect(sent.count == 1)
        let reply = try #require(sent.first)
        // No EDNS in the query: 512 bytes plus the echoed questions, which alone exceed it; no answer fits.
        #expect(
            reply.message.flags.isTruncated && reply.message.answers.isEmpty && reply.message.questions.count == 300)
        let few = H.transmissions(h.receive(DNSMessage(id: 4, questions: Array(questions.prefix(12))), port: 40000))
        let small = try #require(few.first)
        #expect(small.bytes.count <= MDNSRules.legacyPayloadWithoutEDNS)
        #expect(small.message.flags.isTruncated && !small.message.answers.isEmpty && small.message.additionals.isEmpty)
    }

    @Test func heldKnownAnswersAreBoundedInBytes() throws {
        var h = H()
        h.register(Lab.registration())
        _ = h.run(for: .seconds(10))
        var first = DNSMessage(questions: [DNSQuestion(name: "_http._tcp.local.", type: .ptr)])
        first.flags.isTruncated = true
        _ = h.receive(first)
        let bulky = DNSResourceRecord(
            name: "x.local.", ttl: 4500,
            rdata: .txt(try TXTRecord(strings: (0..<30).map { _ in Array(repeating: 0x61, count: 250) })))
        var continuation = DNSMessage(answers: [bulky])
        continuation.flags.isTruncated = true
        let size = continuation.encoded().count
        for _ in 0..<(MDNSRules.maximumHeldBytes / size + 20) { _ = h.receive(continuation) }
        #expect(h.responder.heldBytes <= MDNSRules.maximumHeldBytes)
        #expect(h.responder.heldBytes > MDNSRules.maximumHeldBytes - size)
        // The query is still answered, and its bytes are released.
        #expect(H.transmissions(h.run(for: .seconds(1))).count == 1)
        #expect(h.responder.heldBytes == 0 && h.responder.held.isEmpty)
    }
}
