import Foundation
import NIOCore
import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

/// How an awake adopted host is watched (docs/adoption.md §3): sleep goodbyes are not removals, a removal while
/// awake goes whole, a quiet resume hands the host back, and the watch costs the link a few packets a minute.
@Suite("Adoption: sleep goodbyes, removals, quiet resumes and a quiet watch")
struct AdoptionWatchTests {
    typealias H = EngineHarness
    typealias A = AdoptionTests
    static let mac = Lab.hostMAC
    static let smb: DNSName = "_smb._tcp.local."
    static let http: DNSName = "_http._tcp.local."

    /// The Mac of `macos15-sleep-goodbyes.pcap`, adopted, its frames delivered at their own pace; the harness
    /// stands at its last frame (the second sleep goodbye).
    static func replayedMac(frames: Range<Int>? = nil) throws -> (H, PcapFile) {
        let url = try #require(
            Bundle.module.url(forResource: "macos15-sleep-goodbyes", withExtension: "pcap", subdirectory: "Fixtures"))
        let pcap = try PcapFile(Array(try Data(contentsOf: url)))
        var h = H()
        h.record(try h.engine.setAdopted([mac], now: h.now))
        let records = pcap.records[frames ?? 0..<pcap.records.count]
        let first = try #require(records.first)
        let start = h.now
        for record in records {
            let offset =
                Duration.seconds(Int64(record.seconds) - Int64(first.seconds))
                + .microseconds(Int64(record.fraction) - Int64(first.fraction))
            // The proxy's own timers run between the frames, as they would.
            h.run(for: start + offset - h.now)
            h.frame(record.data)
        }
        return (h, pcap)
    }

    /// Its service PTRs (not its reverse mappings or its `_services` entries).
    static func ptrs(_ records: [DNSResourceRecord]) -> [DNSResourceRecord] {
        records.filter { $0.type == .ptr && ($0.name == smb || $0.name == http) }
    }

    @Test func aMacsSleepGoodbyesAreNotRemovalsItIsHeldWithItsServicesAndAnnouncesThem() throws {
        var (h, _) = try Self.replayedMac()
        let goodbyes = h.now
        let host = try #require(h.engine.adoption.hosts[Self.mac])
        // Its PTRs are still what it published: the goodbyes wait for what follows them.
        #expect(Self.ptrs(host.records.map(\.record)).count == 2)
        let run = h.run(for: .seconds(6))
        let key = OwnerKey(interface: "eth0", primaryMAC: Self.mac)
        #expect(h.engine.state(of: key) == .asleep)
        // The first announcement of its service PTRs, with their TTLs back, within 5 s of the goodbyes.
        let announced = run.first { step in
            H.transmissions([step.1]).contains { t in
                Self.ptrs(t.message.answers).contains { $0.name == Self.smb && $0.ttl > 0 }
            }
        }
        let at = try #require(announced).0
        #expect(at - goodbyes <= .seconds(5), "PTRs announced \(at - goodbyes) after the sleep goodbyes")
        // A fresh browse finds both services; resolving one gives its SRV.
        #expect(h.ask(Self.smb, .ptr).count == 1)
        #expect(h.ask(Self.http, .ptr).count == 1)
        let instance = try #require(
            h.ask(Self.smb, .ptr).first.flatMap { if case .ptr(let p) = $0.rdata { p.target } else { nil } })
        #expect(h.ask(instance, .srv).count == 1)
        #expect(h.engine.adoption.hosts[Self.mac]?.pendingGoodbyes.isEmpty == true)
    }

    @Test func aServiceRemovedWhileAwakeGoesWholePTRSRVTXTAndItsTypeEntry() throws {
        var h = try A.adopted()
        var both = A.announcement()
        let second: DNSName = "PC._http._tcp.local."
        both.answers += [
            DNSResourceRecord(name: Self.http, ttl: 4500, rdata: .ptr(PTRRecord(target: second))),
            DNSResourceRecord(
                name: second, cacheFlush: true, ttl: 120,
                rdata: .srv(SRVRecord(priority: 0, weight: 0, port: 80, target: A.name))),
            DNSResourceRecord(name: Adoption.servicesName, ttl: 4500, rdata: .ptr(PTRRecord(target: Self.http))),
        ]
        h.frame(A.mdnsFrame(both))
        // The Mac withdraws its SMB service: a goodbye for the PTR, repeated 2 s later, and it goes on talking.
        let goodbye = Self.smbGoodbye
        h.now = h.now + .seconds(1)
        h.frame(A.mdnsFrame(goodbye))
        #expect(A.learned(h).count == both.answers.count, "applied before anything followed it")
        h.now = h.now + .seconds(2)
        h.frame(A.mdnsFrame(goodbye))
        let left = A.learned(h)
        #expect(!left.contains { $0.name == A.instance }, "SRV or TXT of the removed service kept")
        #expect(!left.contains { $0.rdata == .ptr(PTRRecord(target: A.instance)) })
        #expect(!left.contains { $0.name == Adoption.servicesName && $0.rdata == .ptr(PTRRecord(target: A.type)) })
        // The other service and its type stay, and so does the host's name.
        #expect(left.contains { $0.name == second })
        #expect(left.contains { $0.name == Adoption.servicesName && $0.rdata == .ptr(PTRRecord(target: Self.http)) })
        #expect(h.engine.adoption.hosts[A.mac]?.hostName == A.name)
        // It sleeps later: nothing of the removed service is announced.
        let run = h.run(for: .seconds(60))
        #expect(h.engine.state(of: OwnerKey(interface: "eth0", primaryMAC: A.mac)) == .asleep)
        #expect(!H.transmissions(run).flatMap { $0.message.answers }.contains { $0.name == A.instance })
    }

    @Test func goodbyesConfirmedByTheAnswerToTheCheckAreARemoval() throws {
        var h = try A.adopted()
        h.frame(A.mdnsFrame(A.announcement()))
        h.now = h.now + .seconds(1)
        let goodbye = Self.smbGoodbye
        h.frame(A.mdnsFrame(goodbye))
        // It answers the check that follows: awake, so the goodbye was a removal.
        h.run(for: .seconds(4)) { h, step in
            guard A.answersQuestions(step) else { return }
            h.frame(AdoptionWatchTests.unicastAnswer())
        }
        #expect(!A.learned(h).contains { $0.name == A.instance })
        #expect(h.engine.state(of: OwnerKey(interface: "eth0", primaryMAC: A.mac)) == nil)
    }

    @Test func aNeighbourLookupAfterSleepGoodbyesIsNotARemoval() throws {
        var h = try A.adopted()
        h.frame(A.mdnsFrame(A.announcement()))
        h.now = h.now + .seconds(1)
        let goodbye = Self.smbGoodbye
        h.frame(A.mdnsFrame(goodbye))
        // Its kernel asks for its router as it goes down, then nothing.
        h.now = h.now + .milliseconds(1500)
        h.frame(
            TestFrames.arpRequest(from: A.mac, senderIP: IPv4Address(192, 0, 2, 30), for: IPv4Address(192, 0, 2, 254)))
        h.run(for: .seconds(30))
        #expect(h.engine.state(of: OwnerKey(interface: "eth0", primaryMAC: A.mac)) == .asleep)
        #expect(h.ask(A.type, .ptr).count == 1, "its service was taken for removed")
        #expect(h.ask(A.instance, .srv).count == 1)
    }

    @Test func goodbyesForEveryAddressOfItsNameAreAnExitAndTheHostIsNotHeld() throws {
        var h = try A.adopted()
        h.frame(A.mdnsFrame(A.announcement()))
        h.now = h.now + .seconds(1)
        // mDNSResponder and avahi-daemon stopping: goodbyes for everything, its address included.
        var all = A.announcement()
        all.answers = all.answers.map {
            var r = $0; r.ttl = 0; return r
        }
        h.frame(A.mdnsFrame(all))
        #expect(A.learned(h).isEmpty)
        h.run(for: .seconds(60))
        #expect(h.engine.state(of: OwnerKey(interface: "eth0", primaryMAC: A.mac)) == nil)
    }

    /// The host's goodbye to its SMB service's PTR, as macOS sends it at sleep and at a removal.
    static let smbGoodbye = DNSMessage(
        flags: DNSHeaderFlags(response: true, authoritative: true),
        answers: [DNSResourceRecord(name: A.type, ttl: 0, rdata: .ptr(PTRRecord(target: A.instance)))])

    /// The host's unicast answer to the proxy's question for its name.
    static func unicastAnswer() -> [UInt8] {
        var answer = A.announcement()
        answer.answers = [answer.answers[0]]
        return TestFrames.udp(
            from: A.mac, to: Lab.proxyMAC, source: A.v4, destination: IPAddress("192.0.2.1")!, sourcePort: 5353,
            port: 5353, payload: answer.encoded(options: .mdns))
    }

    // MARK: - Awake when it says so

    /// An ICMPv6 message of `type` from the host's link-local address (its body is not read).
    static func icmpv6(type: UInt8, to destination: IPAddress) -> [UInt8] {
        TestFrames.ip(
            from: A.mac, to: MACAddress("33:33:00:00:00:01")!, source: A.v6, destination: destination, proto: .icmpv6,
            payload: [type, 0, 0, 0] + [UInt8](repeating: 0, count: 20))
    }

    @Test(arguments: ["arp-request", "neighbour-solicitation", "router-solicitation"])
    func aQuietResumeHandsTheHostBackBeforeAnyQueryIsAnswered(_ word: String) throws {
        var h = try A.adopted()
        h.frame(A.mdnsFrame(A.announcement()))
        h.run(for: .seconds(8))
        let key = OwnerKey(interface: "eth0", primaryMAC: A.mac)
        #expect(h.engine.state(of: key) == .asleep)
        // It resumes without a broadcast of its own: it asks for its router first.
        let frame: [UInt8]
        switch word {
        case "arp-request":
            frame = TestFrames.arpRequest(
                from: A.mac, senderIP: IPv4Address(192, 0, 2, 30), for: IPv4Address(192, 0, 2, 254))
        case "neighbour-solicitation":
            frame = Self.icmpv6(type: 135, to: IPAddress("ff02::1:ff00:fe")!)
        default:
            frame = Self.icmpv6(type: 133, to: IPAddress("ff02::2")!)
        }
        h.frame(frame)
        #expect(h.engine.state(of: key) == nil, "\(word) did not hand the resumed host back")
        #expect(h.ask(A.name, .a).isEmpty, "the proxy answered for an awake host")
    }

    @Test func whatASleepingNICSendsHandsNothingBack() throws {
        var h = try A.adopted()
        h.frame(A.mdnsFrame(A.announcement()))
        h.run(for: .seconds(8))
        let key = OwnerKey(interface: "eth0", primaryMAC: A.mac)
        // Its NIC answers an ARP request and a neighbour solicitation, and reports its multicast groups.
        h.frame(
            ARPPacket(
                operation: .reply, senderMAC: A.mac, senderIP: IPv4Address(192, 0, 2, 30), targetMAC: H.querierMAC,
                targetIP: IPv4Address(192, 0, 2, 20)
            ).frame(destination: H.querierMAC, source: A.mac).bytes)
        h.frame(Self.icmpv6(type: 136, to: IPAddress("fe80::1")!))
        h.frame(Self.icmpv6(type: 143, to: IPAddress("ff02::16")!))
        #expect(h.engine.state(of: key) == .asleep)
    }

    // MARK: - A quiet watch

    /// Packets a check costs the link: the proxy's questions and the host's answers, over `minutes`.
    static func watch(minutes: Int, h: inout H) -> (questions: Int, answers: Int) {
        var questions = 0
        var answers = 0
        h.run(for: .seconds(Int64(minutes) * 60)) { h, step in
            let asked = H.transmissions(step).filter { t in
                t.message.questions.contains { $0.name == A.name && $0.unicastResponse }
            }
            questions += asked.count
            if !asked.isEmpty {
                answers += 1
                h.frame(AdoptionWatchTests.unicastAnswer())
                // Its kernel then checks the proxy's MAC (a unicast ARP request, as Linux does seconds later).
                h.frame(
                    ARPPacket(
                        operation: .request, senderMAC: A.mac, senderIP: IPv4Address(192, 0, 2, 30),
                        targetMAC: Lab.proxyMAC, targetIP: IPv4Address(192, 0, 2, 1)
                    ).frame(destination: Lab.proxyMAC, source: A.mac).bytes)
            }
        }
        return (questions, answers)
    }

    @Test func anIdleAwakeHostCostsAtMostSixPacketsAMinute() throws {
        var h = try A.adopted()
        h.frame(A.mdnsFrame(A.announcement()))
        let (questions, answers) = Self.watch(minutes: 10, h: &h)
        let perMinute = Double(questions + answers) / 10
        #expect(perMinute <= 6, "\(questions) questions and \(answers) answers in 10 minutes")
        #expect(questions >= 20, "an idle host is still asked every \(AdoptionRules.idleCheckInterval)")
        #expect(h.engine.state(of: OwnerKey(interface: "eth0", primaryMAC: A.mac)) == nil)
    }

    @Test func aHostIdleForLongThatSleepsSilentlyIsHeldWithinThirtySeconds() throws {
        var h = try A.adopted()
        h.frame(A.mdnsFrame(A.announcement()))
        _ = Self.watch(minutes: 5, h: &h)
        // It sleeps now, right after answering: nothing more from it.
        let slept = h.now
        let run = h.run(for: .seconds(40))
        let key = OwnerKey(interface: "eth0", primaryMAC: A.mac)
        #expect(h.engine.state(of: key) == .asleep)
        let held = try #require(run.first { H.journal([$0.1]).isEmpty == false }).0
        #expect(held - slept <= .seconds(30), "held \(held - slept) after it fell silent")
    }

    @Test func aBusyHostThatSleepsIsHeldWithinFiveSecondsOfItsLastWord() throws {
        var h = try A.adopted()
        h.frame(A.mdnsFrame(A.announcement()))
        _ = Self.watch(minutes: 2, h: &h)
        // Busy: it answers other machines' browses every few seconds for a while, then sleeps after the last.
        for n in 0..<6 {
            h.run(for: .seconds(3)) { h, step in
                if A.answersQuestions(step) { h.frame(AdoptionWatchTests.unicastAnswer()) }
            }
            h.frame(A.mdnsFrame(A.announcement(txt: [Array("n=\(n)".utf8)])))
        }
        let lastWord = h.now
        let run = h.run(for: .seconds(10))
        let held = try #require(run.first { H.journal([$0.1]).isEmpty == false }).0
        #expect(held - lastWord <= .seconds(5), "held \(held - lastWord) after its last word")
    }

    @Test func theFirstQuestionOfACheckGoesOutOnOneFamilyTheSecondOnBoth() throws {
        var h = try A.adopted()
        h.frame(A.mdnsFrame(A.announcement()))
        let run = h.run(for: .seconds(5))
        let asked = H.transmissions(run).filter { t in t.message.questions.contains { $0.name == A.name } }
        #expect(asked.count == 3, "one question on IPv4, then one on each family")
        #expect(asked.first?.destination == .multicast(interfaceIndex: Lab.eth0.index, family: .v4))
    }
}

