import NIOCore
import SleepProxyCore
import SleepProxyTestSupport
import SleepProxyWire

/// What watching an awake adopted host costs the link, and how soon a sleeping one is held (docs/adoption.md §3):
/// the engine itself, its time simulated, the host answering every question at once as an awake responder does.
/// Counts and times, not speed: the same on any machine.
enum AdoptionWatchBenchmark {
    static let mac = MACAddress("02:53:50:00:00:30")!
    static let name: DNSName = "pc.local."
    static let type: DNSName = "_smb._tcp.local."
    static let instance: DNSName = "PC._smb._tcp.local."
    static let context = InterfaceContext(
        name: "eth0", index: 2, macAddress: MACAddress("02:53:50:00:00:01")!,
        prefixes: [IPPrefix("192.0.2.1/24")!, IPPrefix("fe80::53:50ff:fe00:1/64")!])

    static func announcement(ttl: UInt32 = 120, onlyPTR: Bool = false) -> [UInt8] {
        let ptr = DNSResourceRecord(name: type, ttl: ttl == 0 ? 0 : 4500, rdata: .ptr(PTRRecord(target: instance)))
        let answers =
            onlyPTR
            ? [ptr]
            : [
                DNSResourceRecord(
                    name: name, cacheFlush: true, ttl: ttl, rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 30)))),
                ptr,
                DNSResourceRecord(
                    name: instance, cacheFlush: true, ttl: ttl,
                    rdata: .srv(SRVRecord(priority: 0, weight: 0, port: 445, target: name))),
            ]
        return TestFrames.udp(
            from: mac, to: MACAddress("01:00:5e:00:00:fb")!, source: IPAddress("192.0.2.30")!,
            destination: .v4(.mdnsGroup), sourcePort: 5353, port: 5353,
            payload: DNSMessage(flags: DNSHeaderFlags(response: true, authoritative: true), answers: answers).encoded(
                options: .mdns))
    }

    /// The host's unicast answer to a question for its name.
    static let answer = TestFrames.udp(
        from: mac, to: MACAddress("02:53:50:00:00:01")!, source: IPAddress("192.0.2.30")!,
        destination: IPAddress("192.0.2.1")!, sourcePort: 5353, port: 5353,
        payload: DNSMessage(
            flags: DNSHeaderFlags(response: true, authoritative: true),
            answers: [
                DNSResourceRecord(
                    name: name, cacheFlush: true, ttl: 120, rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 30))))
            ]
        ).encoded(options: .mdns))

    struct Watch {
        var engine: ProxyEngine
        var now = Timestamp.seconds(1000)
        var questions = 0
        var answers = 0
        /// Whether the host answers (awake) or not (asleep).
        var awake = true
        var heldAt: Timestamp?
        var ptrAnnouncedAt: Timestamp?

        init() throws {
            self.engine = ProxyEngine(
                registrar: Registrar(),
                responder: Responder(
                    configuration: ResponderConfiguration(
                        instanceLabel: "20-40-10-65.0 Bench", hostLabel: "bench", registrationPort: 5599, seed: 7)),
                takeover: Takeover())
            _ = self.engine.setInterfaces([AdoptionWatchBenchmark.context], now: self.now)
            _ = try self.engine.setAdopted([AdoptionWatchBenchmark.mac], now: self.now)
        }

        mutating func frame(_ bytes: [UInt8]) {
            self.look(at: self.engine.receiveFrame(bytes, interfaceIndex: 2, outgoing: false, now: self.now))
        }

        /// Runs the engine's deadlines for `duration`; the host answers each question while awake.
        mutating func run(for duration: Duration) {
            let end = self.now + duration
            while let deadline = self.engine.nextDeadline(), deadline <= end {
                self.now = max(self.now, deadline)
                self.look(at: self.engine.tick(now: self.now))
            }
            self.now = end
        }

        mutating func look(at actions: [EngineAction]) {
            for case .transmit(let transmission) in actions {
                let message = transmission.message
                if message.questions.contains(where: { $0.name == AdoptionWatchBenchmark.name && $0.unicastResponse }) {
                    self.questions += 1
                    if self.awake {
                        self.answers += 1
                        self.frame(AdoptionWatchBenchmark.answer)
                    }
                }
                if self.ptrAnnouncedAt == nil, !self.awake,
                    message.answers.contains(where: { $0.name == AdoptionWatchBenchmark.type && $0.ttl > 0 })
                {
                    self.ptrAnnouncedAt = self.now
                }
            }
            if self.heldAt == nil, !self.awake,
                self.engine.state(of: OwnerKey(interface: "eth0", primaryMAC: AdoptionWatchBenchmark.mac)) == .asleep
            {
                self.heldAt = self.now
            }
        }
    }

    static func seconds(_ duration: Duration) -> String {
        let value = Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
        return String(format: "%.1f s", value)
    }

    static func run() throws {
        print("Adoption: the watch of an awake host, and the time to hold a sleeping one (docs/adoption.md §3)")
        // An idle awake host for ten minutes: every packet of the watch, the proxy's and the host's.
        var idle = try Watch()
        idle.frame(Self.announcement())
        idle.run(for: .seconds(600))
        let perMinute = Double(idle.questions + idle.answers) / 10
        print(
            "  idle awake host, 10 minutes: \(idle.questions) questions, \(idle.answers) answers, "
                + String(format: "%.1f packets a minute (goal: at most 6)", perMinute))
        // It falls asleep silently after that idle spell, at any moment of the watch's 25 s (one a second).
        var held: [Duration] = []
        for offset in 0..<Int(AdoptionRules.idleCheckInterval.components.seconds) {
            var sleeper = idle
            sleeper.run(for: .seconds(Int64(offset)))
            sleeper.awake = false
            let silent = sleeper.now
            sleeper.run(for: .seconds(60))
            if let at = sleeper.heldAt { held.append(at - silent) }
        }
        held.sort()
        print(
            "  held after a silent sleep, idle before (\(held.count) moments of the watch): "
                + "\(held.first.map(Self.seconds) ?? "never") to \(held.last.map(Self.seconds) ?? "never") (goal: 30 s)"
        )
        // Busy: a word every 3 s for a minute, then silence.
        var busy = try Watch()
        busy.frame(Self.announcement())
        busy.run(for: .seconds(300))
        for _ in 0..<20 {
            busy.run(for: .seconds(3))
            busy.frame(Self.announcement())
        }
        busy.awake = false
        let lastWord = busy.now
        busy.run(for: .seconds(60))
        print(
            "  held after a silent sleep, busy before: \(busy.heldAt.map { Self.seconds($0 - lastWord) } ?? "never") (goal: 5 s)"
        )
        // macOS 15's sleep: its service PTR's goodbye, then silence.
        var mac = try Watch()
        mac.frame(Self.announcement())
        mac.run(for: .seconds(300))
        mac.awake = false
        mac.frame(Self.announcement(ttl: 0, onlyPTR: true))
        let goodbyes = mac.now
        mac.run(for: .seconds(60))
        print(
            "  sleep goodbyes to the host held: \(mac.heldAt.map { Self.seconds($0 - goodbyes) } ?? "never"); "
                + "to its service PTR announced again: \(mac.ptrAnnouncedAt.map { Self.seconds($0 - goodbyes) } ?? "never") (goal: 5 s)"
        )
    }
}
