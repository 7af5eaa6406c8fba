import FoundationEssentials
import SleepProxyControl
import SleepProxyCore
import SleepProxyWire

/// Adoption on the engine thread (docs/adoption.md): the hosts adopted in the configuration file and those adopted
/// with `sleepproxyctl adopt` (kept in `adopted.json`) are adopted together; a change that cannot be kept changes
/// nothing.
extension EngineRunner {
    /// The configuration file's adopted hosts changed (at start and on SIGHUP). Too many together with those
    /// adopted at run time: the running set stays, and the log says why.
    func configureAdoption(_ configured: Set<MACAddress>, now: Timestamp, into batch: inout Batch) {
        do {
            let actions = try self.engine.setAdopted(configured.union(self.adoptedAtRunTime), now: now)
            self.adoptedInConfiguration = configured
            self.perform(actions, into: &batch)
        } catch {
            self.logger.error(
                "adopt: \(error) (\(configured.count) in the configuration file, \(self.adoptedAtRunTime.count) with sleepproxyctl adopt); keeping the hosts adopted so far"
            )
        }
        // At start, whether the set was taken or refused: what the hosts taught before the stop, for those adopted
        // that the journal does not hold asleep; saving resumes from here.
        if let saved = self.learnedAtStart {
            self.learnedAtStart = nil
            self.engine.restoreLearned(saved, now: now)
            self.learnedSavedRevision = self.engine.adoptionRevision
        }
    }

    /// `adopt`, `unadopt`, `adopted`.
    func handleAdoption(_ request: ControlRequest, now: Timestamp, actions: inout [EngineAction]) -> ControlResponse {
        guard request.command != .adopted else { return self.adoptedResponse(now: now) }
        guard let target = request.target, let mac = MACAddress(target), AdoptionFile.isHostMAC(mac) else {
            return .failure(
                "\"\(request.target ?? "")\" is not a host's MAC address (six hex pairs such as 02:00:00:00:00:05)",
                .invalid)
        }
        var runTime = self.adoptedAtRunTime
        if request.command == .adopt {
            guard self.engine.canWake else {
                return .failure(
                    "this daemon runs with --no-takeover: it reads no frames, and an adopted host is learned from its own"
                )
            }
            guard !self.adoptedInConfiguration.contains(mac), !runTime.contains(mac) else {
                return self.adoptedResponse(now: now)
            }
            runTime.insert(mac)
        } else {
            if self.adoptedInConfiguration.contains(mac) {
                return .failure(
                    "\(mac) is adopted in the configuration file (adopt = \(mac)): remove it there and reload", .invalid
                )
            }
            guard runTime.remove(mac) != nil else {
                return .failure("\(mac) is not adopted", .notFound)
            }
        }
        // Within the bound before anything is written, so that a refusal leaves the file as it was.
        let all = self.adoptedInConfiguration.union(runTime)
        guard all.count <= AdoptionRules.maximumAdopted else {
            return .failure(
                "\(all.count) hosts would be adopted; at most \(AdoptionRules.maximumAdopted) can be; nothing changed",
                .invalid)
        }
        // Durable first: a set that cannot be kept across a restart is not taken.
        do {
            try AdoptionFile(runTime).write(directory: self.journal.directory)
        } catch {
            return .failure("cannot save \(AdoptionFile.fileName): \(error); nothing changed")
        }
        do {
            actions += try self.engine.setAdopted(self.adoptedInConfiguration.union(runTime), now: now)
        } catch {
            try? AdoptionFile(self.adoptedAtRunTime).write(directory: self.journal.directory)
            return .failure("\(error); nothing changed", .invalid)
        }
        self.adoptedAtRunTime = runTime
        actions.append(
            .log(
                .notice,
                request.command == .adopt
                    ? "admin: adopted \(mac): it is kept present while it sleeps"
                    : "admin: unadopted \(mac): no longer kept present"))
        return self.adoptedResponse(now: now)
    }

    func adoptedResponse(now: Timestamp) -> ControlResponse {
        var response = ControlResponse()
        response.adopted = self.engine.adoptedHosts.map { host in
            let key = host.interface.map { OwnerKey(interface: $0, primaryMAC: host.mac) }
            let held = key.flatMap { self.engine.state(of: $0) }
            let state: String
            if let held, self.engine.registration(key!)?.isAdopted == true {
                state = PresenceState(held).rawValue
            } else {
                switch host.phase {
                case .unheard: state = "not heard yet"
                case .checking: state = "checking"
                case .watching, .held: state = "awake"
                case .away: state = "off or away"
                }
            }
            let summary = OwnerSummary(records: host.records.map(\.record))
            let addressStates = key.flatMap { self.engine.addressStates(of: $0) } ?? []
            let nicAnswers =
                held == .asleep && !addressStates.isEmpty
                && addressStates.contains { $0.1 == .ownerSeen || $0.1 == .stopped }
            return AdoptedSummary(
                mac: host.mac.description, interface: host.interface, state: state,
                configured: self.adoptedInConfiguration.contains(host.mac),
                addresses: host.addresses.map(\.description),
                names: summary.hostName.map { [$0.description] } ?? [],
                services: summary.services.map(\.instance.description), records: host.records.count,
                refused: host.refused,
                lastSignOfLifeSecondsAgo: host.lastSignOfLife.map { Double((now - $0).nanosecondsClamped) / 1e9 },
                nicAnswers: nicAnswers,
                netbiosNames: host.windows.names.isEmpty
                    ? nil : host.windows.names.map { $0.name.description + ($0.isGroup ? " (group)" : "") },
                llmnrName: host.windows.llmnrName, wsdEndpoint: host.windows.wsd?.address)
        }
        return response
    }
}
