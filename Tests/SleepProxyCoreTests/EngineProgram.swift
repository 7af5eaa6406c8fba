import NIOCore
import SleepProxyCore
import SleepProxyWire

/// The composed engine driven by an arbitrary program (docs/fuzzing.md): each step is a registration (well
/// formed or raw bytes), an mDNS packet (a question, a host's own announcement or probe, an Owner option, raw
/// bytes), an SSDP datagram, a captured frame (ARP, neighbour discovery, a SYN, an adopted host's own mDNS, its
/// sleep goodbyes or other traffic, a quiet resume, Windows' name services, raw bytes), an admin command (adopting a host, a restart of the
/// proxy among them) or a step of time, read from the program's bytes. After every step the invariants below are
/// checked; a violation is returned as a sentence (the fuzz target traps on it, the test records it).
///
/// Shared by SleepProxyCoreTests and the libFuzzer target in Fuzz/Sources/FuzzEngine (whose copy is a symbolic
/// link to this file), so the same programs run in CI on every test run, from seeds, and under libFuzzer's
/// guidance with `scripts/fuzz engine`. Public API only: it drives the engine as the daemon does.
public struct EngineProgram {
    /// Hosts the program speaks of: eight MACs, each with an IPv4, a global IPv6 and a link-local address.
    static let hostCount = 8
    /// Limits small enough that programs reach them (tested at their edge by the registrar's own tests).
    static let maximumHosts = 6
    static let maximumRecords = 120
    static let interface = InterfaceContext(
        name: "eth0", index: 2, macAddress: MACAddress("02:53:50:00:00:01")!,
        prefixes: [IPPrefix("192.0.2.1/24")!, IPPrefix("fe80::53:50ff:fe00:1/64")!, IPPrefix("2001:db8::1/64")!])
    static let stranger = IPAddress("192.0.2.99")!
    /// Deadlines served in one time step at most: a step of 25 s holds a few hundred (probes, announcements,
    /// wake bursts); the bound keeps a program's time finite.
    static let ticksPerStep = 2000
    /// Raw bytes of one step at most (a registration, an mDNS or SSDP datagram, a frame): enough for every
    /// header, short enough that a program holds many steps.
    static let rawLength = 96
    static let strangerMAC = MACAddress("02:53:50:00:00:99")!

    var engine: ProxyEngine
    var now = Timestamp.seconds(1000)
    var input: [UInt8]
    var position = 0
    /// Steps run, and whether a host was ever spoken for: programs that never get there test little.
    public private(set) var steps = 0
    public private(set) var reachedAsleep = false
    /// Whether an adopted host was ever held asleep (docs/adoption.md).
    public private(set) var reachedAdoptedAsleep = false
    /// Whether magic packets ever started for a host, a host being woken answered, and a host was handed back
    /// (by its own word, woken or not): the lifecycle's later half.
    public private(set) var reachedWaking = false
    public private(set) var reachedWoken = false
    public private(set) var reachedHandedBack = false
    /// Adoption's edges (docs/adoption.md §3): an adopted host held after its service PTR's goodbye, one asleep
    /// handed back by a quiet resume (an ARP request or a solicitation of its own), and a restart of the proxy
    /// while it knew an adopted host.
    public private(set) var reachedHeldAfterGoodbyes = false
    public internal(set) var reachedQuietResume = false
    public private(set) var reachedRestartWithLearned = false
    /// Whether the proxy ever answered a Windows client for a sleeping PC (NetBIOS, LLMNR or WS-Discovery from the
    /// PC's address): the Windows steps reached past learning.
    public private(set) var reachedWindowsAnswer = false
    /// Hosts whose service PTR said goodbye since they were last held.
    var saidGoodbye: Set<Int> = []
    /// Hosts a magic packet went to since they last came up: a program's time step lets them answer.
    var magicFor: Set<Int> = []

    /// `adopting`: hosts 0 up to it are adopted from the start (docs/adoption.md), so that adoption's edges are
    /// reached by programs that would rarely adopt a host and keep it long enough by chance.
    public init(_ input: [UInt8], adopting: Int = 0) {
        self.engine = Self.freshEngine()
        _ = self.engine.setInterfaces([Self.interface], now: self.now)
        _ = try? self.engine.setAdopted(Set((0..<min(adopting, Self.hostCount)).map(Self.mac)), now: self.now)
        self.input = input
    }

    static func freshEngine() -> ProxyEngine {
        var configuration = RegistrationConfiguration(
            maximumRecords: Self.maximumRecords, maximumHosts: Self.maximumHosts)
        configuration.requireSourceAmongClaimedAddresses = false
        let responder = Responder(
            configuration: ResponderConfiguration(
                instanceLabel: "20-40-10-65.0 Fuzz", hostLabel: "fuzzproxy", registrationPort: 5599, seed: 7))
        return ProxyEngine(
            registrar: Registrar(configuration: configuration), responder: responder, takeover: Takeover(),
            ssdp: SSDPProxy(seed: 11))
    }

