import FoundationEssentials
import Logging
import SleepProxyCore

/// What the adopted hosts taught (their interface, addresses and records), kept in the state directory as
/// `adopted-learned.entries` so that a restart, an upgrade or a crash forgets nothing of a host that is awake and
/// quiet at that moment: asleep afterwards, it is held with its name and services (docs/adoption.md §3).
///
/// Each host is one entry in the registration journal's own format (`RegistrationJournal`: a CRC each, a damaged
/// entry skipped). Written whole (aside, then renamed over) when what the hosts taught changed, at most every
/// `saveInterval`, and at a clean stop; never synced, since a copy a few seconds old costs nothing that matters
/// (the host teaches it again when it next speaks). Refreshes of the same records do not count as changes, so
/// the file is written when a host's services or addresses change, which is a few times a day in a home
/// (docs/state.md, "SD-card wear").
enum LearnedHostsFile {
    static let fileName = "adopted-learned.entries"
    /// Ours: 32 hosts with 64 KiB of records each, the most adoption keeps (`AdoptionRules`), and their framing.
    static let maximumBytes = 4 << 20
    /// How stale the copy may get before a crash: as long as SSDP's (`SSDPStateFile.saveInterval`).
    static let saveInterval: Duration = .seconds(30)

    static func write(_ hosts: [OwnerRegistration], timeBase: TimeBase, directory: URL) throws {
        var bytes: [UInt8] = []
        for host in hosts { bytes += RegistrationJournal.encode(.put(host), timeBase: timeBase) }
        try Data(bytes).write(to: directory.appendingPathComponent(Self.fileName), options: .atomic)
    }

    /// What the start gives the engine once the adopted set is known: the saved hosts, each damaged entry and an
    /// unreadable file reported (those hosts are learned again when they next speak).
    static func readAtStart(directory: URL, logger: Logger) -> [OwnerRegistration]? {
        do {
            guard let saved = try Self.read(directory: directory, timeBase: SystemClock.timeBase()) else { return nil }
            for problem in saved.problems {
                logger.warning("state: \(Self.fileName): \(problem); that host is learned again")
            }
            return saved.registrations
        } catch {
            logger.warning(
                "state: ignoring \(Self.fileName) (\(error)); adopted hosts are learned again when they next speak")
            return nil
        }
    }

    /// The saved hosts and the damage found (entries skipped), or nil when there is no file.
    static func read(directory: URL, timeBase: TimeBase) throws -> RegistrationJournal.Replay? {
        let url = directory.appendingPathComponent(Self.fileName)
        guard FileManager.default.fileExists(atPath: url.path) else { return nil }
        guard let size = regularFileSize(atPath: url.path) else {
            throw EngineRunnerError(description: "\(url.path) is not a regular file")
        }
        guard size <= Self.maximumBytes else {
            throw EngineRunnerError(description: "\(url.path) is larger than \(Self.maximumBytes) bytes")
        }
        let replay = RegistrationJournal.replay(Array(try Data(contentsOf: url)), timeBase: timeBase)
        // Only what adoption could have written: an entry for a host that registered is not this file's.
        var kept = replay
        kept.registrations = replay.registrations.filter(\.isAdopted)
        return kept
    }
}
