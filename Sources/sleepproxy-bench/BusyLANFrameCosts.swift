import Foundation
import SleepProxyCore
import SleepProxyTestSupport
import SleepProxyWire

/// The engine's own time for each kind of ordinary frame a busy LAN brings (docs/busy-lan.md), with the
/// benchmark's 200 sleeping hosts held: a warm browse, a device's announcement, an ARP request and a neighbour
/// solicitation for other devices, an SSDP NOTIFY. None of them is about a held host, which is what nearly all of
/// a LAN's chatter is; each must cost at most `frameBudget`.
enum BusyLANFrameCosts {
    /// Issue "a busy LAN on a busy box": at most 50 µs of engine time per ordinary frame on the 2-core machine
    /// the project measures on; a Raspberry Pi core is two to three times slower.
    static let frameBudget = 50e-6

    static let device = MACAddress("02:53:50:10:00:2a")!
    static let deviceV4 = IPv4Address(169, 254, 100, 42)
    static let deviceV6 = IPv6Address(high: 0xFE80_0000_0000_0000, low: 0x0253_50FF_FE10_002A)

    static func run() {
        print(
            "Busy LAN, in the engine: one ordinary frame of each kind, \(BusyLANBenchmark.sleepers) sleeping hosts held"
        )
        var engine = ScaleBenchmarks.makeEngine(maximumHosts: BusyLANBenchmark.sleepers, ssdp: true)
        var now = Timestamp.seconds(100)
        _ = engine.setInterfaces([ScaleBenchmarks.proxyInterface], now: now)
        _ = ScaleBenchmarks.storm(engine: &engine, from: 0, count: BusyLANBenchmark.sleepers, now: &now)
        let settle = now + .seconds(15)
        while let deadline = engine.nextDeadline(), deadline <= settle {
            now = max(now, deadline)
            _ = ScaleBenchmarks.drain([], engine: &engine, now: now)
        }
        now = settle
        precondition(engine.hostsByState[.asleep] == BusyLANBenchmark.sleepers, "\(engine.hostsByState)")

        let index = ScaleBenchmarks.proxyInterface.index
        let source = IPAddress.v4(Self.deviceV4)
        // Each frame 50 µs after the last, so that the engine's time moves as it does on the link.
        var clock = now
        func next() -> Timestamp {
            clock = clock + .microseconds(50)
            return clock
        }
        // Browses for two types in turn: the same question twice within a second would be dropped as a storming
        // device's repeat (`RepeatedQuestions`) before it is decoded, which is not what is measured here.
        var turn = 0
        for (label, knownAnswers) in [
            ("warm browse (three known answers)", true), ("cold browse (no known answers)", false),
        ] {
            let browses = ["_airplay._tcp.local.", "_raop._tcp.local."].map {
                Self.browse($0, knownAnswers: knownAnswers)
            }
            _ = measure(label, iterations: 20_000, target: 1 / Self.frameBudget) {
                turn &+= 1
                return engine.receiveMDNS(
                    browses[turn & 1], from: source, port: 5353, destination: .v4(.mdnsGroup), interfaceIndex: index,
                    now: next()
                ).count
            }
        }
        let announcement = Self.announcement()
        _ = measure("a device's own announcement", iterations: 20_000, target: 1 / Self.frameBudget) {
            engine.receiveMDNS(
                announcement, from: source, port: 5353, destination: .v4(.mdnsGroup), interfaceIndex: index,
                now: next()
            ).count
        }
        let arp = TestFrames.arpRequest(
            from: Self.device, senderIP: Self.deviceV4, for: IPv4Address(169, 254, 100, 43))
        _ = measure("ARP request for another device", iterations: 20_000, target: 1 / Self.frameBudget) {
            engine.receiveFrame(arp, interfaceIndex: index, outgoing: false, now: next()).count
        }
        let solicitation = TestFrames.neighbourSolicitation(
            from: Self.device, source: Self.deviceV6,
            for: IPv6Address(high: 0xFE80_0000_0000_0000, low: 0x0253_50FF_FE10_002B))
        _ = measure("neighbour solicitation for another device", iterations: 20_000, target: 1 / Self.frameBudget) {
            engine.receiveFrame(solicitation, interfaceIndex: index, outgoing: false, now: next()).count
        }
        let notify = Array(
            """
            NOTIFY * HTTP/1.1\r
            HOST: 239.255.255.250:1900\r
            CACHE-CONTROL: max-age=1800\r
            LOCATION: http://169.254.100.42:49152/description.xml\r
            NT: urn:schemas-upnp-org:device:MediaRenderer:1\r
            NTS: ssdp:alive\r
            SERVER: Linux/6.1 UPnP/1.0 Renderer/1.0\r
            USN: uuid:2fac1234-31f8-11b4-a222-08002b34c003::urn:schemas-upnp-org:device:MediaRenderer:1\r
            \r

            """.utf8)
        _ = measure("SSDP NOTIFY from another device", iterations: 20_000, target: 1 / Self.frameBudget) {
            engine.receiveSSDP(
                notify, from: source, port: 1900, destination: .v4(IPv4Address(239, 255, 255, 250)),
                interfaceIndex: index, now: next()
            ).count
        }
    }

    /// A browse for a common type, as a device on the LAN sends it: with the three answers its cache holds (none
    /// of them ours), or with none, as a device that just joined.
    static func browse(_ name: String, knownAnswers: Bool) -> [UInt8] {
        let type = try! DNSName(parsing: name)
        let answers =
            knownAnswers
            ? (1...3).map {
                DNSResourceRecord(
                    name: type, ttl: 4500,
                    rdata: .ptr(PTRRecord(target: try! DNSName(parsing: "Speaker \($0).\(name)"))))
            } : []
        return DNSMessage(id: 0, questions: [DNSQuestion(name: type, type: .ptr)], answers: answers)
            .encoded(options: .mdns)
    }

    /// A device's announcement of its one service and address (not a host the proxy holds).
    static func announcement() -> [UInt8] {
        let instance = try! DNSName(parsing: "Speaker 42._airplay._tcp.local.")
        let host = try! DNSName(parsing: "speaker-42.local.")
        return DNSMessage(
            id: 0, flags: DNSHeaderFlags(response: true, authoritative: true),
            answers: [
                DNSResourceRecord(
                    name: try! DNSName(parsing: "_airplay._tcp.local."), ttl: 4500,
                    rdata: .ptr(PTRRecord(target: instance))),
                DNSResourceRecord(
                    name: instance, cacheFlush: true, ttl: 120,
                    rdata: .srv(SRVRecord(port: 7000, target: host))),
                DNSResourceRecord(
                    name: instance, cacheFlush: true, ttl: 4500,
                    rdata: .txt(try! TXTRecord(strings: [Array("model=Bench".utf8)]))),
                DNSResourceRecord(name: host, cacheFlush: true, ttl: 120, rdata: .a(.init(address: Self.deviceV4))),
            ]
        ).encoded(options: .mdns)
    }
}
