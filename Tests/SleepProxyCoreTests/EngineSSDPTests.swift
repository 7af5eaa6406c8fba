import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

/// SSDP inside the composed engine: when the proxy speaks, what wakes the host, how it is handed back.
@Suite("Composed engine: SSDP for sleeping hosts")
struct EngineSSDPTests {
    typealias H = EngineHarness
    static let tv = IPAddress("192.0.2.30")!
    static let tvMAC = MACAddress("02:53:50:00:00:30")!

    static func ssdp(_ actions: [EngineAction]) -> [SSDPTransmission] {
        actions.compactMap { if case .ssdp(let t) = $0 { return t } else { return nil } }
    }

    /// The media server registers while awake, answers the proxy's search, then sleeps.
    static func asleep() -> H {
        var h = H(ssdp: true)
        h.register()
        for type in MediaServer.types { h.ssdpIn(MediaServer.response(type), from: Lab.hostV4) }
        h.run(for: .seconds(12))
        return h
    }

    @Test func aRegisteringHostIsAskedAndItsAnswersAreNotTakenForASleepingHostsNeighbours() throws {
        var h = H(ssdp: true)
        let actions = h.register()
        let searches = Self.ssdp(actions)
        #expect(searches.contains { $0.destination == .unicast(address: Lab.hostV4, port: 1900, interfaceIndex: 2) })
        // The host answers the search while still awake: learned, and the host is still not spoken for.
        for type in MediaServer.types { h.ssdpIn(MediaServer.response(type), from: Lab.hostV4) }
        #expect(h.engine.ssdp?.entries(of: h.key).count == MediaServer.types.count)
        #expect(h.engine.state(of: h.key) == .starting)
        #expect(Self.ssdp(h.ssdpIn(MediaServer.search("ssdp:all", mx: nil), from: Self.tv, port: 41000)).isEmpty)
        h.run(for: .seconds(12))
        #expect(h.engine.state(of: h.key) == .asleep)
        let answers = Self.ssdp(h.ssdpIn(MediaServer.search("ssdp:all", mx: nil), from: Self.tv, port: 41000))
        #expect(answers.count == MediaServer.types.count)
    }

    @Test func openingTheServerWakesItButItsAnnouncementsDoNot() throws {
        var h = Self.asleep()
        #expect(h.engine.state(of: h.key) == .asleep)
        // The proxy's own announcements for the host, over an hour, wake nothing.
        let hour = h.run(for: .seconds(3600))
        #expect(Self.ssdp(hour.map(\.1)).count >= MediaServer.types.count)
        #expect(H.wakeEvents(hour.map(\.1)).isEmpty)
        // A control point fetching the description (port 8200, not a registered service) wakes it.
        let syn = TestFrames.tcp(
            from: Self.tvMAC, to: Lab.proxyMAC, source: Self.tv, destination: Lab.hostV4, sourcePort: 40100, port: 8200)
        #expect(H.wakeEvents(h.deliver(syn)).map(\.kind) == [.wake])
    }

    @Test func withoutWhatSSDPLearnedTheDescriptionPortWakesNothing() throws {
        var h = H(ssdp: true)
        h.register()
        h.run(for: .seconds(12))
        let syn = TestFrames.tcp(
            from: Self.tvMAC, to: Lab.proxyMAC, source: Self.tv, destination: Lab.hostV4, sourcePort: 40100, port: 8200)
        #expect(H.wakeEvents(h.frame(syn)).allSatisfy { $0.kind == .ignored })
    }

    @Test func theHostsOwnAnnouncementOnResumeHandsItBackWithoutByebye() throws {
        var h = Self.asleep()
        let back = h.ssdpIn(
            MediaServer.alive("upnp:rootdevice"), from: Lab.hostV4, destination: IPAddress("239.255.255.250")!)
        #expect(H.journal(back) == [.remove(h.key)])
        #expect(H.logs(back).contains { $0.contains("hand-back") && $0.contains("SSDP from 192.0.2.2") })
        #expect(h.engine.handBacks == [.ssdp: 1])
        let after = back + h.run(for: .seconds(3600)).map(\.1)
        #expect(Self.ssdp(after).isEmpty, "no byebye, no announcement, no answer for a host that is back")
        #expect(Self.ssdp(h.ssdpIn(MediaServer.search("ssdp:all", mx: nil), from: Self.tv, port: 41000)).isEmpty)
        // What it advertises is kept for its next registration, which needs no search answered.
        h.register(Lab.registration(sequence: 1, addresses: [Lab.hostV4, H.hostGlobal]))
        #expect(h.engine.ssdp?.entries(of: h.key).count == MediaServer.types.count)
    }

