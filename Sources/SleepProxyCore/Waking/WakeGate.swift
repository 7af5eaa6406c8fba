import SleepProxyWire

/// The one place that decides whether traffic wakes a sleeping host (docs/waking.md). Pure: packets and
/// resolves come in with `now`, verdicts go out with the rule that decided them; the takeover carries them out
/// and holds no wake rule of its own.
///
/// Apple's proxy wakes for any SYN to a registered port from anyone (docs/waking.md §1). We go beyond it: a
/// scan or a sweep never wakes, a source that resolved the host through us wakes at once, an unknown source is
/// held a moment so that a scan can show itself, a SYN shaped like a raw probe or from a source whose last
/// wake went unused must be retransmitted as only a real stack does, and the user's source rules come first.
public struct WakeGate: Sendable {
    public struct Configuration: Hashable, Sendable {
        /// Which ports wake which hosts beyond their registered services.
        public var policy: WakePolicy
        public var sources: WakeSources
        /// `wake-monitor-holdoff`; zero turns the monitor budget off.
        public var monitorHoldoff: Duration

        public init(
            policy: WakePolicy = WakePolicy(), sources: WakeSources = WakeSources(),
            monitorHoldoff: Duration = WakeRules.defaultMonitorHoldoff
        ) {
            self.policy = policy
            self.sources = sources
            self.monitorHoldoff = monitorHoldoff
        }
    }

    /// A scanner as the decline that found it reports it.
    public struct ScanSummary: Hashable, Sendable {
        /// Distinct ports of the most-touched host, and distinct hosts, within the scan window.
        public var ports: Int
        public var hosts: Int
        public var quarantine: Duration
    }

    /// A decline worth a line: the first of its kind (source, host, rule), or the first after
    /// `WakeRules.declineLogInterval` with the count of those in between.
    public struct DeclineReport: Hashable, Sendable {
        public var rule: WakeRule
        /// Declines of this kind since the last report, this one included.
        public var count: Int
        /// Set when this decline found the scanner.
        public var scan: ScanSummary?
    }

    public struct Decision: Hashable, Sendable {
        public var verdict: WakeVerdict
        /// Non-nil when the decline should be logged.
        public var report: DeclineReport?
    }

    public struct Statistics: Hashable, Sendable {
        public var declined: [WakeRule: Int] = [:]
        public var woken: [WakeRule: Int] = [:]
        public var held = 0
        public var scannersFound = 0
        public init() {}
    }

    public var configuration: Configuration
    public internal(set) var statistics = Statistics()

    struct Touch: Hashable, Sendable {
        var host: OwnerKey
        var port: WakePolicy.Port
        var at: Timestamp
    }

    struct Scanner: Hashable, Sendable {
        var until: Timestamp
    }

    struct Attempt: Hashable, Sendable {
        var sequence: UInt32
        var firstSeen: Timestamp
    }

    struct Held: Sendable {
        var candidate: WakeCandidate
        var rule: WakeRule
        var until: Timestamp
    }

    struct PairKey: Hashable, Sendable {
        var source: IPAddress
        var host: OwnerKey
    }

    struct Budget: Hashable, Sendable {
        var until: Timestamp
        var connection: WakeCandidate.ConnectionKey
    }

    struct DeclineKey: Hashable, Sendable {
        var source: IPAddress
        var host: OwnerKey
        var rule: WakeRule
    }

    struct DeclineCount: Hashable, Sendable {
        var lastReported: Timestamp
        var since = 0
    }

