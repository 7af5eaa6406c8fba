import CSleepProxyLinux
import NIOCore
import SleepProxyCore
import SleepProxyTestSupport
import SleepProxyWire

/// What adoption costs (docs/adoption.md): every frame an adopted host sends goes through the learning path, every
/// other frame pays the check for an adopted MAC, and each adopted host holds what it published.
enum AdoptionBenchmarks {
    static let proxyMAC = MACAddress("02:53:50:00:00:01")!
    static let context = InterfaceContext(
        name: "eth0", index: 2, macAddress: proxyMAC, prefixes: [IPPrefix("192.0.2.1/24")!])

    /// A NAS's announcement: its address, and for each of `services` a PTR, an SRV and a TXT, plus the service
    /// type's PTR under `_services._dns-sd._udp`.
    static func announcement(host: Int, services: Int) -> DNSMessage {
        let name = try! DNSName(parsing: "nas\(host).local.")
        var answers = [
            DNSResourceRecord(
                name: name, cacheFlush: true, ttl: 120,
                rdata: .a(ARecord(address: IPv4Address(rawValue: 0xC000_0200 &+ UInt32(host % 250 + 2)))))
        ]
        for n in 0..<services {
            let type = try! DNSName(parsing: "_svc\(n)._tcp.local.")
            let instance = try! DNSName(parsing: "NAS \(host)._svc\(n)._tcp.local.")
            answers += [
                DNSResourceRecord(name: type, ttl: 4500, rdata: .ptr(PTRRecord(target: instance))),
                DNSResourceRecord(
                    name: instance, cacheFlush: true, ttl: 120,
                    rdata: .srv(SRVRecord(priority: 0, weight: 0, port: UInt16(8000 + n), target: name))),
                DNSResourceRecord(
                    name: instance, cacheFlush: true, ttl: 4500,
                    rdata: .txt(try! TXTRecord(["path=/", "model=DS920+", "version=7.2"]))),
                DNSResourceRecord(name: Adoption.servicesName, ttl: 4500, rdata: .ptr(PTRRecord(target: type))),
            ]
        }
        return DNSMessage(flags: DNSHeaderFlags(response: true, authoritative: true), answers: answers)
    }

    static func frame(_ message: DNSMessage, from mac: MACAddress, host: Int) -> [UInt8] {
        TestFrames.udp(
            from: mac, to: MACAddress("01:00:5e:00:00:fb")!,
            source: .v4(IPv4Address(rawValue: 0xC000_0200 &+ UInt32(host % 250 + 2))), destination: .v4(.mdnsGroup),
            sourcePort: 5353, port: 5353, payload: message.encoded(options: .mdns))
    }

    /// The engine with the packet side only, serving the lab's interface.
    static func engine() -> ProxyEngine {
        var engine = ProxyEngine(
            registrar: Registrar(), responder: nil, takeover: Takeover(configuration: TakeoverConfiguration()))
        _ = engine.setInterfaces([Self.context], now: .seconds(1000))
        return engine
    }

