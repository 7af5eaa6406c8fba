import NIOCore
import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

/// Adoption (docs/adoption.md): what an adopted host's own frames teach, how it is found asleep without being
/// fought, and how it is let go when it shows itself.
@Suite("Adoption: hosts kept present by MAC")
struct AdoptionTests {
    typealias H = EngineHarness
    static let mac = MACAddress("02:53:50:00:00:30")!
    static let other = MACAddress("02:53:50:00:00:31")!
    static let v4 = IPAddress("192.0.2.30")!
    static let v6 = IPAddress("fe80::53:50ff:fe00:30")!
    static let name: DNSName = "pc.local."
    static let instance: DNSName = "PC._smb._tcp.local."
    static let type: DNSName = "_smb._tcp.local."

    /// What the host's responder announces: its address, a service with TXT strings in its own order, the
    /// service type; cache-flush on its unique records, TTLs as avahi gives them.
    static func announcement(txt: [[UInt8]] = [Array("b=2".utf8), Array("a=1".utf8)], address: IPv4Address? = nil)
        -> DNSMessage
    {
        DNSMessage(
            flags: DNSHeaderFlags(response: true, authoritative: true),
            answers: [
                DNSResourceRecord(
                    name: name, cacheFlush: true, ttl: 120,
                    rdata: .a(ARecord(address: address ?? IPv4Address(192, 0, 2, 30)))),
                DNSResourceRecord(name: type, ttl: 4500, rdata: .ptr(PTRRecord(target: instance))),
                DNSResourceRecord(
                    name: instance, cacheFlush: true, ttl: 120,
                    rdata: .srv(SRVRecord(priority: 0, weight: 0, port: 445, target: name))),
                DNSResourceRecord(
                    name: instance, cacheFlush: true, ttl: 4500, rdata: .txt(TXTRecord(uncheckedStrings: txt))),
                DNSResourceRecord(name: Adoption.servicesName, ttl: 4500, rdata: .ptr(PTRRecord(target: type))),
            ])
    }

    /// An mDNS datagram from `mac` at `source`, to the group.
    static func mdnsFrame(_ message: DNSMessage, from mac: MACAddress = mac, source: IPAddress = v4) -> [UInt8] {
        TestFrames.udp(
            from: mac, to: MACAddress("01:00:5e:00:00:fb")!, source: source, destination: .v4(.mdnsGroup),
            sourcePort: 5353, port: 5353, payload: message.encoded(options: .mdns))
    }

    /// A harness with `mac` adopted.
    static func adopted() throws -> H {
        var h = H()
        h.record(try h.engine.setAdopted([mac], now: h.now))
        return h
    }

    /// `registrations` encoded as the journal (and the learned hosts' file) keep them, and read back.
    static func throughJournal(_ registrations: [OwnerRegistration], now: Timestamp) -> [OwnerRegistration] {
        let timeBase = TimeBase(bootID: Array(repeating: 7, count: 16), now: now, wallNanoseconds: 1_000_000_000_000)
        let bytes = registrations.flatMap { RegistrationJournal.encode(.put($0), timeBase: timeBase) }
        return RegistrationJournal.replay(bytes, timeBase: timeBase).registrations
    }

    static func learned(_ h: H) -> [DNSResourceRecord] {
        h.engine.adoption.hosts[mac]?.records.map(\.record) ?? []
    }

    // MARK: - Learning

    @Test func recordsAreLearnedExactlyAsTheHostSentThemAndOnlyFromItsOwnMAC() throws {
        var h = try Self.adopted()
        // Someone else sends the same response from the host's address: nothing is learned.
        h.frame(Self.mdnsFrame(Self.announcement(), from: Self.other))
        #expect(Self.learned(h).isEmpty)
        h.frame(Self.mdnsFrame(Self.announcement()))
        #expect(Self.learned(h) == Self.announcement().answers)
        #expect(h.engine.adoption.hosts[Self.mac]?.addresses == [Self.v4])
        #expect(h.engine.adoption.hosts[Self.mac]?.hostName == Self.name)
        // A goodbye (TTL 0) for a cache-flush record it replaced drops exactly that record once the host goes on
        // talking (a goodbye followed by silence is a sleep's: AdoptionWatchTests).
        var goodbye = Self.announcement()
        goodbye.answers = [
            DNSResourceRecord(
                name: Self.instance, cacheFlush: true, ttl: 0,
                rdata: .txt(TXTRecord(uncheckedStrings: [Array("b=2".utf8), Array("a=1".utf8)])))
        ]
        h.frame(Self.mdnsFrame(goodbye))
        #expect(Self.learned(h).count == 5)
        h.now = h.now + .seconds(2)
        // A word of its own (a NetBIOS broadcast; a neighbour lookup would not do: AdoptionWatchTests).
        h.frame(
            TestFrames.udp(
                from: Self.mac, to: .broadcast, source: Self.v4, destination: IPAddress("192.0.2.255")!,
                sourcePort: 137, port: 137))
        #expect(!Self.learned(h).contains { $0.type == .txt })
        #expect(Self.learned(h).count == 4)
    }

