import SleepProxyWire

/// The gate's verdicts as they are recorded (the monitor budget, the held table, the collapsed declines), and the
/// bookkeeping that keeps every table bounded (`WakeRules`).
extension WakeGate {
    // MARK: - Verdicts

    static let ignored = Decision(verdict: .ignore, report: nil)

    mutating func wake(_ candidate: WakeCandidate, _ rule: WakeRule, now: Timestamp) -> Decision {
        // The connection is settled: its other held copy (a retransmission settled it) goes.
        if self.held.removeValue(forKey: candidate.connection) != nil {
            _ = self.heldTimers.remove(candidate.connection)
        }
        self.statistics.woken[rule, default: 0] += 1
        let pair = PairKey(source: candidate.source, host: candidate.host)
        switch rule {
        case .noScanSeen, .retransmitted:
            // Woken without a resolve: the source's one wake of this host for the hold-off (docs/waking.md §6).
            // A retransmission of the connection that spent it leaves it as it was.
            if self.configuration.monitorHoldoff > .zero, self.budgets[pair].map({ now >= $0.until }) ?? true {
                if self.budgets.count >= WakeRules.maximumBudgets {
                    self.budgets = self.budgets.filter { now < $0.value.until }
                }
                if self.budgets.count < WakeRules.maximumBudgets {
                    self.budgets[pair] = Budget(
                        until: now + self.configuration.monitorHoldoff, connection: candidate.connection)
                }
            }
        case .resolvedFirst, .sshSession:
            self.budgets[pair] = nil
        default:
            break
        }
        return Decision(verdict: .wake(rule), report: nil)
    }

    mutating func hold(_ candidate: WakeCandidate, _ rule: WakeRule, until: Timestamp, now: Timestamp) -> Decision {
        guard self.held.count < WakeRules.maximumHeld else { return self.decline(candidate, .busy, now: now) }
        self.statistics.held += 1
        self.held[candidate.connection] = Held(candidate: candidate, rule: rule, until: until)
        self.heldTimers.schedule((), for: candidate.connection, at: until)
        return Decision(verdict: .hold(until: until, rule), report: nil)
    }

    mutating func decline(_ candidate: WakeCandidate, _ rule: WakeRule, scan: ScanSummary? = nil, now: Timestamp)
        -> Decision
    {
        if self.held.removeValue(forKey: candidate.connection) != nil {
            _ = self.heldTimers.remove(candidate.connection)
        }
        self.statistics.declined[rule, default: 0] += 1
        let key = DeclineKey(source: candidate.source, host: candidate.host, rule: rule)
        var count = self.declines[key] ?? DeclineCount(lastReported: now)
        count.since += 1
        let first = self.declines[key] == nil
        if first, self.declines.count >= WakeRules.maximumDeclineKeys {
            self.declines = self.declines.filter {
                $0.value.since > 0 || now - $0.value.lastReported < WakeRules.declineLogInterval
            }
            // Still full: counted in the metrics only.
            if self.declines.count >= WakeRules.maximumDeclineKeys {
                return Decision(verdict: .decline(rule), report: nil)
            }
        }
        // Every source is told once, then every declineLogInterval with its count; a flood from ever new (spoofed)
        // sources would still make a line a packet, so lines of either kind also have a budget a minute. Past it
        // they are counted, and the source's next line carries the count.
        if first || scan != nil || now - count.lastReported >= WakeRules.declineLogInterval,
            self.reportBudget.admit(scan != nil ? "scanners" : "declines", now: now).allowed
        {
            self.declines[key] = DeclineCount(lastReported: now)
            return Decision(verdict: .decline(rule), report: DeclineReport(rule: rule, count: count.since, scan: scan))
        }
        self.declines[key] = count
        return Decision(verdict: .decline(rule), report: nil)
    }

    // MARK: - Housekeeping

    /// Files a resolve, keeping the table and each source's list bounded (expired entries go first, then the
    /// oldest).
    static func remember<Key: Hashable>(
        _ host: OwnerKey, at: Timestamp, in table: inout [Key: [OwnerKey: Timestamp]], key: Key
    ) {
        if table[key] == nil, table.count >= WakeRules.maximumResolvers {
            table = table.filter { entry in entry.value.values.contains { at - $0 < WakeRules.resolveWindow } }
            if table.count >= WakeRules.maximumResolvers { table.removeAll(keepingCapacity: true) }
        }
        var hosts = table[key] ?? [:]
        if hosts[host] == nil, hosts.count >= WakeRules.maximumResolvedHostsPerSource,
            let oldest = hosts.min(by: { $0.value < $1.value })
        {
            hosts[oldest.key] = nil
        }
        hosts[host] = max(hosts[host] ?? at, at)
        table[key] = hosts
    }

    /// Sweeps the tables at most once a `WakeRules.sweepInterval`, from the calls that fill them.
    mutating func sweepIfDue(now: Timestamp) {
        if let next = self.nextSweep, now < next { return }
        self.nextSweep = now + WakeRules.sweepInterval
        self.prune(now: now)
    }

    /// Drops what can no longer change a verdict: touches outside the scan window, a connection no longer matched
    /// for retransmission, a quarantine or a budget over, a resolve past its window, and a decline told more than a
    /// log interval ago with nothing counted since (its next decline is told at once, as a first one is).
    mutating func prune(now: Timestamp) {
        // A touch seen again is refreshed in place, so the newest is not always the last in its list.
        self.touches = self.touches.filter { $0.value.contains { now - $0.at < WakeRules.scanWindow } }
        self.declines = self.declines.filter {
            $0.value.since > 0 || now - $0.value.lastReported < WakeRules.declineLogInterval
        }
        self.attempts = self.attempts.filter { now - $0.value.firstSeen < WakeRules.connectionMemory }
        self.scanners = self.scanners.filter { now < $0.value.until }
        self.budgets = self.budgets.filter { now < $0.value.until }
        self.resolvedBy = self.resolvedBy.compactMapValues { hosts in
            let kept = hosts.filter { now - $0.value < WakeRules.resolveWindow }
            return kept.isEmpty ? nil : kept
        }
        self.resolvedByMAC = self.resolvedByMAC.compactMapValues { hosts in
            let kept = hosts.filter { now - $0.value < WakeRules.resolveWindow }
            return kept.isEmpty ? nil : kept
        }
    }
}