    static func mac(_ host: Int) -> MACAddress { MACAddress(rawValue: 0x0253_5000_0002 + UInt64(host)) }
    static func v4(_ host: Int) -> IPAddress { .v4(IPv4Address(192, 0, 2, UInt8(2 + host))) }
    static func v6(_ host: Int) -> IPAddress { IPAddress("2001:db8::\(2 + host)")! }
    static func linkLocal(_ host: Int) -> IPAddress { IPAddress("fe80::53:50ff:fe00:\(2 + host)")! }
    static func name(_ host: Int) -> DNSName { try! DNSName(labels: ["host\(host)", "local"]) }

    // MARK: - Reading the program

    mutating func byte() -> UInt8? {
        guard self.position < self.input.count else { return nil }
        defer { self.position += 1 }
        return self.input[self.position]
    }

    mutating func bytes(_ count: Int) -> [UInt8] {
        let end = min(self.input.count, self.position + count)
        defer { self.position = end }
        return Array(self.input[self.position..<end])
    }

    /// Runs the whole program; nil when every invariant held after every step.
    public mutating func run() -> String? {
        while let operation = self.byte() {
            if let violation = self.checked(self.step(operation), operation) { return violation }
            // Time passed: the hosts woken meanwhile may come up, a step of their own.
            if operation % 12 >= 10, let violation = self.checked(self.answerWakes(), operation) { return violation }
            if operation % 12 >= 10, let violation = self.checked(self.windowsClientAsks(), operation) {
                return violation
            }
            if let violation = self.idleTickActs() {
                return "step \(self.steps) (operation \(operation % 12)): \(violation)"
            }
        }
        return nil
    }

    /// The daemon's loop runs the timers only when `nextDeadline()` says one is due (docs/busy-lan.md): a tick
    /// before it must do nothing, or that work would never be done.
    mutating func idleTickActs() -> String? {
        guard self.engine.nextDeadline().map({ $0 > self.now }) ?? true else { return nil }
        let actions = self.engine.tick(now: self.now)
        return actions.isEmpty ? nil : "a tick with no timer due acted: \(actions)"
    }

    /// Checks the invariants after one step and notes how far the lifecycle got.
    mutating func checked(_ actions: [EngineAction], _ operation: UInt8) -> String? {
        self.steps += 1
        if let violation = self.check(actions) {
            return "step \(self.steps) (operation \(operation % 12)): \(violation)"
        }
        if !self.reachedAsleep { self.reachedAsleep = !self.engine.hosts(in: .asleep).isEmpty }
        if !self.reachedWindowsAnswer { self.reachedWindowsAnswer = actions.contains(where: Self.isWindowsAnswer) }
        for action in actions {
            switch action {
            case .packet(.sendWakeDatagram(let bytes, _)): self.noteMagic(bytes)
            case .packet(.sendFrame(let bytes, _)) where bytes.count > 14 && bytes[12] == 0x08 && bytes[13] == 0x42:
                self.noteMagic(Array(bytes[14...]))
            case .wakeEvent(let event) where event.kind == .wake: self.reachedWaking = true
            case .wakeEvent(let event) where event.kind == .awake: self.reachedWoken = true
            case .presence(let change) where change.state == .handedBack: self.reachedHandedBack = true
            default: break
            }
        }
        let adoptedAsleep = self.engine.hosts(in: .asleep).filter { self.engine.registration($0)?.isAdopted == true }
        if !adoptedAsleep.isEmpty { self.reachedAdoptedAsleep = true }
        for key in adoptedAsleep {
            // Only the program's own MACs are adopted; any other is simply not one of its hosts.
            let host = Int(truncatingIfNeeded: key.primaryMAC.rawValue &- Self.mac(0).rawValue)
            if self.saidGoodbye.remove(host) != nil { self.reachedHeldAfterGoodbyes = true }
        }
        return nil
    }

    // MARK: - Steps

