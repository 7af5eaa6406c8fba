import CSleepProxyLinux
import Foundation
import SleepProxyCore
import SleepProxyTestSupport
import SleepProxyWire

/// The composed engine in process, with as many hosts as a campus VLAN holds: what one registration, one
/// response inspection and one timer pass cost with 100, 1,000 and 10,000 hosts held. The engine's own mDNS
/// transmissions are fed back to it, as the kernel loops them back to the daemon's socket.
enum ScaleBenchmarks {
    static let proxyInterface = InterfaceContext(
        name: "eth0", index: 2, macAddress: MACAddress("02:53:50:00:00:01")!,
        prefixes: [IPPrefix("169.254.0.1/16")!, IPPrefix("fe80::1/64")!]
    )
    static let proxyAddress = IPAddress("169.254.0.1")!

    /// A typical Mac (docs/scale.md): five services, one IPv4 link-local and one fe80 address, 24 records.
    static func host(_ n: Int, id: UInt16 = 1) -> (message: DNSMessage, source: IPAddress) {
        let v4 = self.address(n)
        let v6 = self.linkLocal(n)
        let services = ["_svc0._tcp", "_svc1._tcp", "_svc2._tcp", "_svc3._tcp", "_svc4._tcp"].enumerated().map {
            ("Host \(n).\($0.element)", UInt16(8000 + $0.offset))
        }
        let message = SampleRegistration.message(
            id: id, mac: Self.mac(n), host: try! DNSName(parsing: "host\(n).local."), addresses: [v4, v6],
            services: services)
        precondition(message.updates.count == 24, "\(message.updates.count) records")
        return (message, v4)
    }

    static func mac(_ n: Int) -> MACAddress { MACAddress(rawValue: 0x0253_5001_0000 + UInt64(n)) }

    /// 169.254.1.0 on: one address per host, as the lab gives each simulated host its own.
    static func address(_ n: Int) -> IPAddress { .v4(IPv4Address(rawValue: 0xA9FE_0100 + UInt32(n))) }

    /// The host's fe80 address (in its registration; the lab resolves it, as it does the IPv4 one).
    static func linkLocal(_ n: Int) -> IPAddress {
        .v6(IPv6Address(high: 0xFE80_0000_0000_0000, low: 0x0253_50FF_FE00_0000 + UInt64(n)))
    }

    static func makeEngine(maximumHosts: Int, ssdp: Bool = false) -> ProxyEngine {
        var configuration = RegistrationConfiguration()
        configuration.maximumHosts = maximumHosts
        configuration.maximumRecords = maximumHosts * 25
        configuration.rateLimitBurst = 1 << 30
        configuration.rateLimitPerSecond = 1 << 30
        let responder = Responder(
            configuration: ResponderConfiguration(
                instanceLabel: "20-40-10-65.0 Bench", hostLabel: "bench", registrationPort: 5599, seed: 7))
        return ProxyEngine(
            registrar: Registrar(configuration: configuration), responder: responder, takeover: Takeover(),
            ssdp: ssdp ? SSDPProxy(seed: 7) : nil)
    }

    /// Registers `count` hosts, one per millisecond of engine time, running timers and feeding the engine's own
    /// multicast back to it as a daemon's loop would; returns the CPU time the engine spent.
    static func storm(engine: inout ProxyEngine, from first: Int, count: Int, now: inout Timestamp) -> (
        cpu: Duration, loopback: Int
    ) {
        let clock = ContinuousClock()
        var loopback = 0
        var spent = Duration.zero
        for n in first..<(first + count) {
            let (message, source) = self.host(n)
            let bytes = message.encoded(options: .appleUpdate)
            let start = clock.now
            now = now + .milliseconds(1)
            let actions = engine.receiveRegistration(bytes, from: source, on: self.proxyInterface, now: now)
            loopback += self.drain(actions, engine: &engine, now: now)
            spent += clock.now - start
        }
        return (spent, loopback)
    }

