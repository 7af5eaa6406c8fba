import CSleepProxyLinux
import HeapModule
import SleepProxyCore
import SleepProxyWire

/// A month of a home in minutes (docs/long-running.md): the composed engine, with explicit time, through days of
/// hosts that register or are adopted, sleep and wake ten times a day, renew their leases, are woken by a person
/// who resolves them first, plus the chatter of the house's other devices and Home Assistant's nmap tracker every
/// two minutes. After every call into the engine its audit runs (`ProxyEngine.auditViolation(after:)`); every hour
/// the size of every table it holds is taken (`EngineCensus`) with the heap in use; every magic packet is matched
/// to a person who wanted that host.
///
/// The hosts act as real ones do: a registering host sends Apple's registration before it sleeps and again from
/// its maintenance wake, and announces with a new Owner sequence when it wakes; an adopted host answers the
/// proxy's questions while awake and falls silent asleep (one has a NIC that keeps answering ARP, docs/adoption.md
/// §4, and one is a DLNA server); every host answers the proxy's address probes only while it is up, and comes up a
/// few seconds after its magic packet.
public struct HomeMonth {
    public struct Configuration: Sendable {
        public var days = 30
        public var registeredHosts = 12
        public var adoptedHosts = 8
        public var cyclesPerDay = 10
        /// Apple's usual lease, renewed a little before it ends (the issue's "every two hours").
        public var lease: UInt32 = 7200
        public var renewalInterval: Duration = .seconds(6900)
        public var noiseDevices = 40
        public var scanInterval: Duration = .seconds(120)
        /// nmap's `-F`, as Home Assistant's tracker runs it (docs/waking.md §2).
        public var scanPorts = 100
        /// Addresses its ARP sweep asks for, from .1 up (the whole /24).
        public var sweepAddresses = 254
        public var seed: UInt64 = 0x4D4F_4E54_48
        public init() {}
    }

    /// The days whose tables are compared: the week after the first day (which fills the tables from empty) and
    /// the last week; a short run compares its two halves after the first day. Days count from 0.
    public static func windows(days: Int) -> (early: Range<Int>, late: Range<Int>)? {
        let width = min(7, (days - 1) / 2)
        guard width > 0 else { return nil }
        return (1..<(1 + width), (days - width)..<days)
    }

    public struct Report: Sendable {
        public var steps = 0
        /// The first broken invariant, with the step and the time.
        public var violation: String?
        public var sleeps = 0
        public var handBacks = 0
        public var renewals = 0
        public var personWakes = 0
        public var personWakesAnswered = 0
        public var longestPersonWake = Duration.zero
        /// Wakes started for anyone but the person, and magic packets for a host nobody wanted.
        public var noiseWakes = 0
        public var unwantedMagicPackets = 0
        public var noiseWakeExamples: [String] = []
        public var declined = 0
        public var scans = 0
        public var scanFrames = 0
        public var questions = 0
        public var unanswered = 0
        /// The largest heap in use each day (allocated up front: the report must not grow what it measures).
        public var heapBytes: [Int] = []
        /// Each table's largest count of each day, summed over the early and the late window, and its largest
        /// count of the last day counted.
        public var earlyLargest: [String: Int] = [:]
        public var lateLargest: [String: Int] = [:]
        public var lastDay: [String: Int] = [:]
        public var windows: (early: Range<Int>, late: Range<Int>)?
        public var daysRun = 0
        public var engineTime = Duration.zero
    }

    enum Event {
        case sleep(Int, epoch: Int)
        case dozeOff(Int, epoch: Int)
        case wakeByItself(Int, epoch: Int)
        case personConnects(Int, epoch: Int)
        case personRetries(Int, epoch: Int, attempt: Int, port: UInt16)
        case renew(Int, epoch: Int)
        case hostUp(Int)
        case answer(Int)
        case arpReply(Int, to: ARPPacket)
        case device(Int, tick: Int)
        case scan
        case frame([UInt8])
        case query
        case census
        case dayEnd
    }

    struct Scheduled: Comparable {
        var at: Timestamp
        var serial: Int
        var event: Event
        static func == (lhs: Scheduled, rhs: Scheduled) -> Bool { lhs.serial == rhs.serial }
        static func < (lhs: Scheduled, rhs: Scheduled) -> Bool { (lhs.at, lhs.serial) < (rhs.at, rhs.serial) }
    }

    struct Host {
        var adopted: Bool
        var nicAnswers = false
        var mediaServer = false
        var awake = true
        var sequence: UInt8 = 1
        var messageID: UInt16 = 1
        var epoch = 0
        var wakePending = false
        var answerPending = false
        /// When a person started to connect: until the host is handed back, its magic packets are wanted.
        var wantedSince: Timestamp?
    }

