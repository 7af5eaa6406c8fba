import NIOCore
import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

extension ProxyEngineTests {
    @Test func aLeaseEndingOnAnAwakeHostDropsItWithoutMagicPacketsOrGoodbyes() throws {
        var h = H()
        h.register(Lab.registration(lease: 30, addresses: [Lab.hostV4, H.hostGlobal]))
        let steps = h.run(for: .seconds(40)) { h, step in
            for reply in H.ownerAnswers(step, for: [Lab.hostV4, H.hostGlobal]) { h.frame(reply) }
        }
        let actions = steps.map(\.1)
        #expect(h.engine.registrar.store.hostCount == 0)
        #expect(H.wakeEvents(actions).isEmpty && !H.frames(actions).contains(where: H.isMagic))
        #expect(H.hostRecordsSent(actions).isEmpty, "no goodbyes for records the host answers itself")
        #expect(
            H.logs(actions).contains {
                $0.contains("lease ended for vm.local.") && $0.contains("while it was awake (last seen awake: a")
                    && $0.contains("from its MAC")
            })
        let gone = actions.compactMap { if case .presence(let change) = $0 { return change } else { return nil } }.last
        #expect(gone?.state == .gone && gone?.reason == .awakeAtExpiry, "\(String(describing: gone))")
    }

    @Test func aLeaseEndingOnASleepingHostWakesItAndTheOwnersARPEndsTheWakeAsASuccess() throws {
        var h = H()
        h.register(Lab.registration(lease: 30, addresses: [Lab.hostV4, H.hostGlobal]))
        let steps = h.run(for: .seconds(31)).map(\.1)
        #expect(H.wakeEvents(steps).map(\.kind) == [.wake])
        #expect(H.hostRecordsSent(steps).contains { $0.ttl == 0 }, "goodbyes for the records the proxy spoke for")
        // The host wakes: its kernel announces its address. The wake ends as a success, not "no sign of waking".
        let up = h.frame(TestFrames.arpAnnouncement(from: Lab.hostMAC, for: IPv4Address(192, 0, 2, 2)))
        #expect(H.wakeEvents(up).map(\.kind) == [.awake])
        let later = h.run(for: .seconds(40)).map(\.1)
        #expect(!H.frames(later).contains(where: H.isMagic) && !H.wakeEvents(later).contains { $0.kind == .noResponse })
    }

    @Test func aNewRegistrationReplacesThePreviousOnesRecordsAndItsPartsStillMerge() throws {
        var h = H()
        let services: [(String, UInt16)] = [("TestSvc._http._tcp", 8080), ("Files._smb._tcp", 445)]
        h.register(Lab.registration(id: 1, addresses: [Lab.hostV4], services: services))
        // A second part of the same registration (same ID) adds to it.
        h.register(Lab.registration(id: 1, addresses: [Lab.hostV4], services: [("Printer._ipp._tcp", 631)]))
        #expect(h.engine.registrar.store[h.key]?.summary.services.count == 3)
        h.run(for: .seconds(12))
        #expect(!h.ask("Files._smb._tcp.local.", .srv).isEmpty)
        // Woken, it sleeps again with the same Owner sequence (avahi never bumps it) and one service fewer.
        h.register(Lab.registration(id: 2, addresses: [Lab.hostV4], services: [("TestSvc._http._tcp", 8080)]))
        #expect(h.engine.registrar.store[h.key]?.summary.services.map(\.port) == [8080])
        h.run(for: .seconds(12))
        #expect(h.ask("Files._smb._tcp.local.", .srv).isEmpty && h.ask("Printer._ipp._tcp.local.", .srv).isEmpty)
        #expect(h.ask(H.http, .txt).count == 1, "one TXT record per instance")
    }

    @Test func withoutTakeoverTheHostIsAskedForItsNameAndSpokenForOnceSilent() throws {
        var h = H(takeover: false)
        h.register()
        // Its responder answers the first question from its address: still awake.
        var answered = false
        let early = h.run(for: .milliseconds(1500)) { h, step in
            let asked = H.transmissions(step).contains { $0.message.questions.contains { $0.name == H.hostName } }
            if asked, !answered {
                answered = true
                h.mdns(
                    DNSMessage(
                        flags: DNSHeaderFlags(response: true, authoritative: true),
                        answers: [
                            DNSResourceRecord(
                                name: H.hostName, cacheFlush: true, ttl: 120,
                                rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 2))))
                        ]), from: Lab.hostV4)
            }
        }
        #expect(
            answered
                && H.hostRecordsSent(
                    early.map(\.1).filter {
                        if case .transmit(let t) = $0 { return t.message.flags.isResponse } else { return false }
                    }
                ).isEmpty)
        #expect(h.engine.state(of: h.key) == .starting)
        let later = h.run(for: .seconds(6))
        #expect(h.engine.state(of: h.key) == .asleep)
        #expect(
            H.transmissions(later).filter { $0.message.questions.contains { $0.name == H.hostName } }.count >= 3 * 2,
            "three questions, on both families")
        #expect(!H.hostRecordsSent(later.map(\.1)).isEmpty)
    }

    @Test func forgetSaysGoodbyeOnlyForAHostTheProxySpokeFor() throws {
        var awake = H()
        awake.register()
        let quiet = awake.engine.forget(awake.key, goodbyes: true, now: awake.now)
        #expect(H.journal(quiet) == [.remove(awake.key)])
        #expect(H.hostRecordsSent(quiet + awake.run(for: .seconds(10)).map(\.1)).isEmpty)
        #expect(H.logs(quiet).contains { $0.contains("no goodbyes: it is awake") })

        var asleep = H()
        asleep.register()
        asleep.run(for: .seconds(12))
        let forgotten = asleep.engine.forget(asleep.key, goodbyes: true, now: asleep.now)
        #expect(H.journal(forgotten) == [.remove(asleep.key)])
        #expect(H.hostRecordsSent(asleep.run(for: .seconds(10)).map(\.1)).contains { $0.ttl == 0 })
    }

    @Test func aFailedJournalAppendPutsBackWhatTheBatchTookAway() throws {
        var h = H()
        h.register()
        h.run(for: .seconds(12))
        let registration = try #require(h.engine.registrar.store[h.key])
        _ = h.mdns(H.ownProbe(), from: Lab.hostV4)  // handed back in memory ...
        #expect(h.engine.registrar.store.hostCount == 0)
        _ = h.engine.reload([registration], now: h.now)  // ... but the journal said no
        #expect(h.engine.registrar.store.hostCount == 1 && h.engine.state(of: h.key) == .starting)
        #expect(h.engine.takeover?.state(of: h.key) != nil, "the packet side holds the host again")
    }

    @Test func restoredHostsStartSilentAndAreProbedAgain() throws {
        var source = H()
        source.register()
        let registration = try #require(source.engine.registrar.store[source.key])
        var h = H()
        _ = h.engine.restore([registration], now: h.now)
        #expect(h.engine.state(of: h.key) == .starting && h.ask(H.hostName, .a).isEmpty)
        h.run(for: .seconds(6))
        #expect(h.engine.state(of: h.key) == .asleep && !h.ask(H.hostName, .a).isEmpty)
    }

    @Test func statusCountsHostsByState() throws {
        var h = H()
        h.register()
        #expect(h.engine.hostsByState == [.starting: 1])
        h.run(for: .seconds(12))
        #expect(h.engine.hostsByState == [.asleep: 1])
        let syn = TestFrames.tcp(
            from: H.querierMAC, to: Lab.proxyMAC, source: H.querier, destination: Lab.hostV4, sourcePort: 40003,
            port: 8080)
        h.deliver(syn)
        #expect(h.engine.hostsByState == [.waking: 1])
        // A second host, asleep, is counted apart from the waking one; once the first is seen awake, no waking.
        h.register(
            Lab.registration(
                mac: MACAddress("02:53:50:00:00:07")!, host: "other.local.", addresses: [IPAddress("192.0.2.7")!],
                services: [("Other._http._tcp", 8080)]), from: IPAddress("192.0.2.7")!)
        h.run(for: .seconds(12))
        #expect(h.engine.hostsByState[.waking] == 1 && h.engine.hostsByState.values.reduce(0, +) == 2)
        #expect(h.engine.hosts(in: .waking) == [h.key] && h.engine.hosts(in: .asleep).count == 1)
        #expect(!h.engine.hosts(in: .asleep).contains(h.key), "a waking host is counted as waking only")
        _ = h.frame(TestFrames.arpAnnouncement(from: Lab.hostMAC, for: IPv4Address(192, 0, 2, 2)))
        #expect(h.engine.hostsByState[.waking] == nil && h.engine.hostsByState.values.reduce(0, +) == 2)
        #expect(h.engine.hosts(in: .waking).isEmpty)
    }

    /// The history behind the status page (docs/status-page.md): one `presence` action each time a host moves,
    /// in order, from registration to the hand-back.
    @Test func everyChangeOfAHostsStateIsReportedOnce() throws {
        var h = H()
        h.register()
        h.run(for: .seconds(12))
        h.deliver(
            TestFrames.tcp(
                from: H.querierMAC, to: Lab.proxyMAC, source: H.querier, destination: Lab.hostV4, sourcePort: 40003,
                port: 8080))
        _ = h.mdns(H.ownProbe(), from: Lab.hostV4)
        let changes = h.log.compactMap { entry -> (HostState, HostStateReason)? in
            guard case .presence(let change) = entry.1 else { return nil }
            #expect(change.host == h.key && change.hostName == "vm.local.")
            return (change.state, change.reason)
        }
        #expect(changes.map(\.0) == [.starting, .asleep, .handedBack], "\(changes)")
        #expect(changes.map(\.1) == [.registered, .noProbeAnswer, .mdns])
    }

    @Test func aHostWokenAfterItsLeaseEndedIsForgottenOnceItShowsItselfOrRegistersAgain() throws {
        // Seen by its ARP: the wake ends as a success and nothing of the host stays behind.
        var seen = H()
        seen.register(Lab.registration(lease: 30, addresses: [Lab.hostV4]))
        seen.run(for: .seconds(31))
        #expect(seen.engine.takeover?.isWaking(seen.key) == true)
        // Its registration is gone, so the status counts it in no state, waking included.
        #expect(seen.engine.hostsByState.isEmpty)
        _ = seen.frame(TestFrames.arpAnnouncement(from: Lab.hostMAC, for: IPv4Address(192, 0, 2, 2)))
        #expect(
            seen.engine.takeover?.hostCount == 0
                && seen.engine.takeover?.host(owning: Lab.hostV4, interface: "eth0") == nil)
        // Registering again: the wake ends as a success too, and the new registration starts silent.
        var back = H()
        back.register(Lab.registration(id: 1, lease: 30, addresses: [Lab.hostV4]))
        back.run(for: .seconds(31))
        let actions = back.register(Lab.registration(id: 2, lease: 7200, addresses: [Lab.hostV4]))
        #expect(H.wakeEvents(actions).map(\.kind) == [.awake])
        #expect(back.engine.state(of: back.key) == .starting && back.engine.takeover?.isWaking(back.key) == false)
        #expect(!H.frames(back.run(for: .seconds(3)).map(\.1)).contains(where: H.isMagic))
    }

    /// After a clean stop a moment ago the hosts the proxy spoke for are answered at once (not after seconds of
    /// probing); a restored host it did not speak for stays silent; and a sign of life still silences it.
    @Test func afterACleanStopTheHostsSpokenForAreAnsweredAtOnceAndStillSilencedBySignsOfLife() throws {
        var before = H()
        before.register()
        before.run(for: .seconds(12))
        #expect(before.engine.state(of: before.key) == .asleep)
        #expect(before.engine.spokenFor == [before.key])
        let registration = try #require(before.engine.registrar.store[before.key])
        // A host that has since shown itself up on every address is awake, and is not recorded as spoken for.
        var woke = before
        woke.frame(TestFrames.arpAnnouncement(from: Lab.hostMAC, for: IPv4Address(192, 0, 2, 2)))
        guard case .v6(let global) = H.hostGlobal else { return }
        woke.frame(TestFrames.neighbourAdvertisement(from: Lab.hostMAC, for: global))
        #expect(woke.engine.state(of: woke.key) == .awake)
        #expect(woke.engine.spokenFor.isEmpty, "an awake host would be spoken for after a restart")

        // The next start: restored, so silent, until told the proxy spoke for it when it stopped.
        var after = H()
        _ = after.engine.restore([registration], now: after.now)
        #expect(after.engine.state(of: after.key) == .starting && after.ask(H.http, .srv).isEmpty)
        let resumed = after.engine.resumeSpeaking(
            for: [after.key, OwnerKey(interface: "eth0", primaryMAC: MACAddress("02:53:50:00:00:99")!)],
            stoppedFor: .seconds(3), now: after.now)
        #expect(H.logs(resumed).count == 1, "one line, for the host it holds")
        #expect(after.engine.state(of: after.key) == .asleep)
        #expect(after.ask(H.http, .srv).count == 1, "answered at once after the restart")
        // Its addresses are answered for at once too (they used to be probed for 4 s first, while the records were
        // already answered), and announced as after a claim.
        let request = after.frame(
            TestFrames.arpRequest(
                from: H.querierMAC, senderIP: IPv4Address(192, 0, 2, 20), for: IPv4Address(192, 0, 2, 2)))
        #expect(H.frames(request).contains { $0.etherType == .arp && $0.destination == H.querierMAC })
        let announced = after.run(for: .seconds(2)).map(\.1)
        #expect(
            H.frames(announced).contains {
                $0.etherType == .arp && (try? ARPPacket(decoding: $0.payload))?.senderMAC == Lab.proxyMAC
            }, "its addresses are announced again")
        // A host that is up after all shows itself on its addresses: the proxy falls silent at once, sends nothing
        // for it, and keeps its records (docs/coexistence.md).
        let up =
            after.frame(TestFrames.arpAnnouncement(from: Lab.hostMAC, for: IPv4Address(192, 0, 2, 2)))
            + after.frame(TestFrames.neighbourAdvertisement(from: Lab.hostMAC, for: global))
        #expect(after.engine.state(of: after.key) == .awake && H.hostRecordsSent(up).isEmpty)
        #expect(after.ask(H.http, .srv).isEmpty, "silent once the host shows it is up")
    }

    /// `EngineRules.resumeSlice` + 1 hosts as a restart restores them, each with its own service instance when
    /// `ownServices`.
    static func oneSliceAndOneMore(now: Timestamp, ownServices: Bool = false) throws -> [OwnerRegistration] {
        let slice = EngineRules.resumeSlice
        var configuration = RegistrationConfiguration(
            maximumHosts: slice + 1, requireSourceAmongClaimedAddresses: false)
        configuration.rateLimitBurst = slice + 1
        var registrar = Registrar(configuration: configuration)
        return try (0...slice).map { n in
            let outcome = registrar.handle(
                datagram: Lab.registration(
                    mac: MACAddress(rawValue: 0x0253_5000_4000 + UInt64(n)), host: try DNSName(parsing: "r\(n).local."),
                    addresses: [],
                    services: ownServices ? [("Host \(n)._http._tcp", 8080)] : [("TestSvc._http._tcp", 8080)]
                ).encoded(options: .appleUpdate), from: IPAddress("192.0.2.30")!, on: Lab.eth0, now: now)
            guard case .accepted(let acceptance) = outcome else { throw CancellationError() }
            return acceptance.registration
        }
    }

    /// A restart speaks again for its hosts a slice at a time: N in the call, the one past N a slice's interval
    /// later, when the engine says it is due; the line that counts them comes once, with the last.
    @Test func aRestartSpeaksAgainForItsHostsASliceATick() throws {
        var h = H()
        let slice = EngineRules.resumeSlice
        let registrations = try Self.oneSliceAndOneMore(now: h.now)
        _ = h.engine.restore(registrations, now: h.now)
        let first = h.engine.resumeSpeaking(for: registrations.map(\.key), stoppedFor: .seconds(2), now: h.now)
        let asleep = { registrations.filter { h.engine.state(of: $0.key) == .asleep }.count }
        #expect(asleep() == slice && H.logs(first).isEmpty)
        // A stop or a crash now leaves the host not yet come to for the next start too, not only the slice.
        #expect(h.engine.spokenFor.count == slice)
        #expect(h.engine.spokenForOrResuming == registrations.map(\.key).sorted())
        let due = h.now + EngineRules.resumeSliceInterval
        #expect(h.engine.nextDeadline().map { $0 <= due } == true, "the rest is due a slice's interval later")
        _ = h.engine.tick(now: due - .milliseconds(1))
        #expect(asleep() == slice, "not before")
        let rest = h.engine.tick(now: due)
        #expect(asleep() == slice + 1)
        #expect(h.engine.spokenForOrResuming == h.engine.spokenFor)
        #expect(H.logs(rest).filter { $0.contains("hosts were asleep") }.count == 1)
        #expect(H.logs(h.engine.tick(now: due + .seconds(1))).allSatisfy { !$0.contains("hosts were asleep") })
    }

    /// A question about a name one host still waiting for its slice owns alone speaks for that host at once, and is
    /// answered in the same pass; a browse, which names every host offering the type, brings nobody forward.
    @Test func aQuestionAboutAHostStillWaitingForItsSliceIsAnsweredAtOnce() throws {
        var h = H()
        let slice = EngineRules.resumeSlice
        let registrations = try Self.oneSliceAndOneMore(now: h.now, ownServices: true)
        _ = h.engine.restore(registrations, now: h.now)
        // Handed over in no particular order; the slices take them in order, so the last in order waits.
        _ = h.engine.resumeSpeaking(
            for: registrations.map(\.key).reversed(), stoppedFor: .seconds(2), now: h.now)
        let waiting = try #require(registrations.max { $0.key < $1.key })
        let instance = try #require(
            waiting.records.first { if case .srv = $0.record.rdata { true } else { false } }?.record.name)
        #expect(h.engine.state(of: waiting.key) == .starting)
        _ = h.ask("_http._tcp.local.", .ptr)
        #expect(h.engine.state(of: waiting.key) == .starting, "a browse brings nobody forward")
        let answers = h.ask(instance, .srv)
        #expect(answers.count == 1 && answers.first?.name == instance, "answered in the same pass")
        #expect(h.engine.state(of: waiting.key) == .asleep)
        // Its slice comes and finds it spoken for: the count of hosts spoken for again counts it once.
        let rest = h.engine.tick(now: h.now + EngineRules.resumeSliceInterval)
        #expect(!h.engine.isResuming && registrations.allSatisfy { h.engine.state(of: $0.key) == .asleep })
        #expect(H.logs(rest).contains { $0.contains("\(slice + 1) hosts were asleep") })
    }
}

