import Foundation
import SleepProxyCore
import SleepProxyTestSupport
import SleepProxyWire

/// `sleepproxy-bench wake` (docs/waking.md): the traffic that reaches sleeping hosts on a real LAN, replayed
/// into the takeover and its wake gate with the timing measured from nmap and real stacks. For each shape:
/// how many wakes it caused and how many packets were declined, how long the first wake took to decide, and
/// what a packet costs the engine. Then, in a lab, how long a client's connect() takes to a host that resumes
/// half a second after the first magic packet.
enum WakeBenchmarks {
    static let proxyMAC = MACAddress("02:53:50:00:00:01")!
    static let interface = InterfaceContext(
        name: "eth0", index: 2, macAddress: proxyMAC,
        prefixes: [
            IPPrefix(.v4(IPv4Address(192, 0, 2, 1)), length: 24), IPPrefix(IPAddress("2001:db8::1")!, length: 64),
        ])
    static let services: [(String, UInt16)] = [
        ("Web._http._tcp", 8080), ("Shell._ssh._tcp", 22), ("Files._smb._tcp", 445),
    ]
    /// nmap's `-F` list holds the 100 most common ports; these stand in for it, with the hosts' services among them.
    static let top100: [UInt16] =
        [22, 445, 8080, 21, 23, 25, 53, 80, 110, 111, 135, 139, 143, 443, 548, 554, 587, 631, 993, 995]
        + (1...80).map { UInt16(1000 + $0 * 7) }

    static func hostAddress(_ n: Int) -> IPv4Address { IPv4Address(192, 0, 2, UInt8(100 + n)) }
    static func hostMAC(_ n: Int) -> MACAddress { MACAddress(rawValue: 0x0253_5000_3000 + UInt64(n)) }
    static func client(_ n: Int) -> IPv4Address { IPv4Address(192, 0, 2, UInt8(20 + n)) }
    static func clientMAC(_ n: Int) -> MACAddress { MACAddress(rawValue: 0x0253_5000_0020 + UInt64(n)) }

    /// One scenario's packets: when, from which client, what.
    struct Packet {
        var at: Duration
        var client: Int
        var host: Int
        var port: UInt16
        var sourcePort: UInt16
        var sequence: UInt32
        var shape: Shape
        /// The client resolved the host through the proxy just before (browse → resolve → connect).
        var resolvedFirst = false
    }

    enum Shape {
        case nmap, kernel, arp, ping
    }

    struct Outcome {
        var wakes = 0
        var declined = 0
        var firstDecision: Duration?
        var packets = 0
        var nanosecondsPerPacket = 0.0
    }

    static func run() {
        print("Wake decisions (docs/waking.md): traffic shapes replayed into the takeover, 10 sleeping hosts")
        let scenarios: [(String, [Packet], ClosedRange<Int>)] = [
            ("nmap -sS -F -T4 (Home Assistant), one host", self.nmapScan(host: 0, raw: true), 0...0),
            ("nmap -sT -F -T4 (connect scan), one host", self.nmapScan(host: 0, raw: false), 0...0),
            ("nmap -sS -F over all 10 sleeping hosts", (0..<10).flatMap { self.nmapScan(host: $0, raw: true) }, 0...0),
            ("ARP sweep and pings", self.sweepAndPings(), 0...0),
            (
                "one port swept over 10 hosts",
                (0..<10).map {
                    self.syn(at: .milliseconds($0 * 20), host: $0, port: 445, sourcePort: UInt16(50000 + $0))
                }, 0...0
            ),
            (
                "nmap -p 445 probe every 120 s for an hour", self.everyInterval(.seconds(120), count: 30, shape: .nmap),
                0...0
            ),
            (
                "TCP monitor, connect() with 0.5 s timeout every 60 s for an hour",
                self.everyInterval(.seconds(60), count: 60, shape: .kernel), 1...1
            ),
            (
                "TCP monitor, 10 s timeout (retransmits) every 60 s for an hour",
                self.everyInterval(
                    .seconds(60), count: 60, shape: .kernel, retransmittedAt: [.seconds(1), .seconds(3)]),
                1...1
            ),
            ("app: browse, resolve, connect", [self.syn(at: .zero, port: 8080, resolved: true)], 1...1),
            ("bare connect() by address", [self.syn(at: .zero, port: 8080)], 1...1),
            (
                "bare connect() while the host takes 3 s (retransmits at 1 s)",
                [self.syn(at: .zero, port: 8080), self.syn(at: .seconds(1), port: 8080)], 1...1
            ),
            (
                "Windows Explorer: 445 and 139 at once",
                [self.syn(at: .zero, port: 445), self.syn(at: .milliseconds(1), port: 139, sourcePort: 50001)], 1...1
            ),
        ]
        for (name, packets, expected) in scenarios {
            let outcome = self.replay(packets)
            let decision =
                outcome.firstDecision.map {
                    String(
                        format: "%.0f ms",
                        Double($0.components.attoseconds / 1_000_000_000_000_000 + $0.components.seconds * 1000))
                } ?? "-"
            let verdict = expected.contains(outcome.wakes) ? "as expected" : "NOT MET (expected \(expected))"
            print(
                "  \(name + String(repeating: " ", count: max(0, 62 - name.count))) \(outcome.packets) packets: \(outcome.wakes) wake\(outcome.wakes == 1 ? "" : "s"), \(outcome.declined) declined, first wake decided after \(decision), \(String(format: "%.0f", outcome.nanosecondsPerPacket)) ns/packet  \(verdict)"
            )
        }
    }