/// What a restart keeps of adopted hosts (docs/adoption.md §3): the journal holds the sleeping ones; the I/O
/// layer's copy (`ProxyEngine.adoptedLearned`) the awake ones.
@Suite("Adoption: a restart forgets nothing")
struct AdoptionRestartTests {
    typealias H = EngineHarness
    typealias A = AdoptionTests

    @Test func aHostAwakeAndQuietAcrossARestartIsHeldWithItsNameWhenItSleeps() throws {
        var h = try A.adopted()
        h.frame(A.mdnsFrame(A.announcement()))
        let saved = h.engine.adoptedLearned(now: h.now)
        #expect(saved.count == 1)
        // Through the journal's encoding, as the I/O layer keeps it.
        let replayed = A.throughJournal(saved, now: h.now)
        // A new proxy: the host is awake and says nothing, then sleeps. It is asked at once, and held with its
        // name and services.
        var fresh = H()
        fresh.record(try fresh.engine.setAdopted([A.mac], now: fresh.now))
        fresh.engine.restoreLearned(replayed, now: fresh.now)
        let key = OwnerKey(interface: "eth0", primaryMAC: A.mac)
        fresh.run(for: .seconds(6))
        #expect(fresh.engine.state(of: key) == .asleep)
        #expect(fresh.ask(A.name, .a).count == 1)
        #expect(fresh.ask(A.type, .ptr).count == 1)
    }

