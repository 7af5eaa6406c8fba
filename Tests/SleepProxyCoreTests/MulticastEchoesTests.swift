import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

/// The proxy's own multicast coming back over loopback is known and skipped; everything else is still heard.
@Suite("Multicast echoes")
struct MulticastEchoesTests {
    typealias H = EngineHarness
    static let proxyAddress = IPAddress("192.0.2.1")!

    /// The last multicast the engine sent (the proxy's own advertisement, announced while the harness starts).
    static func lastMulticast(_ h: H) throws -> [UInt8] {
        let sent = H.transmissions(h.log.map(\.1)).filter {
            if case .multicast = $0.destination { return true } else { return false }
        }
        return try #require(sent.last).bytes
    }

    func receive(_ h: inout H, _ bytes: [UInt8], from source: IPAddress, port: UInt16 = 5353) -> [EngineAction] {
        h.engine.receiveMDNS(
            bytes, from: source, port: port, destination: .v4(.mdnsGroup), interfaceIndex: Lab.eth0.index, now: h.now)
    }

    @Test func theProxysOwnAnnouncementComingBackIsSkippedBeforeItIsInspected() throws {
        var h = H()
        let announcement = try Self.lastMulticast(h)
        let seen = h.engine.responder!.statistics.responsesSeen
        // Twice: the IPv4 and the IPv6 socket each hear their copy.
        #expect(self.receive(&h, announcement, from: Self.proxyAddress).isEmpty)
        #expect(self.receive(&h, announcement, from: Self.proxyAddress).isEmpty)
        #expect(h.engine.responder!.statistics.responsesSeen == seen)
        // The same bytes from anyone else, or from another port, are no echo: inspected as ever.
        _ = self.receive(&h, announcement, from: H.querier)
        #expect(h.engine.responder!.statistics.responsesSeen == seen + 1)
        _ = self.receive(&h, announcement, from: Self.proxyAddress, port: 40000)
        #expect(h.engine.responder!.statistics.responsesSeen == seen + 1, "not from 5353: ignored as a response")
        // Past the window the copy is inspected again (correct, only slower).
        h.now = h.now + MulticastEchoes.window + .milliseconds(1)
        _ = self.receive(&h, announcement, from: Self.proxyAddress)
        #expect(h.engine.responder!.statistics.responsesSeen == seen + 2)
    }

    @Test func aResponderOnTheProxysOwnBoxIsStillHeardAndCanConflict() throws {
        // avahi on the proxy's box sends from the proxy's own address and port 5353, but never the proxy's
        // bytes: its claim on a sleeping host's name is still a conflict.
        var h = H()
        h.register()
        h.run(for: .seconds(12))
        #expect(h.engine.state(of: h.key) == .asleep)
        let claim = DNSMessage(
            flags: DNSHeaderFlags(response: true, authoritative: true),
            answers: [
                DNSResourceRecord(
                    name: H.hostName, cacheFlush: true, ttl: 120,
                    rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 99))))
            ])
        let conflicts = h.engine.responder!.statistics.conflicts
        _ = self.receive(&h, claim.encoded(options: .mdns), from: Self.proxyAddress)
        #expect(h.engine.responder!.statistics.conflicts == conflicts + 1)
    }

    @Test func digestsAreBoundedAndTheOldestGoesFirst() {
        var echoes = MulticastEchoes()
        let now = Lab.t0
        func packet(_ n: Int) -> [UInt8] { withUnsafeBytes(of: n.bigEndian) { Array($0) } }
        for n in 0..<MulticastEchoes.capacity { echoes.remember(packet(n), now: now) }
        #expect(echoes.count == MulticastEchoes.capacity)
        let firstKept = echoes.isEcho(packet(0), now: now)
        #expect(firstKept)
        echoes.remember(packet(MulticastEchoes.capacity), now: now)
        #expect(echoes.count == MulticastEchoes.capacity)
        let first = echoes.isEcho(packet(0), now: now)
        let second = echoes.isEcho(packet(1), now: now)
        let newest = echoes.isEcho(packet(MulticastEchoes.capacity), now: now)
        #expect(!first && second && newest)
    }

    /// The same bytes sent again and again within the window (the proxy's own advertisement, a goodbye repeated)
    /// take no more room than the bound either (N and N+1), and stay known.
    @Test func repeatsAreBoundedToo() {
        var echoes = MulticastEchoes()
        for _ in 0..<MulticastEchoes.capacity { echoes.remember([7, 7, 7], now: Lab.t0) }
        #expect(echoes.queued == MulticastEchoes.capacity && echoes.count == 1)
        echoes.remember([7, 7, 7], now: Lab.t0)
        #expect(echoes.queued == MulticastEchoes.capacity && echoes.count == 1)
        let known = echoes.isEcho([7, 7, 7], now: Lab.t0)
        #expect(known)
    }

    @Test func aPacketSentAgainKeepsItsNewerTime() {
        var echoes = MulticastEchoes()
        echoes.remember([1, 2, 3], now: Lab.t0)
        echoes.remember([1, 2, 3], now: Lab.t0 + .seconds(4))
        // The first sending's time has passed the window; the second's has not.
        let within = echoes.isEcho([1, 2, 3], now: Lab.t0 + .seconds(6))
        let past = echoes.isEcho([1, 2, 3], now: Lab.t0 + .seconds(10))
        #expect(within && !past)
        #expect(echoes.count == 0)
    }
}