    mutating func step(_ operation: UInt8) -> [EngineAction] {
        let host = Int(self.byte() ?? 0) % Self.hostCount
        switch operation % 12 {
        case 0: return self.register(host)
        case 1:
            // A raw registration datagram, from the host's address or a stranger's.
            let length = Int(self.byte() ?? 0) % Self.rawLength
            let source = (self.byte() ?? 0) & 1 == 0 ? Self.v4(host) : Self.stranger
            return self.engine.receiveRegistration(
                self.bytes(length), from: source, on: Self.interface, now: self.now)
        case 2: return self.mdns(self.question(host), from: Self.stranger)
        case 3:
            // The host's own responder: an announcement of its name, maybe with an Owner option.
            let address = DNSResourceRecord(
                name: Self.name(host), cacheFlush: true, ttl: 120,
                rdata: .a(.init(address: IPv4Address(192, 0, 2, UInt8(2 + host)))))
            var message = DNSMessage(id: 0, flags: .init(response: true, authoritative: true), answers: [address])
            if (self.byte() ?? 0) & 1 == 1 {
                let sequence = self.byte() ?? 0
                message.additionals.append(
                    .opt(
                        EDNSHeader(udpPayloadSize: 1440),
                        options: [.owner(OwnerOption(sequence: sequence, primaryMAC: Self.mac(host)))]))
            }
            return self.mdns(message, from: (self.byte() ?? 0) & 1 == 0 ? Self.v4(host) : Self.linkLocal(host))
        case 4:
            // The host probing its own name (after a wake, or a rename).
            let probe = DNSMessage(
                questions: [DNSQuestion(name: Self.name(host), type: .any)],
                authorities: [
                    DNSResourceRecord(
                        name: Self.name(host), ttl: 120,
                        rdata: .a(.init(address: IPv4Address(192, 0, 2, UInt8(2 + host)))))
                ])
            return self.mdns(probe, from: Self.v4(host))
        case 5:
            let length = Int(self.byte() ?? 0) % Self.rawLength
            let bytes = self.bytes(length)
            return self.engine.receiveMDNS(
                bytes, from: Self.stranger, port: (self.byte() ?? 0) & 1 == 0 ? 5353 : 40000, destination: nil,
                interfaceIndex: Self.interface.index, now: self.now)
        case 6: return self.frame(host)
        case 7:
            // Half of them Windows' name services (EngineProgram+Windows.swift), half raw frame bytes.
            let length = Int(self.byte() ?? 0)
            if length & 1 == 1 { return self.windowsFrame(host) }
            return self.engine.receiveFrame(
                self.bytes(length % Self.rawLength), interfaceIndex: Self.interface.index, outgoing: false,
                now: self.now)
        case 8:
            let length = Int(self.byte() ?? 0) % Self.rawLength
            let bytes = self.bytes(length)
            return self.engine.receiveSSDP(
                bytes, from: (self.byte() ?? 0) & 1 == 0 ? Self.v4(host) : Self.stranger, port: 1900,
                destination: nil, interfaceIndex: Self.interface.index, now: self.now)
        case 9: return self.admin(host)
        default:
            // Time: up to about 25 s a step, in 100 ms units, the engine woken at each of its deadlines on the way
            // as the daemon's loop does (at most `ticksPerStep` of them).
            let target = self.now + .milliseconds(Int64(self.byte() ?? 0) * 100)
            var actions: [EngineAction] = []
            var ticks = 0
            while let deadline = self.engine.nextDeadline(), deadline <= target, ticks < Self.ticksPerStep {
                self.now = max(self.now, deadline)
                actions += self.engine.tick(now: self.now)
                ticks += 1
            }
            self.now = target
            return actions + self.engine.tick(now: self.now)
        }
    }

    mutating func noteMagic(_ payload: [UInt8]) {
        guard payload.count >= 12, let mac = MACAddress(bytes: Array(payload[6..<12])) else { return }
        let host = Int(mac.rawValue) - Int(Self.mac(0).rawValue)
        if (0..<Self.hostCount).contains(host) { self.magicFor.insert(host) }
    }

    /// A woken host comes up as real ones do (a gratuitous ARP, unsolicited advertisements), unless the program's next byte keeps it
    /// asleep: without this, random bytes rarely produced the right host's sign within its wake, and the second
    /// half of the lifecycle (woken, handed back) went mostly untried.
    mutating func answerWakes() -> [EngineAction] {
        var actions: [EngineAction] = []
        for host in self.magicFor.sorted() where (self.byte() ?? 0) & 7 != 0 {
            self.magicFor.remove(host)
            let mac = Self.mac(host)
            var frames = [
                ARPPacket.announcement(from: mac, for: IPv4Address(192, 0, 2, UInt8(2 + host)))
                    .frame(destination: .broadcast, source: mac).bytes
            ]
            // And on each IPv6 address it may have registered (an unsolicited advertisement, RFC 4861 §7.2.6).
            for case .v6(let address) in [Self.v6(host), Self.linkLocal(host)] {
                frames.append(
                    NeighborDiscoveryMessage(
                        kind: .advertisement, flags: [.override], target: address, targetLinkLayerAddress: mac
                    ).frame(
                        ethernetSource: mac, ethernetDestination: IPv6Address.allNodes.multicastMAC, source: address,
                        destination: .allNodes
                    ).bytes)
            }
            for frame in frames {
                actions += self.engine.receiveFrame(
                    frame, interfaceIndex: Self.interface.index, outgoing: false, now: self.now)
            }
        }
        return actions
    }