    @Test func aCacheFlushRecordReplacesOlderDataOfItsNameAndTypeOnly() throws {
        var h = try Self.adopted()
        h.frame(Self.mdnsFrame(Self.announcement()))
        // Within a second: another address of the same name is part of the same announcement (RFC 6762 §10.2).
        h.now = h.now + .milliseconds(500)
        h.frame(Self.mdnsFrame(Self.announcement(address: IPv4Address(192, 0, 2, 31))))
        #expect(Self.learned(h).filter { $0.type == .a }.count == 2)
        // Later: the new data replaces the old.
        h.now = h.now + .seconds(3)
        h.frame(Self.mdnsFrame(Self.announcement(address: IPv4Address(192, 0, 2, 32))))
        #expect(
            Self.learned(h).filter { $0.type == .a }.map(\.rdata) == [.a(ARecord(address: IPv4Address(192, 0, 2, 32)))])
        // TXT strings keep the host's order; the SRV and TXT of the instance are untouched.
        #expect(
            Self.learned(h).contains {
                $0.rdata == .txt(TXTRecord(uncheckedStrings: [Array("b=2".utf8), Array("a=1".utf8)]))
            })
    }

    @Test func boundsHoldAtTheirLimitAndRefuseOneMore() throws {
        var h = try Self.adopted()
        let limit = AdoptionRules.maximumRecords
        func txts(_ range: Range<Int>) -> DNSMessage {
            DNSMessage(
                flags: DNSHeaderFlags(response: true, authoritative: true),
                answers: range.map {
                    DNSResourceRecord(
                        name: "x.local.", ttl: 120, rdata: .txt(TXTRecord(uncheckedStrings: [Array("\($0)".utf8)])))
                })
        }
        for start in stride(from: 0, to: limit, by: 50) { h.frame(Self.mdnsFrame(txts(start..<start + 50))) }
        #expect(Self.learned(h).count == limit)
        h.frame(Self.mdnsFrame(txts(limit..<limit + 1)))
        #expect(Self.learned(h).count == limit)
        #expect(h.engine.adoption.hosts[Self.mac]?.refused == 1)
        // Addresses: the newest eight; of IPv4 addresses the newest alone (DHCP may give the old one to another).
        for n in 0...AdoptionRules.maximumAddresses {
            h.frame(
                TestFrames.udp(
                    from: Self.mac, to: .broadcast, source: IPAddress("2001:db8::\(100 + n)")!,
                    destination: IPAddress("ff02::1")!, sourcePort: 5000, port: 5000))
        }
        let addresses = h.engine.adoption.hosts[Self.mac]?.addresses ?? []
        #expect(addresses.count == AdoptionRules.maximumAddresses)
        #expect(addresses.first == IPAddress("2001:db8::\(100 + AdoptionRules.maximumAddresses)"))
        for n in 0...AdoptionRules.maximumIPv4Addresses {
            h.frame(TestFrames.arpAnnouncement(from: Self.mac, for: IPv4Address(192, 0, 2, UInt8(100 + n))))
        }
        let v4 = (h.engine.adoption.hosts[Self.mac]?.addresses ?? []).filter {
            if case .v4 = $0 { true } else { false }
        }
        #expect(v4 == [IPAddress("192.0.2.\(100 + AdoptionRules.maximumIPv4Addresses)")!])
        // Adopted hosts: the limit, and one more refused with nothing changed.
        let macs = Set((0..<UInt64(AdoptionRules.maximumAdopted)).map { MACAddress(rawValue: 0x0253_5001_0000 + $0) })
        _ = try h.engine.setAdopted(macs, now: h.now)
        #expect(h.engine.adoptedMACs.count == AdoptionRules.maximumAdopted)
        #expect(throws: ProxyEngine.AdoptionError.tooMany(AdoptionRules.maximumAdopted + 1)) {
            try h.engine.setAdopted(macs.union([Self.mac]), now: h.now)
        }
        #expect(Set(h.engine.adoptedMACs) == macs)
    }

    /// RFC 6762 §6 lets a responder multicast a record once a second: more than `maximumLearnedPerSecond`
    /// responses in a second are a flood (a forged MAC), and only that many are learned; all still show it awake.
    @Test func responsesLearnedASecondAreBounded() throws {
        var h = try Self.adopted()
        func txt(_ n: Int) -> DNSMessage {
            DNSMessage(
                flags: DNSHeaderFlags(response: true, authoritative: true),
                answers: [
                    DNSResourceRecord(
                        name: "x.local.", ttl: 120, rdata: .txt(TXTRecord(uncheckedStrings: [Array("\(n)".utf8)])))
                ])
        }
        for n in 0...AdoptionRules.maximumLearnedPerSecond { h.frame(Self.mdnsFrame(txt(n))) }
        #expect(Self.learned(h).count == AdoptionRules.maximumLearnedPerSecond)
        #expect(h.engine.adoption.hosts[Self.mac]?.lastSignOfLife == h.now)
        h.now = h.now + .seconds(1)
        h.frame(Self.mdnsFrame(txt(99)))
        #expect(Self.learned(h).count == AdoptionRules.maximumLearnedPerSecond + 1)
    }

    @Test func recordBytesAreBoundedPerHost() throws {
        var h = try Self.adopted()
        // TXT records of about 1 KB: the 64 KiB bound is reached well before the record count.
        let big = [UInt8](repeating: 0x61, count: 250)
        for n in 0..<80 {
            h.now = h.now + .milliseconds(200)
            h.frame(
                Self.mdnsFrame(
                    DNSMessage(
                        flags: DNSHeaderFlags(response: true, authoritative: true),
                        answers: [
                            DNSResourceRecord(
                                name: try DNSName(parsing: "t\(n).local."), ttl: 120,
                                rdata: .txt(TXTRecord(uncheckedStrings: [big, big, big, big])))
                        ])))
        }
        let host = try #require(h.engine.adoption.hosts[Self.mac])
        #expect(host.recordBytes <= AdoptionRules.maximumRecordBytes)
        #expect(host.recordBytes > AdoptionRules.maximumRecordBytes - 1_100)
        #expect(host.refused > 0)
    }

    // MARK: - Asleep or awake

    /// The host's responder answering each question the proxy asks for its name, by unicast to the proxy.
    static func answersQuestions(_ actions: [EngineAction]) -> Bool {
        H.transmissions(actions).contains { transmission in
            transmission.message.questions.contains { $0.name == name && $0.type == .a && $0.unicastResponse }
        }
    }

    @Test func anAwakeHostThatAnswersItsNameIsNeverSpokenFor() throws {
        var h = try Self.adopted()
        h.frame(Self.mdnsFrame(Self.announcement()))
        var asked = 0
        let awake = h.run(for: .seconds(60)) { h, step in
            guard Self.answersQuestions(step) else { return }
            asked += 1
            var answer = Self.announcement()
            answer.answers = [answer.answers[0]]
            h.frame(
                TestFrames.udp(
                    from: Self.mac, to: Lab.proxyMAC, source: Self.v4, destination: IPAddress("192.0.2.1")!,
                    sourcePort: 5353, port: 5353, payload: answer.encoded(options: .mdns)))
        }
        // Asked 2 s after its first word, then at the idle pace (docs/adoption.md §3).
        #expect(asked >= 3 && asked <= 4, "one question 2 s after its word, then one every 25 s: \(asked)")
        let spoken = H.transmissions(awake).flatMap { $0.message.answers }.filter { $0.name == Self.name }
        #expect(spoken.isEmpty, "the proxy answered for an awake host")
        #expect(h.engine.state(of: OwnerKey(interface: "eth0", primaryMAC: Self.mac)) == nil)
    }

    @Test func aQuietHostIsAnsweredForWithinFiveSecondsAndHandedBackWhenItSpeaks() throws {
        var h = try Self.adopted()
        h.frame(Self.mdnsFrame(Self.announcement()))
        let lastWord = h.now
        let key = OwnerKey(interface: "eth0", primaryMAC: Self.mac)
        let asleep = h.run(for: .seconds(8))
        let first = try #require(
            asleep.first { H.transmissions([$0.1]).contains { $0.message.answers.contains { $0.name == Self.name } } })
        #expect(first.0 - lastWord <= .seconds(5))
        #expect(h.engine.state(of: key) == .asleep)
        // Its line says why an adopted host is asleep (the formatter reads the registration, not a detail string).
        let lines = asleep.compactMap { if case .log(_, let line) = $0.1 { line } else { nil } }
        #expect(lines.contains { $0.contains("is asleep (adopted: it answered none of") }, "\(lines)")
        // What it announced is what the host published, byte for byte.
        let announced = H.transmissions([first.1]).flatMap { $0.message.answers }
        #expect(Set(announced) == Set(Self.announcement().answers))
        #expect(h.ask(Self.instance, .srv).map(\.rdata) == [Self.announcement().answers[2].rdata])
        // Its IPv4 address was claimed (nobody answered the probes): ARP for it is answered by the proxy.
        let reply = H.frames(
            h.frame(
                TestFrames.arpRequest(
                    from: H.querierMAC, senderIP: IPv4Address(192, 0, 2, 20), for: IPv4Address(192, 0, 2, 30))))
        #expect(reply.contains { $0.etherType == .arp && $0.source == Lab.proxyMAC })
        #expect(H.journal(asleep.map(\.1)).contains { if case .put(let r) = $0 { r.isAdopted } else { false } })
        // It wakes: a NetBIOS broadcast of its own hands it back, silently (no goodbyes).
        let back = h.frame(
            TestFrames.udp(
                from: Self.mac, to: .broadcast, source: Self.v4, destination: IPAddress("192.0.2.255")!,
                sourcePort: 137, port: 137))
        #expect(h.engine.state(of: key) == nil)
        #expect(H.transmissions(back).flatMap { $0.message.answers }.allSatisfy { $0.ttl > 0 })
        #expect(h.engine.handBacks[.ownTraffic] == 1)
        #expect(h.engine.adoption.hosts[Self.mac]?.phase == .watching)
    }

    @Test func aNICThatAnswersARPInSleepIsNotFoughtAndTheHostStaysAnsweredFor() throws {
        var h = try Self.adopted()
        h.frame(Self.mdnsFrame(Self.announcement()))
        let key = OwnerKey(interface: "eth0", primaryMAC: Self.mac)
        // The NIC answers every ARP probe for the host's address; nothing else of the host speaks.
        let run = h.run(for: .seconds(30)) { h, step in
            for frame in H.frames(step) where frame.destination == Self.mac && frame.etherType == .arp {
                guard let arp = try? ARPPacket(decoding: frame.payload), arp.targetIP == IPv4Address(192, 0, 2, 30)
                else { continue }
                h.frame(
                    ARPPacket(
                        operation: .reply, senderMAC: Self.mac, senderIP: arp.targetIP, targetMAC: Lab.proxyMAC,
                        targetIP: .any
                    ).frame(destination: Lab.proxyMAC, source: Self.mac).bytes)
            }
        }
        #expect(h.engine.state(of: key) == .asleep)
        #expect(h.ask(Self.name, .a).map(\.rdata) == [.a(ARecord(address: IPv4Address(192, 0, 2, 30)))])
        // Never claimed: no announcement of the address as the proxy's, no neighbour entry.
        #expect(!H.frames(run.map(\.1)).contains { $0.source == Lab.proxyMAC && Self.isAnnouncement($0) })
        let states = h.engine.addressStates(of: key)?.map(\.1) ?? []
        #expect(states == [.ownerSeen] || states == [.stopped])
    }

    static func isAnnouncement(_ frame: EthernetFrame) -> Bool {
        guard frame.etherType == .arp, let arp = try? ARPPacket(decoding: frame.payload) else { return false }
        return arp.senderIP == IPv4Address(192, 0, 2, 30) && arp.senderMAC == Lab.proxyMAC
    }

    @Test func aHostThatSaidGoodbyeToItsNameIsNotHeld() throws {
        var h = try Self.adopted()
        h.frame(Self.mdnsFrame(Self.announcement()))
        // A clean shutdown: avahi's goodbyes for everything.
        var goodbyes = Self.announcement()
        goodbyes.answers = goodbyes.answers.map {
            var r = $0; r.ttl = 0; return r
        }
        h.frame(Self.mdnsFrame(goodbyes))
        h.run(for: .seconds(30))
        #expect(h.engine.state(of: OwnerKey(interface: "eth0", primaryMAC: Self.mac)) == nil)
    }

    @Test func unadoptingAHeldHostSaysGoodbye() throws {
        var h = try Self.adopted()
        h.frame(Self.mdnsFrame(Self.announcement()))
        h.run(for: .seconds(8))
        let actions = try h.engine.setAdopted([], now: h.now) + h.run(for: .seconds(1)).map(\.1)
        #expect(h.engine.state(of: OwnerKey(interface: "eth0", primaryMAC: Self.mac)) == nil)
        #expect(
            H.transmissions(actions).flatMap { $0.message.answers }.contains { $0.name == Self.name && $0.ttl == 0 })
        #expect(h.engine.adoptedMACs.isEmpty)
    }

    @Test func aHeldAdoptedHostSurvivesTheJournalAndARestart() throws {
        var h = try Self.adopted()
        h.frame(Self.mdnsFrame(Self.announcement()))
        h.frame(TestFrames.arpAnnouncement(from: Self.mac, for: IPv4Address(192, 0, 2, 30)))
        let run = h.run(for: .seconds(8))
        guard case .put(let held)? = H.journal(run.map(\.1)).last else {
            Issue.record("no journal entry")
            return
        }
        let restored = try #require(Self.throughJournal([held], now: h.now).first)
        #expect(restored.adoptedAddresses == [Self.v4])
        #expect(restored.records.map(\.record) == held.records.map(\.record))
        // A new engine: the host is held again and asked for its name; unanswered, it is spoken for.
        var fresh = H()
        fresh.record(fresh.engine.restore([restored], now: fresh.now))
        fresh.record(try fresh.engine.setAdopted([Self.mac], now: fresh.now))
        fresh.run(for: .seconds(6))
        #expect(fresh.engine.state(of: held.key) == .asleep)
        #expect(fresh.engine.adoption.hosts[Self.mac]?.phase == .held)
        #expect(fresh.ask(Self.name, .a).count == 1)
    }
}

