import FoundationEssentials
import SleepProxyControl
import SleepProxyCore
import SleepProxyWire

/// What the proxy saves (docs/savings.md): the ledger fed from the engine's presence changes and wake decisions,
/// advanced once a minute on the boot clock with the box's calendar beside it, its changed days handed to the
/// history's writer every few minutes; and what it adds up to, for the control protocol and the counters.
extension EngineRunner {
    /// Ours: how often every host's time is brought up to date when nothing changes (the counters and Home
    /// Assistant's sensors move at this pace; a change of state brings it up to date at once).
    static let savingsAdvanceInterval: Duration = .seconds(60)
    /// Ours: how often the changed days go to the runtime directory's file; a crash loses at most this much of the
    /// ledger, a power cut at most a history settle's.
    static let savingsWriteInterval: Duration = .seconds(300)

    /// After the engine thread's first batch: every host restored from the journal counts as what it is now. The time the
    /// daemon was stopped counts for nobody.
    func seedSavings(now: Timestamp) {
        let local = SystemClock.localDayTime()
        self.savings.advance(now: now, local: local)
        for registration in self.engine.registrations.values {
            guard let state = self.engine.state(of: registration.key) else { continue }
            self.savings.hostEntered(
                state, host: registration.key.primaryMAC.description, name: registration.hostName?.description,
                now: now, local: local)
        }
        self.savingsAdvancedAt = now
        self.creditSavings()
    }

    func savingsEntered(_ change: PresenceChange) {
        let now = SystemClock.now()
        self.savings.hostEntered(
            change.state, host: change.host.primaryMAC.description, name: change.hostName, now: now,
            local: SystemClock.localDayTime())
    }

    /// Magic packets sent, or a wake the gate declined (a scan, a sweep, a monitor: docs/waking.md). Connections to
    /// a port the host never offered are not wakes anyone wanted, and are not counted.
    func savingsWoke(_ event: WakeEvent) {
        guard event.kind == .wake || event.kind == .declined else { return }
        self.savings.woke(
            host: event.host.primaryMAC.description, declined: event.kind == .declined, now: SystemClock.now(),
            local: SystemClock.localDayTime())
    }

    /// After every batch: the ledger advanced once a minute, its changes written every `savingsWriteInterval`
    /// (`force`: now, at a stop or a sync).
    func keepSavings(now: Timestamp, force: Bool = false) {
        // Once a restart's hosts are all spoken for again, not before: its first answers do not wait for 10,000
        // hosts' states (those spoken for meanwhile are handed over as they change, `savingsEntered`).
        if self.savingsAdvancedAt == nil {
            guard force || !self.engine.isResuming else { return }
            self.seedSavings(now: now)
        }
        if force || self.savingsAdvancedAt.map({ now - $0 >= Self.savingsAdvanceInterval }) ?? true {
            self.savingsAdvancedAt = now
            self.savings.advance(now: now, local: SystemClock.localDayTime())
            self.creditSavings()
        }
        if force || self.savingsWrittenAt.map({ now - $0 >= Self.savingsWriteInterval }) ?? true {
            self.savingsWrittenAt = now
            if let changes = self.savings.takeChanges() {
                self.historyFile.writeSavings(Array(changes.encoded().utf8))
            }
        }
    }