    var touches: [IPAddress: [Touch]] = [:]
    var scanners: [IPAddress: Scanner] = [:]
    var attempts: [WakeCandidate.ConnectionKey: Attempt] = [:]
    var held: [WakeCandidate.ConnectionKey: Held] = [:]
    var heldTimers = TimerQueue<WakeCandidate.ConnectionKey, Void>()
    /// Source → (host → when it last resolved one of the host's names).
    var resolvedBy: [IPAddress: [OwnerKey: Timestamp]] = [:]
    var resolvedByMAC: [MACAddress: [OwnerKey: Timestamp]] = [:]
    var learnedMACs: [IPAddress: MACAddress] = [:]
    /// (source, host) → the wake that spent the source's budget for the host: until when it wakes the host no
    /// more without resolving it, and the connection that woke it (whose own retransmissions are not new tries).
    var budgets: [PairKey: Budget] = [:]
    var declines: [DeclineKey: DeclineCount] = [:]
    /// Decline reports a minute, in all (`LineBudget`).
    var reportBudget = LineBudget()
    /// When the tables are next swept of expired entries (`WakeRules.sweepInterval`).
    var nextSweep: Timestamp?

    public init(configuration: Configuration = Configuration()) {
        self.configuration = configuration
    }

    // MARK: - What the rest of the proxy tells the gate

    /// `source` asked for one of `host`'s names other than by browsing (SRV, TXT, A, AAAA, ANY): the resolve
    /// step of browse → resolve → connect. It vouches for the source for `WakeRules.resolveWindow`.
    public mutating func noteResolve(by source: IPAddress, of host: OwnerKey, now: Timestamp) {
        self.sweepIfDue(now: now)
        Self.remember(host, at: now, in: &self.resolvedBy, key: source)
        if let mac = self.learnedMACs[source] { Self.remember(host, at: now, in: &self.resolvedByMAC, key: mac) }
        self.budgets[PairKey(source: source, host: host)] = nil
    }

    /// A frame on the link showed `address` at `mac` (an ARP or neighbour-discovery sender, a SYN's source): a
    /// client that resolves over one family and connects over the other is still the same client.
    public mutating func learn(address: IPAddress, mac: MACAddress) {
        guard self.learnedMACs[address] != mac else { return }
        if self.learnedMACs.count >= WakeRules.maximumLearnedMACs, self.learnedMACs[address] == nil {
            self.learnedMACs.removeAll(keepingCapacity: true)
        }
        self.learnedMACs[address] = mac
        if let resolved = self.resolvedBy[address] {
            for (host, at) in resolved { Self.remember(host, at: at, in: &self.resolvedByMAC, key: mac) }
        }
    }

    /// The host is no longer held: its held packets go (unanswered: the takeover drops their replay copies).
    public mutating func forget(host: OwnerKey) {
        for (key, entry) in self.held where entry.candidate.host == host {
            self.held[key] = nil
            _ = self.heldTimers.remove(key)
        }
    }

    // MARK: - Deciding