/// What a sleeping NIC, or a forged MAC, can send, and what it must not do.
@Suite("Adoption: frames that show nothing, and types asked within a bound")
struct AdoptionNoiseTests {
    typealias H = EngineHarness
    typealias A = AdoptionTests

    @Test func framesThatAreNotIPNeitherKeepAHostAwakeNorHandItBack() throws {
        var h = try A.adopted()
        h.frame(A.mdnsFrame(A.announcement()))
        let key = OwnerKey(interface: "eth0", primaryMAC: A.mac)
        // LLDP from the host's MAC every second (a NIC or a management controller sends it while the host sleeps).
        var lldp = EthernetFrame(
            destination: MACAddress("01:80:c2:00:00:0e")!, source: A.mac, etherType: EtherType(rawValue: 0x88CC),
            payload: ByteBuffer(bytes: [UInt8](repeating: 0, count: 46))
        ).bytes
        for _ in 0..<8 {
            h.run(for: .seconds(1))
            h.frame(lldp)
        }
        #expect(h.engine.state(of: key) == .asleep, "LLDP kept the host looking awake")
        lldp[20] = 1
        h.frame(lldp)
        #expect(h.engine.state(of: key) == .asleep, "LLDP handed the sleeping host back")
    }

    @Test func serviceTypesAskedPerHostAreBounded() throws {
        var h = try A.adopted()
        let limit = AdoptionRules.maximumTypesAsked
        var asked = 0
        // One new type a second, then its goodbye, so that the records stay few and only the types grow.
        for n in 0...limit {
            let type = try DNSName(parsing: "_t\(n)._tcp.local.")
            let ptr = DNSResourceRecord(name: Adoption.servicesName, ttl: 4500, rdata: .ptr(PTRRecord(target: type)))
            var goodbye = ptr
            goodbye.ttl = 0
            h.now = h.now + .seconds(1)
            let actions = h.frame(
                A.mdnsFrame(DNSMessage(flags: DNSHeaderFlags(response: true, authoritative: true), answers: [ptr])))
            asked += H.transmissions(actions).filter { $0.message.questions.contains { $0.name == type } }.count
            h.now = h.now + .seconds(1)
            h.frame(
                A.mdnsFrame(DNSMessage(flags: DNSHeaderFlags(response: true, authoritative: true), answers: [goodbye])))
        }
        // Each question goes out once per family the interface has (IPv4 and IPv6 here). Every goodbye but the
        // last was followed by more words, so it was a removal; the last waits for what comes next.
        #expect(asked == 2 * limit)
        #expect(A.learned(h).count <= 1)
    }
}