    public let configuration: Configuration
    public internal(set) var engine: ProxyEngine
    public internal(set) var report = Report()
    var now = Timestamp.seconds(1000)
    let start: Timestamp
    var hosts: [Host]
    var events = Heap<Scheduled>()
    var serial = 0
    var random: SplitMix64
    /// Today's largest count of each table; its keys stay from day to day, so that it allocates nothing more.
    var today: [String: Int] = [:]
    let clock = ContinuousClock()

    public init(_ configuration: Configuration = Configuration()) {
        self.configuration = configuration
        self.random = SplitMix64(seed: configuration.seed)
        let count = configuration.registeredHosts + configuration.adoptedHosts
        var registration = RegistrationConfiguration()
        registration.maximumHosts = max(count, 1)
        registration.maximumRecords = max(count, 1) * 25
        let responder = Responder(
            configuration: ResponderConfiguration(
                instanceLabel: "20-40-10-65.0 Home", hostLabel: "home-proxy", registrationPort: 5599, seed: 7))
        self.engine = ProxyEngine(
            registrar: Registrar(configuration: registration), responder: responder, takeover: Takeover(),
            ssdp: SSDPProxy(seed: 11))
        self.start = self.now
        self.hosts = (0..<count).map { Host(adopted: $0 >= configuration.registeredHosts) }
        self.report.heapBytes = [Int](repeating: 0, count: max(configuration.days, 0))
        self.report.windows = Self.windows(days: configuration.days)
        for table in [\Report.earlyLargest, \Report.lateLargest, \Report.lastDay] {
            self.report[keyPath: table].reserveCapacity(512)
        }
        self.today.reserveCapacity(512)
        if configuration.adoptedHosts >= 2 {
            self.hosts[count - 1].mediaServer = true
            self.hosts[count - 2].nicAnswers = true
        }
    }

    var key: (Int) -> OwnerKey { { OwnerKey(interface: HomeDevices.interface.name, primaryMAC: HomeDevices.mac($0)) } }

    mutating func schedule(_ event: Event, after delay: Duration) {
        self.serial += 1
        self.events.insert(Scheduled(at: self.now + delay, serial: self.serial, event: event))
    }

    mutating func uniform(_ low: Double, _ high: Double) -> Double {
        low + (high - low) * Double(self.random.next() >> 11) / Double(1 << 53)
    }

    mutating func seconds(_ low: Double, _ high: Double) -> Duration {
        .milliseconds(Int64(self.uniform(low, high) * 1000))
    }

    /// Runs the whole month; the report says what happened.
    public mutating func run() {
        self.handle(self.engine.setInterfaces([HomeDevices.interface], now: self.now))
        let adopted = Set(self.hosts.indices.filter { self.hosts[$0].adopted }.map(HomeDevices.mac))
        self.handle((try? self.engine.setAdopted(adopted, now: self.now)) ?? [])
        for host in self.hosts.indices {
            // Every host starts awake and goes to sleep within its first cycle.
            self.schedule(.hostUp(host), after: self.seconds(1, 600))
        }
        for device in 0..<self.configuration.noiseDevices {
            self.schedule(.device(device, tick: 0), after: self.seconds(0, 60))
        }
        self.schedule(.scan, after: self.seconds(30, 120))
        self.schedule(.query, after: .seconds(1800))
        self.schedule(.census, after: .seconds(3600))
        self.schedule(.dayEnd, after: .seconds(86_400))
        let end = self.start + .seconds(Int64(self.configuration.days) * 86_400)
        while self.report.violation == nil {
            let event = self.events.min
            let deadline = self.engine.nextDeadline()
            if let deadline, deadline <= end, event.map({ deadline <= $0.at }) ?? true {
                self.now = max(self.now, deadline)
                let began = self.clock.now
                let actions = self.engine.tick(now: self.now)
                self.report.engineTime += self.clock.now - began
                self.handle(actions)
            } else if let event, event.at <= end {
                _ = self.events.popMin()
                self.now = max(self.now, event.at)
                self.perform(event.event)
            } else {
                break
            }
        }
    }

