import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

/// Drives the pure responder with explicit time and checks every packet it wants sent.
struct ResponderHarness {
    static let querierV4 = IPAddress("192.0.2.20")!
    static let querierV6 = IPAddress("fe80::20")!
    static let mdnsV4 = IPAddress.v4(.mdnsGroup)

    var registrar = Registrar(
        configuration: {
            var c = RegistrationConfiguration(); c.requireSourceAmongClaimedAddresses = false; return c
        }())
    var responder: Responder
    var now = Lab.t0

    init(established: Bool = true) {
        self.responder = Responder(
            configuration: ResponderConfiguration(
                instanceLabel: "20-40-10-65.0 Lab Proxy", hostLabel: "labproxy", registrationPort: 5599, seed: 7))
        _ = self.responder.setInterfaces([Lab.eth0], now: self.now)
        if established { _ = self.run(for: .seconds(5)) }
    }

    @discardableResult
    mutating func register(_ message: DNSMessage) -> Acceptance {
        let outcome = self.registrar.handle(
            datagram: message.encoded(options: .appleUpdate), from: Lab.hostV4, on: Lab.eth0, now: self.now)
        guard case .accepted(let acceptance) = outcome else { fatalError("not accepted: \(outcome)") }
        self.responder.registered(acceptance.registration, previous: acceptance.previous, now: self.now)
        return acceptance
    }

    mutating func receive(
        _ message: DNSMessage, from source: IPAddress = querierV4, port: UInt16 = 5353,
        to destination: IPAddress? = mdnsV4
    ) -> [ResponderAction] {
        self.responder.receive(
            message.encoded(), from: source, port: port, destination: destination, interfaceIndex: Lab.eth0.index,
            store: self.registrar.store, now: self.now)
    }

    /// Runs every timer due within `duration`, advancing `now` from deadline to deadline.
    mutating func run(for duration: Duration) -> [(Timestamp, ResponderAction)] {
        let end = self.now + duration
        var actions: [(Timestamp, ResponderAction)] = []
        while let deadline = self.responder.nextDeadline(), deadline <= end {
            self.now = max(self.now, deadline)
            actions += self.responder.tick(store: self.registrar.store, now: self.now).map { (self.now, $0) }
        }
        self.now = end
        return actions
    }

    static func transmissions(_ actions: [ResponderAction]) -> [MDNSTransmission] {
        actions.compactMap { if case .transmit(let t) = $0 { return t } else { return nil } }
    }

    static func transmissions(_ actions: [(Timestamp, ResponderAction)]) -> [(Timestamp, MDNSTransmission)] {
        actions.compactMap { if case .transmit(let t) = $0.1 { return ($0.0, t) } else { return nil } }
    }
}

@Suite("Responder")
struct ResponderTests {
    typealias H = ResponderHarness
    static let http: DNSName = "TestSvc._http._tcp.local."

    // MARK: The proxy's own advertisement

    @Test func ownServiceIsProbedThriceThenAnnouncedTwiceOnBothFamilies() throws {
        var h = H(established: false)
        let sent = H.transmissions(h.run(for: .seconds(5)))
        let probes = sent.filter { !$0.1.message.flags.isResponse }
        // RFC 6762 §8.1: three probes 250 ms apart, on IPv4 and IPv6, QU ANY, proposed records in authority.
        #expect(probes.count == 6)
        let probeTimes = Array(Set(probes.map(\.0))).sorted()
        #expect(
            probeTimes.count == 3 && probeTimes[1] - probeTimes[0] == .milliseconds(250)
                && probeTimes[2] - probeTimes[1] == .milliseconds(250))
        #expect(probeTimes[0] - Lab.t0 <= .milliseconds(250))
        let instance = OwnAdvertisement.instanceName("20-40-10-65.0 Lab Proxy")!
        let probe = probes[0].1.message
        #expect(probe.questions.allSatisfy { $0.type == .any && $0.unicastResponse })
        #expect(Set(probe.questions.map(\.name)) == [instance, "labproxy.local."])
        #expect(probe.authorities.contains { $0.type == .srv })

