import FoundationEssentials
import SleepProxyCore
import SleepProxyWire

#if canImport(Glibc)
    import Glibc
#endif

/// What a clean stop leaves in the state directory for the next start: the hosts the proxy was speaking for, the
/// other proxies it knew by their MACs (`ProxyEngine.restorePeers`), and when it stopped (wall-clock seconds: the
/// journal's boot-relative clock does not carry over a reboot). The next start takes the file away whatever it
/// decides, so a crash later never finds an old one (`ProxyEngine.resumeSpeaking`, docs/coexistence.md).
///
/// While it runs, the daemon keeps a live copy in the runtime directory (memory), so that a crash is followed by
/// the same start as a clean stop (docs/state.md, "After a crash"): rewritten at once when a host leaves the set (a
/// host that woke must never be spoken for again from a stale copy), within `liveInterval` when one joins (one that
/// is missing is only probed first), and touched every `liveInterval` otherwise, its modification time standing for
/// the moment the daemon was last alive.
struct SpokenForRecord: Codable, Equatable {
    static let fileName = "spoken-for.json"
    /// The file is ours and small; anything larger is not (a host is about 40 bytes of it).
    static let maximumBytes = 4 << 20
    /// Ours: how stale the live copy may be when a host joins the set, and how often it is touched.
    static let liveInterval: Duration = .seconds(1)

    var stoppedAt: Double
    var hosts: [Host]
    /// Absent in files written by 0.5.0.
    var peers: [Peer]?

    struct Host: Codable, Equatable {
        var interface: String
        var mac: String
    }

    struct Peer: Codable, Equatable {
        var interface: String
        var address: String
        var mac: String
        var label: String
        var port: UInt16?
    }

    init(keys: [OwnerKey], peers: [ProxyPeer] = [], stoppedAt: Date) {
        self.stoppedAt = stoppedAt.timeIntervalSince1970
        self.hosts = keys.map { Host(interface: $0.interface, mac: $0.primaryMAC.description) }
        self.peers = peers.compactMap { peer in
            peer.mac.map {
                Peer(
                    interface: peer.interface, address: peer.address.description, mac: $0.description,
                    label: peer.label, port: peer.port)
            }
        }
    }

    /// The peers as the engine takes them; an entry that does not parse is left out.
    func proxyPeers(now: Timestamp) -> [ProxyPeer] {
        (self.peers ?? []).compactMap { peer in
            guard let address = IPAddress(peer.address), let mac = MACAddress(peer.mac),
                peer.label.utf8.count <= 255
            else { return nil }
            return ProxyPeer(
                interface: peer.interface, address: address, label: peer.label, mac: mac, port: peer.port,
                lastHeard: now)
        }
    }

    var keys: [OwnerKey] {
        self.hosts.compactMap { host in MACAddress(host.mac).map { OwnerKey(interface: host.interface, primaryMAC: $0) }
        }
    }

    /// Writes the record (a whole file or none: written aside, then renamed over).
    static func write(_ record: SpokenForRecord, directory: URL) throws {
        let data = try JSONEncoder().encode(record)
        try data.write(to: directory.appendingPathComponent(self.fileName), options: .atomic)
    }

    /// The record to resume from: a clean stop's in the state directory, else the live copy a crash left in the
    /// runtime directory, as of when its daemon was last alive. Both are taken away. What `ahead` read of a file
    /// that is still the same one (`FileIdentity`) is used instead of reading it again.
    static func take(stateDirectory: URL, runtimeDirectory: URL?, ahead: Ahead = Ahead()) -> Reading? {
        let live = runtimeDirectory.flatMap { directory -> Reading? in
            guard var reading = self.take(directory: directory, ahead: ahead.runtime) else { return nil }
            reading.record.stoppedAt = max(reading.record.stoppedAt, Double(reading.file.modifiedSeconds))
            return reading
        }
        return self.take(directory: stateDirectory, ahead: ahead.state) ?? live
    }

    /// Reads and removes the record; nil when there is none or it cannot be read (then the hosts are probed
    /// first, which is always safe).
    static func take(directory: URL, ahead: Reading? = nil) -> Reading? {
        let url = directory.appendingPathComponent(self.fileName)
        defer { try? FileManager.default.removeItem(at: url) }
        guard let file = FileIdentity(path: url.path) else { return nil }
        if let ahead, ahead.file == file { return ahead }
        return self.read(url, file)
    }

    /// Both files read, nothing removed: done on a thread of its own while the journal is decoded, before the
    /// state directory's lock is taken (reading changes nothing in it), so that the start does not decode 10,000
    /// hosts' JSON after the restore (docs/scale.md, "0.8.0: the start's other reads out of the restore's way").
    static func readAhead(stateDirectory: URL, runtimeDirectory: URL?) -> Ahead {
        func read(_ directory: URL) -> Reading? {
            let url = directory.appendingPathComponent(self.fileName)
            return FileIdentity(path: url.path).flatMap { self.read(url, $0) }
        }
        return Ahead(state: read(stateDirectory), runtime: runtimeDirectory.flatMap(read))
    }

    private static func read(_ url: URL, _ file: FileIdentity) -> Reading? {
        guard file.size <= self.maximumBytes, let data = try? Data(contentsOf: url),
            let record = try? JSONDecoder().decode(SpokenForRecord.self, from: data)
        else { return nil }
        // The hosts are kept as their keys alone: read ahead, the record is held through the restore, and its
        // hosts' strings were a megabyte at 10,000 hosts beside the restore's peak (docs/scale.md).
        var kept = record
        kept.hosts = []
        return Reading(file: file, record: kept, keys: record.keys)
    }

    /// A record as read from one file, its hosts' keys parsed (and its `hosts` left empty).
    struct Reading: Equatable, Sendable {
        var file: FileIdentity
        var record: SpokenForRecord
        var keys: [OwnerKey]
    }

    /// What `readAhead` found in each directory.
    struct Ahead: Sendable {
        var state: Reading?
        var runtime: Reading?
    }

    /// Which file was read, and as it was: the record is always replaced whole (written aside and renamed over), so
    /// the same inode, size and modification time mean the same bytes.
    struct FileIdentity: Equatable, Sendable {
        var device: UInt64
        var inode: UInt64
        var size: Int
        var modifiedSeconds: Int
        var modifiedNanoseconds: Int

        /// nil when there is no regular file at `path`.
        init?(path: String) {
            var info = stat()
            guard stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFREG else { return nil }
            self.device = UInt64(info.st_dev)
            self.inode = UInt64(info.st_ino)
            self.size = Int(info.st_size)
            self.modifiedSeconds = Int(info.st_mtim.tv_sec)
            self.modifiedNanoseconds = Int(info.st_mtim.tv_nsec)
        }
    }
}