extension ProxyEngineTests {
    /// The addresses a host takes back are pointed at its own MAC on every hand-back, not only after a wake of
    /// ours: a host woken by a person at its keyboard probes its name, and the neighbours that learned the proxy's
    /// MAC for its addresses must hear at once that they are the host's again (docs/waking.md §6).
    @Test func aHostThatWakesByItselfGetsItsAddressesPointedBackAtItsMAC() throws {
        var h = H()
        h.register(Lab.registration(addresses: [Lab.hostV4, H.hostGlobal]))
        h.run(for: .seconds(12))
        #expect(h.engine.state(of: h.key) == .asleep && h.engine.takeover?.isAnsweringAny(h.key) == true)
        let back = h.mdns(H.ownProbe(), from: Lab.hostV4)
        #expect(h.engine.state(of: h.key) == nil, "handed back")
        let frames = H.frames(back)
        let arp = frames.compactMap { $0.etherType == .arp ? try? ARPPacket(decoding: $0.payload) : nil }
        #expect(
            arp.count == 1 && arp.first?.senderMAC == Lab.hostMAC && arp.first?.senderIP == IPv4Address(192, 0, 2, 2))
        let advertisements = frames.compactMap { TakeoverHarness.nd($0)?.1 }.filter { $0.kind == .advertisement }
        guard case .v6(let global) = H.hostGlobal else { return }
        #expect(
            advertisements.count == 1 && advertisements.first?.target == global
                && advertisements.first?.targetLinkLayerAddress == Lab.hostMAC
                && advertisements.first?.flags.contains(.override) == true)
        #expect(!frames.contains(where: H.isMagic) && H.hostRecordsSent(back).isEmpty, "no wake and no goodbyes")
    }

    /// One address taken back by the host itself (it answered an ARP probe for it) is pointed back at its MAC
    /// too; the others stay answered for.
    @Test func anAddressTheHostAnswersForItselfIsPointedBackAtItsMAC() throws {
        var h = H()
        h.register(Lab.registration(addresses: [Lab.hostV4, H.hostGlobal]))
        h.run(for: .seconds(12))
        let taken = h.frame(TestFrames.arpAnnouncement(from: Lab.hostMAC, for: IPv4Address(192, 0, 2, 2)))
        let arp = H.frames(taken).compactMap { $0.etherType == .arp ? try? ARPPacket(decoding: $0.payload) : nil }
        #expect(arp.map(\.senderMAC) == [Lab.hostMAC] && arp.first?.senderIP == IPv4Address(192, 0, 2, 2))
        #expect(h.engine.takeover?.isAnsweringAny(h.key) == true, "the IPv6 address is still answered for")
    }

    /// An answer for one address (an ARP reply from the host's MAC) is a sign a sleeping NIC with ARP offload
    /// gives: the proxy lets that address go, but does not point the neighbours at the host's MAC, where a
    /// client's connection would reach the sleeping NIC and never the proxy that could wake it (docs/waking.md §6).
    @Test func anAnswerASleepingNICCanGiveIsNotPointedBack() throws {
        var h = H()
        h.register(Lab.registration(addresses: [Lab.hostV4, H.hostGlobal]))
        h.run(for: .seconds(12))
        let reply = ARPPacket(
            operation: .reply, senderMAC: Lab.hostMAC, senderIP: IPv4Address(192, 0, 2, 2), targetMAC: H.querierMAC,
            targetIP: IPv4Address(192, 0, 2, 20)
        ).frame(destination: H.querierMAC, source: Lab.hostMAC).bytes
        let answered = h.frame(reply)
        let arp = H.frames(answered).compactMap { $0.etherType == .arp ? try? ARPPacket(decoding: $0.payload) : nil }
        #expect(!arp.contains { $0.senderMAC == Lab.hostMAC }, "pointed the neighbours at a NIC that may be asleep")
    }
}