    mutating func register(_ host: Int) -> [EngineAction] {
        let flags = self.byte() ?? 0
        var addresses: [IPAddress] = []
        if flags & 1 != 0 { addresses.append(Self.v4(host)) }
        if flags & 2 != 0 { addresses.append(Self.v6(host)) }
        if flags & 4 != 0 { addresses.append(Self.linkLocal(host)) }
        let serviceCount = Int(flags >> 3 & 3)
        let services = (0..<serviceCount).map { index in
            SleepRegistration.Service(
                instance: try! DNSName(labels: ["svc\(index)-h\(host)", index == 0 ? "_smb" : "_http", "_tcp", "local"]
                ),
                port: index == 0 ? 445 : 8080 + UInt16(index))
        }
        let lease = UInt32(self.byte() ?? 0) * 60 + 30
        let registration = SleepRegistration(
            hostName: Self.name(host), addresses: addresses, services: services,
            owner: OwnerOption(sequence: self.byte() ?? 0, primaryMAC: Self.mac(host)), lease: lease)
        let id = UInt16(self.byte() ?? 0)
        var actions: [EngineAction] = []
        for message in registration.messages(id: id, maximumSize: 1440) {
            let bytes = message.encoded(options: .appleUpdate)
            actions +=
                self.engine.receiveRegistration(bytes, from: Self.v4(host), on: Self.interface, now: self.now)
        }
        return actions
    }

    mutating func question(_ host: Int) -> DNSMessage {
        let types: [DNSRecordType] = [.a, .aaaa, .ptr, .srv, .txt, .any]
        let type = types[Int(self.byte() ?? 0) % types.count]
        let names: [DNSName] = [
            Self.name(host), "_smb._tcp.local.", try! DNSName(labels: ["svc0-h\(host)", "_smb", "_tcp", "local"]),
            "_sleep-proxy._udp.local.",
        ]
        let name = names[Int(self.byte() ?? 0) % names.count]
        return DNSMessage(questions: [
            DNSQuestion(name: name, type: type == .ptr && name == Self.name(host) ? .a : type)
        ])
    }

    mutating func mdns(_ message: DNSMessage, from source: IPAddress) -> [EngineAction] {
        let bytes = message.encoded(options: .mdns)
        return self.engine.receiveMDNS(
            bytes, from: source, port: 5353, destination: nil, interfaceIndex: Self.interface.index, now: self.now)
    }

    mutating func admin(_ host: Int) -> [EngineAction] {
        let key = OwnerKey(interface: Self.interface.name, primaryMAC: Self.mac(host))
        switch (self.byte() ?? 0) % 7 {
        case 6:
            // The proxy restarts (an upgrade, a crash): a new engine given what the journal holds, the adopted
            // set, and what the adopted hosts taught (docs/adoption.md §3), in the daemon's order.
            let held = Array(self.engine.registrations.values)
            let learned = self.engine.adoptedLearned(now: self.now)
            if !learned.isEmpty { self.reachedRestartWithLearned = true }
            let adopted = Set(self.engine.adoptedMACs)
            var fresh = Self.freshEngine()
            var actions = fresh.restore(held, now: self.now)
            actions += fresh.setInterfaces([Self.interface], now: self.now)
            actions += (try? fresh.setAdopted(adopted, now: self.now)) ?? []
            fresh.restoreLearned(learned, now: self.now)
            self.engine = fresh
            return actions
        case 5:
            // A person adopts the host, or unadopts it (docs/adoption.md).
            var adopted = Set(self.engine.adoptedMACs)
            if adopted.remove(key.primaryMAC) == nil { adopted.insert(key.primaryMAC) }
            return (try? self.engine.setAdopted(adopted, now: self.now)) ?? []
        case 0: return self.engine.wake(key, trigger: .administrator, now: self.now)
        case 1: return self.engine.forget(key, goodbyes: true, now: self.now)
        case 2: return self.engine.forget(key, goodbyes: false, now: self.now)
        case 3:
            // What a failed journal append does: back to what the journal holds (here: every host but this one).
            let kept = self.engine.registrar.store.owners.values.filter { $0.key != key }
            return self.engine.reload(Array(kept), now: self.now)
        default: return self.engine.releaseAll(now: self.now)
        }
    }

    // MARK: - Invariants

    /// What must hold after every step: the engine's own audit (`ProxyEngine.auditViolation(after:)`).
    func check(_ actions: [EngineAction]) -> String? { self.engine.auditViolation(after: actions) }
}