    /// Runs every timer due by `now` and loops the engine's multicast back to it; returns the packets looped.
    static func drain(_ initial: [EngineAction], engine: inout ProxyEngine, now: Timestamp) -> Int {
        var actions = initial
        while let deadline = engine.nextDeadline(), deadline <= now { actions += engine.tick(now: now) }
        var looped = 0
        var index = 0
        while index < actions.count {
            defer { index += 1 }
            guard case .transmit(let transmission) = actions[index], case .multicast = transmission.destination else {
                continue
            }
            looped += 1
            actions += engine.receiveMDNS(
                transmission.bytes, from: self.proxyAddress, port: 5353, destination: .v4(.mdnsGroup),
                interfaceIndex: self.proxyInterface.index, now: now)
        }
        return looped
    }

    static func run() {
        print("Scale: the composed engine with many hosts held (24 records each, 1,000 registrations/s of engine time)")
        var perRegistration: [Int: Duration] = [:]
        let sizes =
            ProcessInfo.processInfo.environment["BENCH_SCALE_SIZES"].map {
                $0.split(separator: ",").compactMap { Int($0) }
            } ?? (smokeRun ? [100] : [100, 1_000, 10_000])
        for size in sizes {
            var engine = self.makeEngine(maximumHosts: size)
            var now = Timestamp.seconds(100)
            _ = engine.setInterfaces([self.proxyInterface], now: now)
            let heapBefore = csp_heap_bytes_in_use()
            let (stormCPU, stormLoopback) = self.storm(engine: &engine, from: 0, count: size, now: &now)
            // Let every host fall asleep and be announced (all of it work the registrations caused), a millisecond
            // deadline at a time, as the daemon's loop wakes for its timers.
            let clock = ContinuousClock()
            let settleStart = clock.now
            var settleLoopback = 0
            let settle = now + .seconds(15)
            while let deadline = engine.nextDeadline(), deadline <= settle {
                now = max(now, deadline)
                settleLoopback += self.drain([], engine: &engine, now: now)
            }
            now = settle
            let settleCPU = clock.now - settleStart
            let cost = (stormCPU + settleCPU) / size
            perRegistration[size] = cost
            let heapAfter = csp_heap_bytes_in_use()
            precondition(engine.registrar.store.hostCount == size, "held \(engine.registrar.store.hostCount)")
            let asleep = engine.hostsByState[.asleep] ?? 0
            print(
                "  \(format(Double(size))) hosts: \(format(cost.nanoseconds / 1000)) µs of engine CPU per registration, all it causes included (storm \(stormCPU.formattedMilliseconds), then 15 s of timers \(settleCPU.formattedMilliseconds); \(stormLoopback + settleLoopback) own packets looped back); \(asleep) asleep; engine heap \(format(Double(Int(heapAfter) - Int(heapBefore)) / Double(size))) bytes/host"
            )
            // One legacy SRV query for one host's service, and one response from elsewhere for a shared name.
            let query = DNSMessage(
                id: 7,
                questions: [DNSQuestion(name: try! DNSName(parsing: "Host \(size / 2)._svc0._tcp.local."), type: .srv)]
            ).encoded(options: .mdns)
            let querier = IPAddress("169.254.200.1")!
            let responder = IPAddress("169.254.200.2")!
            _ = measure("  legacy SRV query with \(size) hosts held", iterations: 20_000) {
                engine.receiveMDNS(
                    query, from: querier, port: 40_000, destination: .v4(.mdnsGroup),
                    interfaceIndex: self.proxyInterface.index, now: now
                ).count
            }
            let shared = DNSMessage(
                id: 0, flags: DNSHeaderFlags(response: true, authoritative: true),
                answers: [
                    DNSResourceRecord(
                        name: "_svc0._tcp.local.", ttl: 4500,
                        rdata: .ptr(PTRRecord(target: try! DNSName(parsing: "Other._svc0._tcp.local."))))
                ]
            ).encoded(options: .mdns)
            _ = measure("  response for a shared name, \(size) hosts held", iterations: 20_000) {
                engine.receiveMDNS(
                    shared, from: responder, port: 5353, destination: .v4(.mdnsGroup),
                    interfaceIndex: self.proxyInterface.index, now: now
                ).count
            }
            let start = clock.now
            for _ in 0..<1_000 { _ = engine.nextDeadline() }
            print("    next deadline with \(size) hosts held: \(format((clock.now - start).nanoseconds / 1000)) ns")
            self.restart(engine, now: now)
        }
        if let small = perRegistration[100], let large = perRegistration[10_000] {
            let ratio = large.nanoseconds / small.nanoseconds
            print(
                String(
                    format: "  per-registration CPU at 10,000 hosts / at 100: %.2f×  target ≤ 1.5×: %@", ratio,
                    ratio <= 1.5 ? "met" : "NOT MET"))
        }
    }
}

