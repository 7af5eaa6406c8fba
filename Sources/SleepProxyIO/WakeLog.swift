import FoundationEssentials
import NIOConcurrencyHelpers
import SleepProxyControl
import SleepProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// The wake log (docs/waking.md §8): one JSON object per line in `wake-events.jsonl`, keeping at least the last
/// `keptEvents` across restarts. It lives in the runtime directory (`/run/sleep-proxy`, memory), not on the SD card:
/// every entry is also a line of the history (`HistoryRecord(event)`), which reaches the state directory in
/// settles a few times a day (docs/state.md, "SD-card wear"); written twice, once to the card line by line, it cost a
/// home a quarter of its daily writes. After a reboot (an empty runtime directory) the log is rebuilt from the
/// history's wake records; a log an earlier release kept in the state directory is moved over once. The file is
/// rewritten with the newest `keptEvents` once it holds twice that.
public final class WakeLog: @unchecked Sendable {
    // @unchecked: used only by the engine thread after init; `recent` is read through `lock`.
    public static let keptEvents = 1000
    public static let fileName = "wake-events.jsonl"

    public let url: URL
    private var lineCount = 0
    private let lock = NIOLock()
    private var recentEntries: [WakeLogEntry] = []

    /// `directory` is the runtime directory; `stateDirectory` where releases before 0.7.0 kept the log, and
    /// `history` what it is rebuilt from when the runtime directory has none.
    public init(directory: URL, stateDirectory: URL? = nil, history: HistoryBook? = nil) {
        self.url = directory.appendingPathComponent(Self.fileName)
        if regularFileSize(atPath: self.url.path) != nil {
            let entries = Self.read(self.url)
            self.lineCount = entries.count
            self.recentEntries = Array(entries.suffix(Self.keptEvents))
            return
        }
        let legacy = stateDirectory.map { $0.appendingPathComponent(Self.fileName) }
        var entries: [WakeLogEntry] = []
        if let legacy, legacy.standardizedFileURL != self.url.standardizedFileURL,
            regularFileSize(atPath: legacy.path) != nil
        {
            entries = Self.read(legacy)
        } else if let history {
            history.forEachEvent { entries.append($0) }
        }
        self.recentEntries = Array(entries.suffix(Self.keptEvents))
        guard !self.recentEntries.isEmpty else { return }
        do {
            var data = Data()
            for entry in self.recentEntries { data += try ControlProtocol.frame(entry) }
            try data.write(to: self.url, options: .atomic)
            self.lineCount = self.recentEntries.count
            if let legacy, legacy.standardizedFileURL != self.url.standardizedFileURL {
                try? FileManager.default.removeItem(at: legacy)
            }
        } catch {
            // Kept in memory; the next append tries the file again.
        }
    }

    /// The newest entries, oldest first.
    public var recent: [WakeLogEntry] { self.lock.withLock { self.recentEntries } }

    /// Whoever follows the log (`sleepproxyctl events --follow`): each new entry is handed to every subscriber, on
    /// the engine thread, as it is appended; the subscriber hops to its own thread.
    private var subscribers: [Int: @Sendable (WakeLogEntry) -> Void] = [:]
    private var nextSubscriber = 0

    public func subscribe(_ handler: @escaping @Sendable (WakeLogEntry) -> Void) -> Int {
        self.lock.withLock {
            self.nextSubscriber += 1
            self.subscribers[self.nextSubscriber] = handler
            return self.nextSubscriber
        }
    }

    public func unsubscribe(_ token: Int) {
        self.lock.withLock { self.subscribers[token] = nil }
    }

    /// Lines that do not parse (a torn last line after a crash) are skipped.
    static func read(_ url: URL) -> [WakeLogEntry] {
        guard let data = try? Data(contentsOf: url) else { return [] }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return data.split(separator: 0x0A).compactMap { try? decoder.decode(WakeLogEntry.self, from: Data($0)) }
    }

    public func append(_ entry: WakeLogEntry) throws {
        let subscribers = self.lock.withLock {
            self.recentEntries.append(entry)
            if self.recentEntries.count > Self.keptEvents {
                self.recentEntries.removeFirst(self.recentEntries.count - Self.keptEvents)
            }
            return Array(self.subscribers.values)
        }
        for subscriber in subscribers { subscriber(entry) }
        let line = try ControlProtocol.frame(entry)
        if self.lineCount + 1 > 2 * Self.keptEvents {
            // Rewrite with the newest entries, atomically (a crash leaves the old file or the new one).
            var data = Data()
            for kept in self.recent { data += try ControlProtocol.frame(kept) }
            try data.write(to: self.url, options: .atomic)
            self.lineCount = self.recent.count
            return
        }
        try appendLines(line, to: self.url.path)
        self.lineCount += 1
    }

    /// The wake log's word for a trigger (the metric label too).
    static func kind(_ trigger: WakeTrigger) -> WakeLogEntry.Trigger.Kind {
        switch trigger {
        case .connection: .connection
        case .mdnsConflict: .mdnsConflict
        case .netbiosConflict: .netbiosConflict
        case .addressConflict: .addressConflict
        case .leaseExpired: .leaseExpired
        case .administrator: .administrator
        case .addressRequest: .addressRequest
        }
    }

    static func kind(_ kind: WakeEvent.Kind) -> WakeLogEntry.Kind {
        switch kind {
        case .wake: .wake
        case .awake: .awake
        case .noResponse: .noResponse
        case .ignored: .ignored
        case .declined: .declined
        }
    }

    static func entry(_ event: WakeEvent, at time: Date) -> WakeLogEntry {
        let trigger: WakeLogEntry.Trigger
        switch event.trigger {
        case .connection(let transport, let client, let clientPort, let port):
            trigger = .init(
                type: .connection, transport: transport.rawValue, client: client.description, clientPort: clientPort,
                port: port)
        case .mdnsConflict(let name, let from):
            trigger = .init(type: .mdnsConflict, name: name.description, from: from.description)
        case .netbiosConflict(let name, let from):
            trigger = .init(type: .netbiosConflict, name: name, from: from.description)
        case .addressConflict(let address, let from):
            trigger = .init(type: .addressConflict, address: address.description, from: from.description)
        case .leaseExpired: trigger = .init(type: .leaseExpired)
        case .administrator: trigger = .init(type: .administrator)
        case .addressRequest(let client, let address):
            trigger = .init(type: .addressRequest, client: client.description, address: address.description)
        }
        return WakeLogEntry(
            kind: Self.kind(event.kind), time: time, mac: event.host.primaryMAC.description,
            interface: event.host.interface, hostName: event.hostName,
            trigger: trigger, seconds: event.seconds, attempts: event.attempts, rule: event.rule?.rawValue,
            count: event.count, scanPorts: event.scan?.ports, scanHosts: event.scan?.hosts,
            quarantineSeconds: event.scan.map { Int($0.quarantine.components.seconds) }, summary: event.summary)
    }
}
