import Foundation

/// What the client did, kept between runs: the Owner sequence and the last registration.
struct ClientState: Codable {
    struct Registration: Codable {
        var proxy: String
        var address: String
        var port: UInt16
        var interface: String
        var at: Date
        var lease: UInt32
        var records: Int
        var parts: Int
        /// When `hook post` told the proxies the host was awake again (the registration ended then).
        var handedBackAt: Date?
    }

    /// The Owner option's sequence number: the same for every registration of one sleep, one more after each
    /// wake (docs/protocol.md §3.3, §5.1: a new number tells every proxy the host is back).
    var sequence: UInt8 = 0
    var last: Registration?

    static func url(_ directory: String) -> URL { URL(fileURLWithPath: directory).appendingPathComponent("state.json") }

    static func load(_ directory: String) -> ClientState {
        guard let data = try? Data(contentsOf: self.url(directory)) else { return ClientState() }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return (try? decoder.decode(ClientState.self, from: data)) ?? ClientState()
    }

    func save(_ directory: String) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(self).write(to: Self.url(directory), options: .atomic)
    }

    /// Where the last registration stands: handed back, lease ended, or held until when.
    static func standing(of last: Registration, now: Date, formatter: ISO8601DateFormatter) -> String {
        let ends = last.at.addingTimeInterval(TimeInterval(last.lease))
        if let back = last.handedBackAt, back >= last.at {
            return
                "handed back at \(formatter.string(from: back)) (the wake was announced): no proxy holds this host now"
        }
        if ends <= now { return "lease ended at \(formatter.string(from: ends)): no proxy holds this host now" }
        return "held by the proxy until \(formatter.string(from: ends)) unless this host wakes first"
    }
}