    /// What every call into the engine leads to: the audit, the tallies, and the hosts' own reactions.
    mutating func handle(_ actions: [EngineAction]) {
        self.report.steps += 1
        var looped: [[UInt8]] = []
        if self.report.violation == nil, let violation = self.engine.auditViolation(after: actions) {
            self.report.violation = "step \(self.report.steps), \(self.when): \(violation)"
        }
        for action in actions {
            switch action {
            case .wakeEvent(let event): self.tally(event)
            case .presence(let change): self.presence(change)
            case .transmit(let transmission):
                self.heard(transmission)
                if case .multicast = transmission.destination { looped.append(transmission.bytes) }
            case .packet(.sendWakeDatagram(let bytes, _)): self.magic(bytes)
            case .packet(.sendFrame(let bytes, _)): self.frameSent(bytes)
            default: break
            }
        }
        // What the daemon does with each multicast it sent: tells the responder when it left (RFC 6762 §6.2's
        // second counts from there), and hears it again from the kernel's loopback (docs/busy-lan.md).
        for bytes in looped {
            self.engine.multicastSent(at: self.now)
            self.mdns(bytes, from: .v4(IPv4Address(192, 0, 2, 1)))
        }
    }

    var when: String {
        let elapsed = (self.now - self.start).components.seconds
        return "day \(elapsed / 86_400 + 1) \(elapsed % 86_400 / 3600)h\(elapsed % 3600 / 60)m"
    }

    func host(of mac: MACAddress) -> Int? {
        let index = Int(mac.rawValue) - Int(HomeDevices.mac(0).rawValue)
        return self.hosts.indices.contains(index) ? index : nil
    }

    mutating func tally(_ event: WakeEvent) {
        switch event.kind {
        case .wake:
            switch event.trigger {
            case .connection(_, let client, _, _) where client == HomeDevices.person: self.report.personWakes += 1
            case .addressRequest(let client, _) where client == HomeDevices.person: self.report.personWakes += 1
            default:
                self.report.noiseWakes += 1
                self.example(
                    "\(self.when): \(event.host) woken for \(event.trigger) (\(event.rule.map { "\($0)" } ?? "-"))")
            }
        case .declined: self.report.declined += 1
        default: break
        }
    }

    mutating func example(_ line: String) {
        if self.report.noiseWakeExamples.count < 20 { self.report.noiseWakeExamples.append(line) }
    }

    mutating func presence(_ change: PresenceChange) {
        guard let host = self.host(of: change.host.primaryMAC) else { return }
        switch change.state {
        case .asleep: self.report.sleeps += 1
        case .handedBack:
            self.report.handBacks += 1
            if let since = self.hosts[host].wantedSince {
                self.report.personWakesAnswered += 1
                self.report.longestPersonWake = max(self.report.longestPersonWake, self.now - since)
                self.hosts[host].wantedSince = nil
            }
        default: break
        }
    }

    /// An adopted host that is up answers the proxy's questions about it, as its responder would.
    mutating func heard(_ transmission: MDNSTransmission) {
        guard !transmission.message.flags.isResponse, !transmission.message.questions.isEmpty else { return }
        for host in self.hosts.indices where self.hosts[host].adopted && self.hosts[host].awake {
            if !self.hosts[host].answerPending,
                transmission.message.questions.contains(where: { HomeDevices.answers(host, $0) })
            {
                self.hosts[host].answerPending = true
                self.schedule(.answer(host), after: .milliseconds(20))
            }
        }
    }

    mutating func magic(_ payload: [UInt8]) {
        guard payload.count >= 12, let mac = MACAddress(bytes: Array(payload[6..<12])), let host = self.host(of: mac)
        else { return }
        if self.hosts[host].wantedSince == nil {
            self.report.unwantedMagicPackets += 1
            self.example("\(self.when): a magic packet for host \(host), whom nobody wanted")
        }
        if !self.hosts[host].awake && !self.hosts[host].wakePending {
            self.hosts[host].wakePending = true
            self.schedule(.hostUp(host), after: self.seconds(2, 4))
        }
    }

    /// The proxy's frames: a magic packet on the wire, or an ARP probe that the host (or its NIC) answers.
    mutating func frameSent(_ bytes: [UInt8]) {
        guard bytes.count > 14 else { return }
        let etherType = UInt16(bytes[12]) << 8 | UInt16(bytes[13])
        if etherType == 0x0842 {
            self.magic(Array(bytes[14...]))
            return
        }
        guard etherType == 0x0806, let frame = try? EthernetFrame(decoding: .init(bytes: bytes)),
            let arp = try? ARPPacket(decoding: frame.payload), arp.operation == .request
        else { return }
        for host in self.hosts.indices where HomeDevices.v4(host) == arp.targetIP {
            if self.hosts[host].awake || self.hosts[host].nicAnswers {
                self.schedule(.arpReply(host, to: arp), after: .milliseconds(2))
            }
        }
    }
}