    // MARK: - Shapes

    static func syn(
        at: Duration, client: Int = 0, host: Int = 0, port: UInt16, sourcePort: UInt16 = 50000,
        sequence: UInt32 = 0x1111_0000,
        shape: Shape = .kernel, resolved: Bool = false
    ) -> Packet {
        Packet(
            at: at, client: client, host: host, port: port, sourcePort: sourcePort, sequence: sequence, shape: shape,
            resolvedFirst: resolved)
    }

    /// 100 ports in nmap's random order, 10 within 50 ms then the rest within 2 s, each retried once 250 ms later
    /// with a new ISN (docs/waking.md §2). Raw (`-sS`): nmap's own SYN shape, the retry from source port + 2.
    /// Connect (`-sT`): the kernel's SYNs, a new source port per probe and per retry, never an identical
    /// retransmission.
    static func nmapScan(host: Int, raw: Bool) -> [Packet] {
        var generator = SplitMix64(seed: UInt64(host + (raw ? 1 : 100)))
        let ports = self.top100.shuffled(using: &generator)
        var packets: [Packet] = []
        for (index, port) in ports.enumerated() {
            let at: Duration = index < 10 ? .milliseconds(index * 5) : .milliseconds(50 + (index - 10) * 21)
            for retry in 0..<2 {
                let sourcePort = raw ? UInt16(61000 + 2 * retry) : UInt16(40000 + 5000 * retry + index)
                packets.append(
                    self.syn(
                        at: at + .milliseconds(250 * retry), client: 1, host: host, port: port, sourcePort: sourcePort,
                        sequence: UInt32(1000 * retry + index) &* (raw ? 1 : 7919), shape: raw ? .nmap : .kernel))
            }
        }
        return packets.sorted { $0.at < $1.at }
    }

    static func sweepAndPings() -> [Packet] {
        (0..<10).flatMap { host in
            [
                Packet(
                    at: .milliseconds(host * 10), client: 2, host: host, port: 0, sourcePort: 0, sequence: 0,
                    shape: .arp),
                Packet(
                    at: .milliseconds(500 + host * 10), client: 2, host: host, port: 0, sourcePort: 0, sequence: 0,
                    shape: .ping),
            ]
        }
    }

    /// A poll every `interval`, each SYN sent again unchanged `retransmittedAt` after it (the kernel's connect()
    /// with a timeout longer than a second: Home Assistant's TCP sensor, check_tcp, Uptime Kuma).
    static func everyInterval(_ interval: Duration, count: Int, shape: Shape, retransmittedAt: [Duration] = [])
        -> [Packet]
    {
        (0..<count).flatMap { round in
            ([.zero] + retransmittedAt).map { offset in
                self.syn(
                    at: interval * round + offset, client: 3, port: shape == .nmap ? 445 : 8080,
                    sourcePort: UInt16(52000 + round), sequence: UInt32(round * 31337), shape: shape)
            }
        }
    }

    // MARK: - Replay

    static func frame(_ packet: Packet) -> [UInt8] {
        let source = IPAddress.v4(self.client(packet.client))
        let mac = self.clientMAC(packet.client)
        switch packet.shape {
        case .arp:
            return TestFrames.arpRequest(
                from: mac, senderIP: self.client(packet.client), for: self.hostAddress(packet.host))
        case .ping:
            return TestFrames.ping(
                from: mac, to: self.proxyMAC, source: source, destination: .v4(self.hostAddress(packet.host)))
        case .nmap, .kernel:
            let nmap = packet.shape == .nmap
            return TestFrames.tcp(
                from: mac, to: self.proxyMAC, source: source, destination: .v4(self.hostAddress(packet.host)),
                sourcePort: packet.sourcePort, port: packet.port, sequence: packet.sequence,
                window: nmap ? 1024 : 64240, options: nmap ? TestFrames.nmapSYNOptions : TestFrames.kernelSYNOptions)
        }
    }