    @Test func expiryAndForgetWithGoodbyesSayByebyeAndASilentForgetDoesNot() throws {
        for (name, end) in [
            ("forget --goodbyes", { (h: inout H) in h.engine.forget(h.key, goodbyes: true, now: h.now) }),
            ("forget", { (h: inout H) in h.engine.forget(h.key, goodbyes: false, now: h.now) }),
        ] as [(String, (inout H) -> [EngineAction])] {
            var h = Self.asleep()
            let actions = end(&h)
            let byebyes = H.ssdpMessages(actions).filter { $0.notificationSubtype == "ssdp:byebye" }
            #expect(byebyes.count == (name == "forget" ? 0 : MediaServer.types.count), "\(name)")
        }
        var h = Self.asleep()
        let expired = h.run(for: .seconds(7300)).map(\.1)
        let byebyes = H.ssdpMessages(expired).filter { $0.notificationSubtype == "ssdp:byebye" }
        #expect(Set(byebyes.compactMap(\.uniqueServiceName)) == Set(MediaServer.types.map(MediaServer.usn)))
    }
}

extension EngineHarness {
    @discardableResult
    mutating func ssdpIn(
        _ bytes: [UInt8], from source: IPAddress, port: UInt16 = 1900,
        destination: IPAddress = IPAddress("192.0.2.1")!
    ) -> [EngineAction] {
        let actions = self.engine.receiveSSDP(
            bytes, from: source, port: port, destination: destination, interfaceIndex: Lab.eth0.index, now: self.now)
        self.record(actions)
        return actions
    }

    static func ssdpMessages(_ actions: [EngineAction]) -> [SSDPMessage] {
        actions.compactMap {
            if case .ssdp(let t) = $0 { return try? SSDPMessage(decoding: t.bytes) } else { return nil }
        }
    }
}

extension EngineSSDPTests {
    @Test func whatWasLearnedBeforeARestartIsAnsweredAndWakesAfterIt() throws {
        let before = Self.asleep()
        let learned = try #require(before.engine.ssdp?.learnedByHost)
        #expect(learned[before.key]?.count == MediaServer.types.count)
        // A new engine restores the registration from the journal and the entries from the saved copy.
        var h = H(ssdp: true)
        let registration = try #require(before.engine.registrar.store[before.key])
        h.record(h.engine.restore([registration], now: h.now))
        let restored = h.engine.restoreSSDP(learned, from: "ssdp.json")
        #expect(
            restored.count == 1
                && H.logs(restored) == ["state: restored what 1 hosts advertise over SSDP from ssdp.json"])
        let stranger = h.engine.restoreSSDP(
            [OwnerKey(interface: "eth0", primaryMAC: MACAddress("02:53:50:00:00:09")!): learned[before.key]!],
            from: "ssdp.json")
        #expect(
            stranger.count == 1
                && H.logs(stranger) == [
                    "state: restored what 0 hosts advertise over SSDP from ssdp.json (1 no longer held)"
                ])
        #expect(h.engine.ssdp?.learnedByHost.count == 1, "entries of a host no longer held are dropped")
        h.run(for: .seconds(12))
        #expect(h.engine.state(of: h.key) == .asleep)
        #expect(Self.ssdp(h.ssdpIn(MediaServer.search("ssdp:all", mx: nil), from: Self.tv, port: 41000)).count == 6)
        let syn = TestFrames.tcp(
            from: Self.tvMAC, to: Lab.proxyMAC, source: Self.tv, destination: Lab.hostV4, sourcePort: 40100, port: 8200)
        #expect(H.wakeEvents(h.deliver(syn)).map(\.kind) == [.wake])
    }
}
