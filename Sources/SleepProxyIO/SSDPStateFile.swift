import FoundationEssentials
import SleepProxyCore
import SleepProxyWire

/// What the proxy knows of its hosts' UPnP devices (`SSDPProxy.learnedByHost`), kept in the state directory
/// across restarts: a server asleep when the proxy restarts never announces itself again until it wakes, so
/// without this copy the proxy could neither answer for it nor wake it on its description port (docs/ssdp.md).
///
/// Written whole (aside, then renamed over) at a clean stop and at most every `SSDPStateFile.saveInterval` while
/// the proxy runs; read once at start. Ages are stored relative to the save, in wall-clock seconds, because the
/// engine's clock does not carry over a reboot. A file that cannot be read is ignored: the hosts are then
/// learned again when they next speak, as on a first start.
struct SSDPStateFile: Codable, Equatable {
    static let fileName = "upnp.json"
    /// Ours, and small: 64 entries of a few hundred bytes per host, for the hosts that run UPnP servers.
    static let maximumBytes = 8 << 20
    /// How stale the copy may get after a crash: entries change only when hosts announce or register.
    static let saveInterval: Duration = .seconds(30)

    var savedAt: Double
    var hosts: [Host]

    struct Host: Codable, Equatable {
        var interface: String
        var mac: String
        var entries: [Entry]
    }

    struct Entry: Codable, Equatable {
        var ipv6: Bool
        /// `SSDPScope`; absent in files written by 0.5.0, where an IPv6 entry's scope is its LOCATION's.
        var scope: SSDPScope?
        var type: String
        var usn: String
        var location: String
        var server: String?
        var maxAge: Int
        var bootID: UInt32?
        var configID: UInt32?
        /// Seconds before `savedAt` that the host last said it.
        var age: Double
        var intervalSeconds: Double?
    }

    init(_ learned: [OwnerKey: [SSDPEntry]], now: Timestamp, savedAt: Date) {
        self.savedAt = savedAt.timeIntervalSince1970
        self.hosts = learned.keys.sorted().map { key in
            Host(
                interface: key.interface, mac: key.primaryMAC.description,
                entries: learned[key]!.map { entry in
                    Entry(
                        ipv6: entry.family == .v6, scope: entry.scope, type: entry.notificationType,
                        usn: entry.uniqueServiceName,
                        location: entry.location, server: entry.server, maxAge: entry.maximumAge, bootID: entry.bootID,
                        configID: entry.configID, age: Self.seconds(now - entry.refreshedAt),
                        intervalSeconds: entry.interval.map(Self.seconds))
                })
        }
    }

    /// The entries as the engine takes them, aged by the time since the save.
    func learned(now: Timestamp, at date: Date) -> [OwnerKey: [SSDPEntry]] {
        let sinceSave = max(0, date.timeIntervalSince1970 - self.savedAt)
        var result: [OwnerKey: [SSDPEntry]] = [:]
        for host in self.hosts {
            guard let mac = MACAddress(host.mac) else { continue }
            result[OwnerKey(interface: host.interface, primaryMAC: mac)] = host.entries.compactMap { entry in
                guard entry.age.isFinite, entry.age >= 0, SSDPRules.maximumAgeRange.contains(entry.maxAge) else {
                    return nil
                }
                let scope =
                    entry.scope ?? SSDPLocation(entry.location).flatMap(\.address).map(SSDPScope.init(of:)) ?? .link
                return SSDPEntry(
                    family: entry.ipv6 ? .v6 : .v4, scope: scope, notificationType: entry.type,
                    uniqueServiceName: entry.usn,
                    location: entry.location, server: entry.server, maximumAge: entry.maxAge, bootID: entry.bootID,
                    configID: entry.configID, refreshedAt: now - .milliseconds(Int64((entry.age + sinceSave) * 1000)),
                    interval: entry.intervalSeconds.flatMap {
                        $0.isFinite && $0 > 0 ? .milliseconds(Int64($0 * 1000)) : nil
                    })
            }
        }
        return result
    }

    func write(directory: URL) throws {
        let data = try JSONEncoder().encode(self)
        try data.write(to: directory.appendingPathComponent(Self.fileName), options: .atomic)
    }

    /// The saved copy, or nil when there is none; a file too large or not ours is reported and ignored.
    static func read(directory: URL) throws -> SSDPStateFile? {
        try readStateFile(directory.appendingPathComponent(self.fileName), maximumBytes: self.maximumBytes)
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }
}

/// A JSON file of the state directory, or nil when there is none; one that is not a regular file, is larger than
/// `maximumBytes` or does not decode is refused with a sentence (the caller reports it and goes on without it).
func readStateFile<T: Decodable>(_ url: URL, maximumBytes: Int) throws -> T? {
    guard FileManager.default.fileExists(atPath: url.path) else { return nil }
    guard let size = regularFileSize(atPath: url.path) else {
        throw EngineRunnerError(description: "\(url.path) is not a regular file")
    }
    guard size <= maximumBytes else {
        throw EngineRunnerError(description: "\(url.path) is larger than \(maximumBytes) bytes")
    }
    return try JSONDecoder().decode(T.self, from: Data(contentsOf: url))
}