    static func run() throws {
        print("Adoption (docs/adoption.md)")
        let macs = (0..<AdoptionRules.maximumAdopted).map { MACAddress(rawValue: 0x0253_5003_0000 + UInt64($0)) }
        var engine = Self.engine()
        var now = Timestamp.seconds(1000)
        _ = try engine.setAdopted(Set(macs), now: now)
        // A NAS answering: the same response word for word (another querier's question), and one that differs
        // from the last (every record looked up among what it taught, and refreshed).
        let nas = Self.frame(Self.announcement(host: 0, services: 6), from: macs[0], host: 0)
        var reordered = Self.announcement(host: 0, services: 6)
        reordered.answers.reverse()
        let nasAgain = Self.frame(reordered, from: macs[0], host: 0)
        _ = measure("mDNS response of an adopted NAS repeated word for word", iterations: 200_000) {
            now = now + .microseconds(50)
            return engine.receiveFrame(nas, interfaceIndex: 2, outgoing: false, now: now).count
        }
        var flip = false
        _ = measure("mDNS response of an adopted NAS learned (25 records)", iterations: 20_000) {
            now = now + .milliseconds(200)
            flip.toggle()
            return engine.receiveFrame(flip ? nasAgain : nas, interfaceIndex: 2, outgoing: false, now: now).count
        }
        // Its other traffic: a sign of life, nothing to learn.
        let netbios = TestFrames.udp(
            from: macs[0], to: .broadcast, source: IPAddress("192.0.2.2")!, destination: IPAddress("192.0.2.255")!,
            sourcePort: 137, port: 137)
        _ = measure("other frame of an adopted host (a NetBIOS broadcast)", iterations: 200_000) {
            now = now + .microseconds(10)
            return engine.receiveFrame(netbios, interfaceIndex: 2, outgoing: false, now: now).count
        }
        // Everyone else's frames pay for the check of their source MAC: the same engine, before and after.
        var plain = Self.engine()
        let stranger = ARPPacket(
            operation: .request, senderMAC: MACAddress("02:53:50:00:09:99")!, senderIP: IPv4Address(192, 0, 2, 99),
            targetMAC: .zero, targetIP: IPv4Address(192, 0, 2, 1)
        ).frame(destination: .broadcast, source: MACAddress("02:53:50:00:09:99")!).bytes
        for adopted in [0, macs.count] {
            _ = try plain.setAdopted(Set(macs.prefix(adopted)), now: now)
            _ = measure("ARP frame of a machine not adopted, \(adopted) adopted", iterations: 200_000) {
                now = now + .microseconds(10)
                return plain.receiveFrame(stranger, interfaceIndex: 2, outgoing: false, now: now).count
            }
        }
        // A forged MAC repeating the largest announcement a packet holds, against a host holding its 400 records.
        var full = Self.engine()
        _ = try full.setAdopted([macs[1]], now: now)
        for part in 0..<4 {
            let message = Self.announcement(host: 1000 + part, services: 25)
            _ = full.receiveFrame(
                Self.frame(message, from: macs[1], host: 1), interfaceIndex: 2, outgoing: false, now: now)
        }
        let big = [2000, 2001].map { Self.frame(Self.announcement(host: $0, services: 25), from: macs[1], host: 1) }
        var which = 0
        _ = measure(
            "101-record announcement, new each time, against \(full.adoptedHosts.first?.records.count ?? 0) records held",
            iterations: 2_000
        ) {
            now = now + .milliseconds(200)
            which = 1 - which
            return full.receiveFrame(big[which], interfaceIndex: 2, outgoing: false, now: now).count
        }
        print(
            "  a forged MAC flooding such announcements is learned \(AdoptionRules.maximumLearnedPerSecond) times a second at most"
        )
        // Memory: 32 NASes, each having published its 6 services.
        var fresh = Self.engine()
        let frames = macs.enumerated().map {
            Self.frame(Self.announcement(host: $0.offset, services: 6), from: $0.element, host: $0.offset)
        }
        let before = csp_heap_bytes_in_use()
        _ = try fresh.setAdopted(Set(macs), now: now)
        for frame in frames { _ = fresh.receiveFrame(frame, interfaceIndex: 2, outgoing: false, now: now) }
        let after = csp_heap_bytes_in_use()
        let records = fresh.adoptedHosts.reduce(0) { $0 + $1.records.count }
        print(
            "  memory per adopted host with 6 services (\(records / macs.count) records): \((after - before) / macs.count) bytes of heap (\(macs.count) hosts)"
        )
        // The capture filter with 32 adopted MACs.
        let program = CaptureFilter.program(v4: [IPv4Address(192, 0, 2, 2)], v6: [], macs: macs)
        print("  capture filter: \(program.count) instructions with \(macs.count) adopted MACs")
    }
}