    @Test func aHostAwakeAcrossARestartThatAnswersIsWatchedNotHeld() throws {
        var h = try A.adopted()
        h.frame(A.mdnsFrame(A.announcement()))
        let saved = h.engine.adoptedLearned(now: h.now)
        var fresh = H()
        fresh.record(try fresh.engine.setAdopted([A.mac], now: fresh.now))
        fresh.engine.restoreLearned(saved, now: fresh.now)
        fresh.run(for: .seconds(60)) { h, step in
            if A.answersQuestions(step) { h.frame(AdoptionWatchTests.unicastAnswer()) }
        }
        #expect(fresh.engine.state(of: OwnerKey(interface: "eth0", primaryMAC: A.mac)) == nil)
    }

    @Test func anAdoptedHostRestoredAsleepAndThenHeardIsHandedBackAndNothingIsLeft() throws {
        var h = try A.adopted()
        h.frame(A.mdnsFrame(A.announcement()))
        let run = h.run(for: .seconds(8))
        guard case .put(let held)? = H.journal(run.map(\.1)).last else {
            Issue.record("no journal entry")
            return
        }
        var fresh = H()
        fresh.record(fresh.engine.restore([held], now: fresh.now))
        fresh.record(try fresh.engine.setAdopted([A.mac], now: fresh.now))
        // It is awake after all: its first word hands it back, and that is the end of it.
        let actions = fresh.frame(A.mdnsFrame(A.announcement()))
        #expect(fresh.engine.state(of: held.key) == nil)
        #expect(fresh.engine.addressStates(of: held.key) == nil)
        let lines = H.logs(actions)
        #expect(lines.contains { $0.contains("hand-back") })
        #expect(!lines.contains { $0.contains("still awake") }, "\(lines)")
        #expect(fresh.engine.adoption.hosts[A.mac]?.phase == .watching)
    }