extension ScaleBenchmarks {
    /// The same hosts after a clean restart a moment ago: restored and spoken for again at once
    /// (`ProxyEngine.resumeSpeaking`), then 15 s of their timers. The heap in use after the restore and at its
    /// highest meanwhile, against the live engine's: restoring must never need more than registering did.
    static func restart(_ live: ProxyEngine, now start: Timestamp) {
        let registrations = live.registrar.store.owners.values.sorted { $0.key < $1.key }
        let heapBefore = Int(csp_heap_bytes_in_use())
        var engine = self.makeEngine(maximumHosts: registrations.count)
        var now = start
        _ = engine.restore(registrations, now: now)
        _ = engine.setInterfaces([self.proxyInterface], now: now)
        let restored = Int(csp_heap_bytes_in_use()) - heapBefore
        var peak = restored
        let actions = engine.resumeSpeaking(for: registrations.map(\.key), stoppedFor: .seconds(5), now: now)
        peak = max(peak, Int(csp_heap_bytes_in_use()) - heapBefore)
        _ = self.drain(actions, engine: &engine, now: now)
        let settle = now + .seconds(15)
        while let deadline = engine.nextDeadline(), deadline <= settle {
            now = max(now, deadline)
            _ = self.drain([], engine: &engine, now: now)
            peak = max(peak, Int(csp_heap_bytes_in_use()) - heapBefore)
        }
        let count = Double(registrations.count)
        print(
            "  restart with \(format(count)) hosts spoken for again: engine heap \(format(Double(restored) / count)) bytes/host restored, \(format(Double(peak) / count)) at its highest"
        )
        self.restartWork(registrations, now: start)
    }

    /// The two halves of a restart's work on one core, each the median of 5 rounds: decoding the journal of
    /// `registrations` and restoring the decoded hosts into a fresh engine. The daemon runs them side by side on
    /// two threads (docs/scale.md), so on two idle cores its first answer follows the longer of the two.
    static func restartWork(_ registrations: [OwnerRegistration], now: Timestamp) {
        let timeBase = TimeBase(bootID: Array(repeating: 7, count: 16), now: now, wallNanoseconds: 1_000_000_000)
        var journal: [UInt8] = []
        for registration in registrations {
            journal += RegistrationJournal.encode(.put(registration), timeBase: timeBase)
        }
        let clock = ContinuousClock()
        var decoding: [Duration] = []
        var restoring: [Duration] = []
        let rounds = smokeRun ? 1 : 5
        for _ in 0..<rounds {
            var start = clock.now
            let replay = RegistrationJournal.replay(journal, timeBase: timeBase)
            decoding.append(clock.now - start)
            precondition(replay.registrations.count == registrations.count, "replayed \(replay.registrations.count)")
            var engine = self.makeEngine(maximumHosts: registrations.count)
            start = clock.now
            _ = engine.restore(replay.registrations, now: now)
            restoring.append(clock.now - start)
        }
        let median = { (times: [Duration]) in times.sorted()[times.count / 2] }
        print(
            "  the restart's work on one core, \(format(Double(registrations.count))) hosts (\(journal.count / 1024) KiB of journal): decoding \(median(decoding).formattedMilliseconds), restoring \(median(restoring).formattedMilliseconds)"
        )
    }
}

extension Duration {
    var nanoseconds: Double {
        Double(self.components.seconds) * 1e9 + Double(self.components.attoseconds) / 1e9
    }
}