    /// Ten sleeping hosts, each answered for, then the packets in order with the timers run between them; a wake
    /// ends at once (the host is taken to be up) so that the next packet meets a sleeping host again.
    static func replay(_ packets: [Packet]) -> Outcome {
        var configuration = RegistrationConfiguration()
        configuration.requireSourceAmongClaimedAddresses = false
        var registrar = Registrar(configuration: configuration)
        var takeover = Takeover()
        _ = takeover.setInterfaces([self.interface])
        var now = Timestamp.seconds(1000)
        var registrations: [OwnerRegistration] = []
        for n in 0..<10 {
            let message = SampleRegistration.message(
                id: UInt16(n), mac: self.hostMAC(n), host: try! DNSName(parsing: "sleeper\(n).local."),
                addresses: [.v4(self.hostAddress(n))], services: self.services)
            guard
                case .accepted(let acceptance) = registrar.handle(
                    datagram: message.encoded(options: .appleUpdate), from: .v4(self.hostAddress(n)),
                    on: self.interface, now: now)
            else { fatalError("bench host \(n) was not accepted") }
            registrations.append(acceptance.registration)
            _ = takeover.registered(acceptance.registration, now: now)
        }
        func runTimers(until end: Timestamp, _ outcome: inout Outcome) {
            while let deadline = takeover.nextDeadline(), deadline <= end {
                now = max(now, deadline)
                self.tally(takeover.tick(now: now), &takeover, registrations, now: now, &outcome)
            }
            now = max(now, end)
        }
        var outcome = Outcome()
        runTimers(until: now + .seconds(12), &outcome)
        outcome = Outcome()
        let start = now
        self.started = start
        let frames = packets.map(self.frame)
        var spent: Duration = .zero
        let clock = ContinuousClock()
        for (packet, frame) in zip(packets, frames) {
            runTimers(until: start + packet.at, &outcome)
            if packet.resolvedFirst {
                takeover.noteResolve(by: .v4(self.client(packet.client)), of: registrations[packet.host].key, now: now)
            }
            let began = clock.now
            let actions = takeover.receive(
                frame: frame, interfaceIndex: self.interface.index, outgoing: false, now: now)
            spent += clock.now - began
            self.tally(actions, &takeover, registrations, now: now, &outcome)
        }
        runTimers(until: now + .seconds(40), &outcome)
        outcome.packets = packets.count
        outcome.declined = takeover.gate.statistics.declined.values.reduce(0, +)
        let nanoseconds = Double(spent.components.seconds) * 1e9 + Double(spent.components.attoseconds) / 1e9
        outcome.nanosecondsPerPacket = packets.isEmpty ? 0 : nanoseconds / Double(packets.count)
        return outcome
    }

    nonisolated(unsafe) static var started = Timestamp.seconds(0)

    static func tally(
        _ actions: [TakeoverAction], _ takeover: inout Takeover, _ registrations: [OwnerRegistration], now: Timestamp,
        _ outcome: inout Outcome
    ) {
        for case .event(let event) in actions where event.kind == .wake {
            outcome.wakes += 1
            if outcome.firstDecision == nil { outcome.firstDecision = now - self.started }
            // The host resumes: it hands itself back, and the next packet meets it asleep again after its new
            // registration (the same records).
            if let registration = registrations.first(where: { $0.key == event.host }) {
                _ = takeover.removed(event.host, endsWake: true, wake: false, now: now)
                _ = takeover.registered(registration, now: now)
            }
        }
    }
}