    @Test func aSavedCopyIsHeldToTheBoundsOfLearning() throws {
        var h = try A.adopted()
        h.frame(A.mdnsFrame(A.announcement()))
        var saved = try #require(h.engine.adoptedLearned(now: h.now).first)
        // Records of one size each, a few more than the byte bound holds.
        let record = { (n: Int) in
            ProxiedRecord(
                record: DNSResourceRecord(
                    name: "big.local.", ttl: 120,
                    rdata: .txt(
                        TXTRecord(uncheckedStrings: [
                            Array("\(100_000 + n)".utf8) + [UInt8](repeating: 0x61, count: 200)
                        ]))),
                registeredAt: h.now)
        }
        let size = record(0).record.uncompressedWireLength
        let fit = AdoptionRules.maximumRecordBytes / size
        saved.records = (0..<fit + 3).map(record)
        var fresh = H()
        fresh.record(try fresh.engine.setAdopted([A.mac], now: fresh.now))
        fresh.engine.restoreLearned([saved], now: fresh.now)
        let host = try #require(fresh.engine.adoption.hosts[A.mac])
        #expect(host.records.count == fit)
        #expect(host.recordBytes <= AdoptionRules.maximumRecordBytes)
        #expect(host.recordBytes + size > AdoptionRules.maximumRecordBytes)
    }

    @Test func aSavedCopyNeverOverridesWhatTheJournalHoldsOrWhatWasHeardSince() throws {
        var h = try A.adopted()
        h.frame(A.mdnsFrame(A.announcement()))
        var stale = try #require(h.engine.adoptedLearned(now: h.now).first)
        stale.records = []
        var fresh = H()
        fresh.record(try fresh.engine.setAdopted([A.mac], now: fresh.now))
        fresh.frame(A.mdnsFrame(A.announcement()))
        fresh.engine.restoreLearned([stale], now: fresh.now)
        #expect(fresh.engine.adoption.hosts[A.mac]?.records.count == A.announcement().answers.count)
    }
}
