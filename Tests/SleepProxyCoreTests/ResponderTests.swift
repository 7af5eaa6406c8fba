import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

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
}