    /// The verdict on one packet to a host the proxy answers for.
    public mutating func consider(_ candidate: WakeCandidate, now: Timestamp) -> Decision {
        self.sweepIfDue(now: now)
        // docs/protocol.md §4.4: never a RST, a FIN alone or the NAT-T keepalive; a SYN opens a connection, and
        // only SSH wakes on other segments (an established session whose host fell asleep).
        var isSSHData = false
        if let tcp = candidate.tcp {
            if tcp.flags.contains(.rst) || tcp.flags == .fin || tcp.flags == [.fin, .ack] { return Self.ignored }
            if !tcp.isConnectionRequest {
                let ssh = WakePolicy.Port(.tcp, TakeoverRules.sshPort)
                guard candidate.port == ssh, candidate.servicePorts.contains(ssh) else { return Self.ignored }
                isSSHData = true
            }
        } else if candidate.isNATKeepalive {
            return Self.ignored
        }
        self.learn(address: candidate.source, mac: candidate.sourceMAC)
        // Every connection request counts towards a scan, to any port: nmap's 100 ports are mostly ports the
        // host never registered.
        var scan: ScanSummary? = nil
        if !isSSHData { scan = self.touch(candidate, now: now) }
        if let until = self.scanners[candidate.source]?.until, now < until {
            return self.decline(candidate, .scanner, scan: scan, now: now)
        }
        guard
            self.configuration.policy.wakes(
                candidate.port, macs: candidate.hostMACs, registered: candidate.servicePorts)
        else { return self.decline(candidate, .noService, now: now) }
        if let rule = self.configuration.sources.declines(candidate) { return self.decline(candidate, rule, now: now) }
        if isSSHData { return self.wake(candidate, .sshSession, now: now) }
        let attempt = self.attempt(candidate, now: now)
        // The same packet twice on the wire (a mirrored port, a capture on two paths): decided already.
        if attempt == .duplicate { return Self.ignored }
        if self.hasResolved(candidate, now: now) {
            // Held like any other, for the moment a scan needs to show itself: Home Assistant browses (so it has
            // resolved every sleeping host through the proxy) and then runs its nmap tracker; its first SYN once a
            // quarantine had lapsed woke the host at once (found by the month's run, docs/long-running.md).
            if let existing = self.held[candidate.connection] {
                return Decision(verdict: .hold(until: existing.until, existing.rule), report: nil)
            }
            return self.hold(candidate, .resolvedFirst, until: now + WakeRules.holdDelay, now: now)
        }
        // A source that woke this host without resolving it wakes it no more within the hold-off, retransmitted
        // or not: a port monitor's connect() retransmits after a second as a person's does (docs/waking.md §6).
        // The connection that spent the budget goes on as it began: its retransmissions still reach the wake.
        let pair = PairKey(source: candidate.source, host: candidate.host)
        if let budget = self.budgets[pair] {
            if now >= budget.until {
                self.budgets[pair] = nil
            } else if budget.connection != candidate.connection {
                return self.decline(candidate, .monitorBudget, now: now)
            }
        }
        if attempt == .retransmission { return self.wake(candidate, .retransmitted, now: now) }
        if let existing = self.held[candidate.connection] {
            return Decision(verdict: .hold(until: existing.until, existing.rule), report: nil)
        }
        if let tcp = candidate.tcp, Self.isProbeShaped(tcp) {
            return self.hold(candidate, .probeShape, until: now + WakeRules.retransmissionWait, now: now)
        }
        return self.hold(candidate, .holdingForScan, until: now + WakeRules.holdDelay, now: now)
    }

    /// Held packets whose time came: each woken or declined now (a hold for a scan ends in a wake unless its
    /// source turned out to scan; a hold for a retransmission that never came ends in a decline).
    public mutating func due(now: Timestamp) -> [(candidate: WakeCandidate, decision: Decision)] {
        var result: [(candidate: WakeCandidate, decision: Decision)] = []
        for (key, _) in self.heldTimers.takeDue(now: now) {
            guard let entry = self.held.removeValue(forKey: key) else { continue }
            let candidate = entry.candidate
            if let until = self.scanners[candidate.source]?.until, now < until {
                result.append((candidate, self.decline(candidate, .scanner, now: now)))
            } else if entry.rule == .holdingForScan {
                result.append((candidate, self.wake(candidate, .noScanSeen, now: now)))
            } else if entry.rule == .resolvedFirst {
                result.append((candidate, self.wake(candidate, .resolvedFirst, now: now)))
            } else {
                result.append((candidate, self.decline(candidate, entry.rule, now: now)))
            }
        }
        self.sweepIfDue(now: now)
        return result
    }

    public mutating func nextDeadline() -> Timestamp? { self.heldTimers.nextDeadline() }

    /// Whether `source` is in quarantine as a scanner now.
    public func isScanner(_ source: IPAddress, now: Timestamp) -> Bool {
        guard let until = self.scanners[source]?.until else { return false }
        return now < until
    }

    // MARK: - The rules

    /// nmap's raw SYN: window 1024 and a lone MSS option. Operating systems offer SACK and window scaling too.
    static func isProbeShaped(_ tcp: WakeCandidate.TCPShape) -> Bool {
        tcp.window <= WakeRules.probeWindowLimit && tcp.optionKinds.allSatisfy { $0 == WakeRules.mssOption }
    }

