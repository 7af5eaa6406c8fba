import FoundationEssentials
import SleepProxyCore
import SleepProxyWire

/// The hosts adopted at run time (`sleepproxyctl adopt`), kept in the state directory as `adopted.json` so that
/// a restart keeps them (docs/adoption.md). Hosts adopted in the configuration file are not in it: the file is
/// theirs. Written whole (aside, then renamed over) only when a person adopts or unadopts a host, so it costs the
/// SD card nothing day to day. A file that cannot be read stops nothing: it is reported and its hosts are not
/// adopted until a person adopts them again.
struct AdoptionFile: Codable, Equatable {
    static let fileName = "adopted.json"
    /// Thirty-two MACs and their quotes; anything larger is not ours.
    static let maximumBytes = 64 * 1024

    var adopted: [String]

    init(adopted: [String]) { self.adopted = adopted }

    init(_ macs: Set<MACAddress>) {
        self.adopted = macs.sorted { $0.rawValue < $1.rawValue }.map(\.description)
    }

    /// The MACs, each checked; a file naming anything else is refused whole.
    func macs() throws -> Set<MACAddress> {
        var result: Set<MACAddress> = []
        for text in self.adopted {
            guard let mac = MACAddress(text), AdoptionFile.isHostMAC(mac) else {
                throw EngineRunnerError(description: "\"\(text)\" is not a host's MAC address")
            }
            result.insert(mac)
        }
        guard result.count <= AdoptionRules.maximumAdopted else {
            throw EngineRunnerError(description: "\(result.count) hosts; at most \(AdoptionRules.maximumAdopted)")
        }
        return result
    }

    /// A MAC a single host can have: not zero, broadcast or a group address.
    static func isHostMAC(_ mac: MACAddress) -> Bool {
        mac != .zero && mac != .broadcast && mac.bytes[0] & 1 == 0
    }

    func write(directory: URL) throws {
        let data = try JSONEncoder().encode(self)
        try data.write(to: directory.appendingPathComponent(Self.fileName), options: .atomic)
    }

    /// The saved set, or nil when there is none.
    static func read(directory: URL) throws -> AdoptionFile? {
        try readStateFile(directory.appendingPathComponent(self.fileName), maximumBytes: self.maximumBytes)
    }
}