    /// Adds what each host slept since the last call, at its figure now, to the running totals: a figure changed
    /// by a reload counts from then on, so the counters never go down.
    func creditSavings() {
        var hosts: [SavingsCounters.Host] = []
        for (key, asleep) in self.savings.asleepSinceStart {
            let delta = asleep - (self.savingsCredited[key] ?? 0)
            if delta > 0 {
                self.savingsCredited[key] = asleep
                let saved = self.power.draw(forHost: key).draw.savedWattHours(asleepMilliseconds: delta)
                self.savedWattHoursSinceStart[key, default: 0] += saved
                self.savedWattHoursInAll += saved
            }
            hosts.append(
                SavingsCounters.Host(
                    mac: key, name: self.savings.hosts[key]?.name, asleepSeconds: Double(asleep) / 1000,
                    savedWattHours: self.savedWattHoursSinceStart[key] ?? 0))
        }
        hosts.sort { $0.mac < $1.mac }
        // Hosts the ledger let go of (neither held nor counted on any day kept) go from the totals too.
        if self.savingsCredited.count > self.savings.asleepSinceStart.count {
            self.savingsCredited = self.savingsCredited.filter { self.savings.asleepSinceStart[$0.key] != nil }
            self.savedWattHoursSinceStart = self.savedWattHoursSinceStart.filter {
                self.savings.asleepSinceStart[$0.key] != nil
            }
        }
        if let now = self.savings.last?.monotonic {
            // The proxy's own use the same way: the time it ran since the last credit, at the draw given now.
            if let since = self.proxyCreditedAt, let watts = self.power.proxyWatts, now > since {
                self.proxyUsedWattHours += watts * Double((now - since).nanosecondsClamped) / 3.6e12
            }
            self.proxyCreditedAt = now
        }
        let counters = SavingsCounters(
            hosts: hosts, savedWattHours: self.savedWattHoursInAll,
            proxyUsedWattHours: self.power.proxyWatts == nil ? nil : self.proxyUsedWattHours)
        self.statusLock.withLock { self.status.savings = counters }
    }

    /// `sleepproxyctl savings`: the month asked for (the current one when nil), and the last 30 days for the chart.
    func savingsReport(month text: String?, now: Timestamp) -> ControlResponse {
        self.keepSavings(now: now, force: false)
        let local = SystemClock.localDayTime()
        self.savings.advance(now: now, local: local)
        // The counters as of this answer too, so that a scrape after it agrees with it.
        self.creditSavings()
        let today = local.day
        let month: CivilDate
        if let text {
            guard let parsed = CivilDate(month: text) else {
                return .failure("month must be YYYY-MM, such as \(CivilDate(dayNumber: today).monthText)", .invalid)
            }
            month = parsed
        } else {
            let date = CivilDate(dayNumber: today)
            month = CivilDate(year: date.year, month: date.month, day: 1)
        }
        let monthDays = month.monthDays
        let days = monthDays.lowerBound...max(monthDays.lowerBound, min(monthDays.upperBound, today))
        var total = SavingsLedger.Totals()
        var hosts: [SavingsReport.Host] = []
        for (key, host) in self.savings.hosts {
            let (draw, isDefault) = self.power.draw(forHost: key)
            let totals = self.savings.totals(forHost: key, days: days, draw: draw)
            guard totals.asleepMilliseconds + totals.awakeMilliseconds > 0 || totals.wakes + totals.declinedWakes > 0
            else { continue }
            total.add(totals)
            hosts.append(
                SavingsReport.Host(
                    mac: key, name: host.name, figures: Self.figures(totals), power: draw.description,
                    powerIsDefault: isDefault))
        }
        hosts.sort { ($0.figures.savedWattHours, $1.mac) > ($1.figures.savedWattHours, $0.mac) }
        let running = Double(self.savings.runningMilliseconds(days: days)) / 1000
        let used = self.power.proxyWatts.map { $0 * running / 3600 }
        let chart = self.savings.daily(days: (today - SavingsReport.chartDays + 1)...today, power: self.power).map {
            SavingsReport.Day(
                date: CivilDate(dayNumber: $0.day).description,
                asleepSeconds: Double($0.totals.asleepMilliseconds) / 1000, savedWattHours: $0.totals.savedWattHours)
        }
        var response = ControlResponse()
        response.savings = SavingsReport(
            month: month.monthText, from: CivilDate(dayNumber: days.lowerBound).description,
            to: CivilDate(dayNumber: days.upperBound).description, hosts: hosts, total: Self.figures(total),
            proxy: SavingsReport.Proxy(watts: self.power.proxyWatts, runningSeconds: running, usedWattHours: used),
            netWattHours: total.savedWattHours - (used ?? 0), defaultPower: self.power.defaultDraw.description,
            days: chart)
        return response
    }

    static func figures(_ totals: SavingsLedger.Totals) -> SavingsReport.Figures {
        SavingsReport.Figures(
            asleepSeconds: Double(totals.asleepMilliseconds) / 1000,
            awakeSeconds: Double(totals.awakeMilliseconds) / 1000, savedWattHours: totals.savedWattHours,
            wakes: totals.wakes, declinedWakes: totals.declinedWakes)
    }
}