        let announcements = sent.filter { $0.1.message.flags.isResponse }
        #expect(announcements.count == 4)
        #expect(
            Set(announcements.map(\.1.destination)) == [
                .multicast(interfaceIndex: 2, family: .v4), .multicast(interfaceIndex: 2, family: .v6),
            ])
        let times = Array(Set(announcements.map(\.0))).sorted()
        #expect(times.count == 2 && times[1] - times[0] == .seconds(1))
        let records = announcements[0].1.message.answers
        #expect(
            records.contains {
                $0.name == "_sleep-proxy._udp.local." && $0.rdata == .ptr(PTRRecord(target: instance)) && !$0.cacheFlush
            })
        #expect(
            records.contains {
                $0.name == instance && $0.rdata == .srv(SRVRecord(port: 5599, target: "labproxy.local."))
                    && $0.cacheFlush
            })
        // docs/protocol.md §1.1: an empty TXT, RDATA 0x00.
        #expect(records.contains { $0.name == instance && $0.rdata.uncompressedBytes == [0] })
        #expect(records.contains { $0.rdata == .a(ARecord(address: IPv4Address(192, 0, 2, 1))) })
        #expect(
            records.contains {
                $0.name == "_services._dns-sd._udp.local."
                    && $0.rdata == .ptr(PTRRecord(target: "_sleep-proxy._udp.local."))
            })
        #expect(announcements[0].1.message.additionals.contains { $0.type == .nsec })
        #expect(h.responder.nextDeadline() == nil)
    }

    @Test func ownNameConflictWhileProbingRenamesInstanceOrHost() throws {
        var h = H(established: false)
        _ = h.run(for: .milliseconds(300))
        let rival = DNSResourceRecord(
            name: OwnAdvertisement.instanceName("20-40-10-65.0 Lab Proxy")!, cacheFlush: true, ttl: 120,
            rdata: .srv(SRVRecord(port: 1, target: "other.local.")))
        let actions = h.receive(
            DNSMessage(flags: DNSHeaderFlags(response: true, authoritative: true), answers: [rival]),
            from: IPAddress("192.0.2.30")!)
        #expect(actions.contains(.renamed(instanceLabel: "20-40-10-65.0 Lab Proxy (2)", hostLabel: "labproxy")))
        let host = DNSResourceRecord(
            name: "labproxy.local.", cacheFlush: true, ttl: 120, rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 30)))
        )
        let second = h.receive(
            DNSMessage(flags: DNSHeaderFlags(response: true, authoritative: true), answers: [host]),
            from: IPAddress("192.0.2.30")!)
        #expect(second.contains(.renamed(instanceLabel: "20-40-10-65.0 Lab Proxy (2)", hostLabel: "labproxy-2")))
        let sent = H.transmissions(h.run(for: .seconds(5)))
        #expect(
            sent.last?.1.message.answers.contains {
                $0.name == OwnAdvertisement.instanceName("20-40-10-65.0 Lab Proxy (2)")!
            } == true)
        // A host-name conflict carried in the additional section renames the host, not the instance.
        let hostInAdditional = DNSResourceRecord(
            name: "labproxy-2.local.", cacheFlush: true, ttl: 120,
            rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 31))))
        let third = h.receive(
            DNSMessage(flags: DNSHeaderFlags(response: true, authoritative: true), additionals: [hostInAdditional]),
            from: IPAddress("192.0.2.31")!)
        #expect(third == [.renamed(instanceLabel: "20-40-10-65.0 Lab Proxy (2)", hostLabel: "labproxy-3")])
        #expect(OwnAdvertisement.renamedInstance("X (9)") == "X (10)")
        #expect(OwnAdvertisement.renamedHost("box-2") == "box-3")
        #expect(OwnAdvertisement.renamedInstance(String(repeating: "a", count: 63)).utf8.count == 63)
    }

    @Test func simultaneousProbeTieBreakAndOwnEchoIgnored() throws {
        var h = H(established: false)
        var sent = H.transmissions(h.run(for: .milliseconds(260)))
        let ourProbe = try #require(sent.first?.1.message)
        // Our own probe looped back: identical, ignored, probing goes on 250 ms later.
        _ = h.receive(ourProbe, from: IPAddress("192.0.2.1")!)
        let next = H.transmissions(h.run(for: .milliseconds(250)))
        #expect(next.contains { !$0.1.message.flags.isResponse }, "our own echoed probe stopped the probing")
        // A rival whose SRV sorts later (higher port bytes) wins: we wait a second and probe again.
        var rival = ourProbe
        rival.authorities = rival.authorities.map { record in
            guard case .srv(var srv) = record.rdata else { return record }
            srv.port = 65000
            var copy = record
            copy.rdata = .srv(srv)
            return copy
        }
        _ = h.receive(rival, from: IPAddress("192.0.2.30")!)
        sent = H.transmissions(h.run(for: .milliseconds(900)))
        #expect(!sent.contains { $0.1.message.flags.isResponse }, "the loser must not announce")
        #expect(sent.isEmpty, "probing must pause for a second after losing: \(sent.map(\.0))")
        #expect(Responder.compareProbeSets(ourProbe.authorities, ourProbe.authorities) == .orderedSame)
        #expect(Responder.compareProbeSets(ourProbe.authorities, rival.authorities) == .orderedAscending)
    }

    // MARK: Answers for sleeping hosts

    @Test func sharedAnswersAreDelayedAndCarryAdditionals() throws {
        var h = H()
        h.register(Lab.registration())
        _ = h.run(for: .seconds(10))
        let query = DNSMessage(questions: [DNSQuestion(name: "_http._tcp.local.", type: .ptr)])
        #expect(H.transmissions(h.receive(query)).isEmpty)
        let start = h.now
        let sent = H.transmissions(h.run(for: .seconds(1)))
        let response = try #require(sent.first)
        #expect(response.0 - start >= .milliseconds(20) && response.0 - start <= .milliseconds(120))
        #expect(response.1.destination == .multicast(interfaceIndex: 2, family: .v4))
        #expect(response.1.message.answers.map(\.rdata) == [.ptr(PTRRecord(target: Self.http))])
        let additional = Set(response.1.message.additionals.map(\.type))
        #expect(additional.isSuperset(of: [.srv, .txt, .a, .aaaa]))
    }

    @Test func uniqueAnswersGoAtOnceAndQueriesForUnknownNamesAreSilent() throws {
        var h = H()
        h.register(Lab.registration())
        _ = h.run(for: .seconds(10))
        let sent = H.transmissions(h.receive(DNSMessage(questions: [DNSQuestion(name: "vm.local.", type: .a)])))
        #expect(sent.isEmpty)
        let now = H.transmissions(h.run(for: .zero))
        #expect(
            now.count == 1 && now[0].1.message.answers.map(\.rdata) == [.a(ARecord(address: IPv4Address(192, 0, 2, 2)))]
        )
        #expect(now[0].1.message.answers[0].cacheFlush)
        // RFC 6762 §6.1: the other family comes along as an additional record.
        #expect(now[0].1.message.additionals.contains { $0.type == .aaaa })
        _ = h.receive(DNSMessage(questions: [DNSQuestion(name: "nobody.local.", type: .a)]))
        #expect(H.transmissions(h.run(for: .seconds(2))).isEmpty)
    }

    @Test func nsecForMissingTypeAndAnyQuery() throws {
        var h = H()
        h.register(Lab.registration())
        _ = h.run(for: .seconds(10))
        _ = h.receive(DNSMessage(questions: [DNSQuestion(name: "vm.local.", type: .txt)]))
        let negative = try #require(H.transmissions(h.run(for: .seconds(1))).first?.1.message)
        #expect(negative.answers.isEmpty)
        let nsec = try #require(negative.additionals.first { $0.type == .nsec })
        guard case .nsec(let data) = nsec.rdata else { throw CancellationError() }
        #expect(Set(data.types) == [.a, .aaaa] && data.nextName == "vm.local." && nsec.cacheFlush)
        _ = h.run(for: .seconds(2))
        _ = h.receive(DNSMessage(questions: [DNSQuestion(name: Self.http, type: .any)]))
        let any = try #require(H.transmissions(h.run(for: .seconds(1))).first?.1.message)
        #expect(Set(any.answers.map(\.type)) == [.srv, .txt])
    }

    @Test func reverseLookupAndIdenticalRecordsOfTwoOwnersAnsweredOnce() throws {
        var h = H()
        h.register(Lab.registration())
        h.register(
            Lab.registration(
                id: 9, mac: MACAddress("02:53:50:00:00:03")!, host: "other.local.",
                addresses: [IPAddress("192.0.2.3")!], services: [("Other._http._tcp", 80)]))
        _ = h.run(for: .seconds(10))
        _ = h.receive(DNSMessage(questions: [DNSQuestion(name: "2.2.0.192.in-addr.arpa.", type: .ptr)]))
        let reverse = try #require(H.transmissions(h.run(for: .seconds(1))).first?.1.message)
        #expect(reverse.answers.map(\.rdata) == [.ptr(PTRRecord(target: "vm.local."))])
        _ = h.run(for: .seconds(2))
        _ = h.receive(DNSMessage(questions: [DNSQuestion(name: "_services._dns-sd._udp.local.", type: .ptr)]))
        let services = try #require(H.transmissions(h.run(for: .seconds(1))).first?.1.message)
        // Both hosts registered `_services._dns-sd._udp PTR _http._tcp`; the proxy adds `_sleep-proxy._udp`.
        #expect(
            services.answers.map(\.rdata).sorted { "\($0)" < "\($1)" }
                == [.ptr(PTRRecord(target: "_http._tcp.local.")), .ptr(PTRRecord(target: "_sleep-proxy._udp.local."))]
                .sorted { "\($0)" < "\($1)" })
    }

    @Test func quBitAnswersByUnicastOnlyWhenRecentlyMulticast() throws {
        var h = H()
        h.register(Lab.registration())
        // Announced just now: a QU question is answered by unicast to the querier's port 5353.
        _ = h.run(for: .seconds(3))
        let qu = DNSMessage(questions: [DNSQuestion(name: "vm.local.", type: .a, unicastResponse: true)])
        let unicast = H.transmissions(h.receive(qu))
        #expect(
            unicast.count == 1
                && unicast[0].destination == .unicast(address: H.querierV4, port: 5353, interfaceIndex: 2))
        #expect(unicast[0].message.id == 0 && unicast[0].message.questions.isEmpty)
        // A record not multicast within a quarter of its TTL (4500 s / 4) is multicast instead (RFC 6762 §5.4).
        _ = h.run(for: .seconds(1200))
        #expect(H.transmissions(h.receive(qu)).isEmpty)
        let multicast = H.transmissions(h.run(for: .zero))
        #expect(multicast.first?.1.destination == .multicast(interfaceIndex: 2, family: .v4))
    }

    @Test func legacyUnicastEchoesIDAndQuestionCapsTTLAndClearsCacheFlush() throws {
        var h = H()
        h.register(Lab.registration())
        _ = h.run(for: .seconds(10))
        let question = DNSQuestion(name: Self.http, type: .srv)
        let sent = H.transmissions(h.receive(DNSMessage(id: 0xBEEF, questions: [question]), port: 40000))
        let reply = try #require(sent.first)
        #expect(reply.destination == .unicast(address: H.querierV4, port: 40000, interfaceIndex: 2))
        #expect(reply.message.id == 0xBEEF && reply.message.questions == [question])
        #expect(reply.message.answers.count == 1 && reply.message.answers.allSatisfy { $0.ttl <= 10 && !$0.cacheFlush })
        #expect(reply.message.additionals.allSatisfy { $0.ttl <= 10 && !$0.cacheFlush })
        // Over IPv6 too, and a direct unicast query to port 5353 is answered by unicast.
        let v6 = H.transmissions(
            h.receive(
                DNSMessage(id: 1, questions: [question]), from: H.querierV6, port: 40001,
                to: IPAddress("fe80::53:50ff:fe00:1")!))
        #expect(v6.first?.destination == .unicast(address: H.querierV6, port: 40001, interfaceIndex: 2))
        let direct = H.transmissions(h.receive(DNSMessage(questions: [question]), to: IPAddress("192.0.2.1")!))
        #expect(direct.first?.destination == .unicast(address: H.querierV4, port: 5353, interfaceIndex: 2))
    }

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