    /// Files the touch and says whether it made the source a scanner just now.
    mutating func touch(_ candidate: WakeCandidate, now: Timestamp) -> ScanSummary? {
        let source = candidate.source
        if let scanner = self.scanners[source], now < scanner.until {
            // Still scanning: the quarantine runs from its last packet.
            self.scanners[source] = Scanner(until: now + WakeRules.scannerQuarantine)
            return nil
        }
        if self.touches[source] == nil, self.touches.count >= WakeRules.maximumTrackedSources {
            // A touch seen again is refreshed in place, so the newest is not always the last in its list.
            self.touches = self.touches.filter { $0.value.contains { now - $0.at < WakeRules.scanWindow } }
            if self.touches.count >= WakeRules.maximumTrackedSources { self.touches.removeAll(keepingCapacity: true) }
        }
        var list = (self.touches[source] ?? []).filter { now - $0.at < WakeRules.scanWindow }
        if let index = list.firstIndex(where: { $0.host == candidate.host && $0.port == candidate.port }) {
            list[index].at = now
        } else {
            if list.count >= WakeRules.maximumTouchesPerSource { list.removeFirst() }
            list.append(Touch(host: candidate.host, port: candidate.port, at: now))
        }
        self.touches[source] = list
        var portsPerHost: [OwnerKey: Int] = [:]
        for touch in list { portsPerHost[touch.host, default: 0] += 1 }
        let ports = portsPerHost.values.max() ?? 0
        let hosts = portsPerHost.count
        guard ports >= WakeRules.scanPortsPerHost || hosts >= WakeRules.scanHosts else { return nil }
        if self.scanners.count >= WakeRules.maximumScanners {
            self.scanners = self.scanners.filter { now < $0.value.until }
            if self.scanners.count >= WakeRules.maximumScanners,
                let oldest = self.scanners.min(by: {
                    $0.value.until < $1.value.until
                })
            {
                self.scanners[oldest.key] = nil
            }
        }
        self.scanners[source] = Scanner(until: now + WakeRules.scannerQuarantine)
        self.touches[source] = nil
        self.statistics.scannersFound += 1
        // Whatever it had waiting is a scan too.
        for (key, entry) in self.held where entry.candidate.source == source {
            self.held[key]?.until = now
            self.heldTimers.schedule((), for: key, at: now)
        }
        return ScanSummary(ports: ports, hosts: hosts, quarantine: WakeRules.scannerQuarantine)
    }

    enum AttemptKind { case new, duplicate, retransmission }

    /// The same SYN (connection and initial sequence number) again is a stack's retransmission when it comes
    /// late enough, and a duplicate of the packet already decided on when it comes sooner.
    mutating func attempt(_ candidate: WakeCandidate, now: Timestamp) -> AttemptKind {
        guard let tcp = candidate.tcp, tcp.isConnectionRequest else { return .new }
        let key = candidate.connection
        if let attempt = self.attempts[key], attempt.sequence == tcp.sequenceNumber,
            now - attempt.firstSeen < WakeRules.connectionMemory
        {
            return now - attempt.firstSeen >= WakeRules.retransmissionMinimumGap ? .retransmission : .duplicate
        }
        if self.attempts.count >= WakeRules.maximumConnections { self.prune(now: now) }
        if self.attempts.count >= WakeRules.maximumConnections { self.attempts.removeAll(keepingCapacity: true) }
        self.attempts[key] = Attempt(sequence: tcp.sequenceNumber, firstSeen: now)
        return .new
    }

    /// Whether `source` (or the machine with `mac`) resolved `host` within `WakeRules.resolveWindow`.
    public func resolvedRecently(by source: IPAddress, mac: MACAddress, host: OwnerKey, now: Timestamp) -> Bool {
        func recent(_ table: [OwnerKey: Timestamp]?) -> Bool {
            guard let at = table?[host] else { return false }
            return now - at < WakeRules.resolveWindow
        }
        return recent(self.resolvedBy[source]) || recent(self.resolvedByMAC[mac])
    }

    func hasResolved(_ candidate: WakeCandidate, now: Timestamp) -> Bool {
        func recent(_ table: [OwnerKey: Timestamp]?) -> Bool {
            guard let at = table?[candidate.host] else { return false }
            return now - at < WakeRules.resolveWindow
        }
        return recent(self.resolvedBy[candidate.source]) || recent(self.resolvedByMAC[candidate.sourceMAC])
    }
}