extension WakeBenchmarks {
    /// connect() from a client on the link to a sleeping host that resumes 0.5 s after the first magic packet,
    /// in namespaces with the real daemon and kernels: after resolving the service through the proxy (an app),
    /// bare by address, and bare to a host that kept its IPv6 link-local address while asleep. Each round's
    /// client is a machine that has not woken the host before (a repeat within the monitor hold-off must
    /// retransmit first, docs/waking.md §6).
    static func runLab(daemon: URL) throws {
        guard labCanRun("Wake lab benchmark", daemon: daemon) else { return }
        print("connect() to a host that resumes 0.5 s after the first magic packet (lab, 3 rounds each)")
        let lab = try LabNetwork()
        defer { lab.close() }
        let server = try lab.addHost("server", mac: self.proxyMAC, ipv4: ["192.0.2.1/24"], ipv6: ["2001:db8::1/64"])
        let state = lab.directory.appendingPathComponent("state")
        let process = try server.spawn(
            [
                daemon.path, "--interface", "eth0", "--state-directory", state.path, "--control-socket",
                state.appendingPathComponent("control.sock").path, "--log-level", "warning",
            ], logName: "bench-wake")
        defer { process.stop() }
        let sleeperMAC = MACAddress("02:53:50:00:00:05")!
        let sleeper = try SleepingHost(
            lab: lab, name: "sleeper", mac: sleeperMAC, ipv4: ["192.0.2.5/24"], ipv6: ["2001:db8::5/64"],
            servicePort: 8080)
        defer { sleeper.close() }
        usleep(500_000)
        var round = 0
        var medians: [String: Double] = [:]
        for (name, resolve, keepLinkLocal, target) in [
            ("after resolving the service (an app)", true, false, 0.6),
            ("bare, by address", false, false, 1.0),
            ("bare, the host kept its IPv6 link-local", false, true, 1.0),
            ("after resolving, the host kept its IPv6 link-local", true, true, 0.6),
        ] {
            var totals: [Double] = []
            for _ in 0..<3 {
                round += 1
                let client = try lab.addHost(
                    "client\(round)", mac: MACAddress(rawValue: 0x0253_5000_0100 + UInt64(round)),
                    ipv4: ["192.0.2.\(30 + round)/24"])
                let addresses: [IPAddress] =
                    [IPAddress("192.0.2.5")!, IPAddress("2001:db8::5")!]
                    + (keepLinkLocal ? [.v6(sleeper.host.linkLocal)] : [])
                let message = SampleRegistration.message(
                    id: 0x7400 + UInt16(round), mac: sleeperMAC, sequence: UInt8(round), host: "bench-sleeper.local.",
                    addresses: addresses, services: [("Web._http._tcp", 8080)])
                let replies = try UDPClient.exchange(
                    in: sleeper.host, to: "192.0.2.1", port: 5599, from: "192.0.2.5",
                    payloads: [message.encoded(options: .appleUpdate)])
                guard replies.first??.count ?? 0 >= 12 else { throw CommandError("the bench sleeper did not register") }
                try sleeper.sleep(keepingLinkLocal: keepLinkLocal)
                usleep(5_500_000)  // probes (1 + 3 s) and the first announcements: the proxy answers for it
                let script = """
                    import socket, sys, time
                    if sys.argv[1] == 'resolve':
                        # A one-shot resolve of the SRV through the proxy (RFC 6762 §5.1), as an app's resolver does.
                        q = bytes.fromhex('1234000000010000000000000357656205' + '5f68747470' + '045f746370056c6f63616c0000210001')
                        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); u.settimeout(2)
                        u.sendto(q, ('192.0.2.1', 5353)); u.recv(1500)
                    s = socket.socket(); s.settimeout(10); start = time.monotonic()
                    s.connect(('192.0.2.5', 8080)); print('connected %.4f' % (time.monotonic() - start), flush=True)
                    """
                let before = sleeper.magicPackets.count
                let connecting = try client.spawn(
                    ["/usr/bin/python3", "-c", script, resolve ? "resolve" : "bare"], logName: "connect-\(round)")
                defer { connecting.stop() }
                guard let first = sleeper.waitForMagicPackets(before + 1, timeout: 5).dropFirst(before).first else {
                    throw CommandError("no magic packet in round \(round): \(connecting.output)")
                }
                let wait = 0.5 - Date().timeIntervalSince(first.frame.at)
                if wait > 0 { usleep(UInt32(wait * 1_000_000)) }
                try sleeper.wake()
                guard connecting.waitForOutput("connected", timeout: 10) else {
                    throw CommandError("connect did not complete in round \(round): \(connecting.output)")
                }
                let line = connecting.output.split(separator: "\n").first { $0.hasPrefix("connected") } ?? ""
                if let seconds = Double(line.split(separator: " ").last ?? "") { totals.append(seconds) }
            }
            let sorted = totals.sorted()
            medians[name] = sorted.isEmpty ? .nan : sorted[sorted.count / 2]
            print(
                String(
                    format: "  %@: %@ s (worst %.3f s)  target ≤ %.1f s: %@", name,
                    totals.map { String(format: "%.3f", $0) }.joined(separator: ", "), totals.max() ?? .nan, target,
                    (totals.max() ?? 99) <= target ? "met" : "NOT MET"))
        }
        let kept = medians["bare, the host kept its IPv6 link-local"] ?? .nan
        let removed = medians["bare, by address"] ?? .nan
        print(
            String(
                format:
                    "  link-local kept vs every address removed (median): %.3f vs %.3f s  never slower (≤ +50 ms): %@",
                kept, removed, kept <= removed + 0.05 ? "met" : "NOT MET"))
    }
}
