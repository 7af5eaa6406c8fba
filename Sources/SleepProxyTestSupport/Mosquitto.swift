import Foundation

/// Debian's Mosquitto broker in a lab host, with its own configuration: a listener on the host's address, user
/// names and passwords (`mosquitto_passwd`), an ACL, no persistence (a restart forgets every retained message,
/// as a broker without a persistence file does). Never the system service.
public final class Mosquitto {
    public static let executable = "/usr/sbin/mosquitto"
    public static var isInstalled: Bool {
        ["/usr/sbin/mosquitto", "/usr/bin/mosquitto_sub", "/usr/bin/mosquitto_pub", "/usr/bin/mosquitto_passwd"]
            .allSatisfy { FileManager.default.isExecutableFile(atPath: $0) }
    }

    public let host: LabHost
    public let address: String
    public let port: Int
    public let directory: URL
    public let users: [String: String]
    public private(set) var process: ManagedProcess?
    private var starts = 0

    /// `acl`: the lines of Mosquitto's acl_file (`user NAME`, `topic read|write|readwrite FILTER`). `tlsPort`: a
    /// second listener speaking TLS with a certificate for `address` signed by a lab authority (`authority`).
    public init(
        in host: LabHost, address: String, port: Int = 1883, tlsPort: Int? = nil, users: [String: String],
        acl: [String]
    ) throws {
        self.host = host
        self.address = address
        self.port = port
        self.users = users
        self.directory = host.labDirectory.appendingPathComponent("mosquitto-\(host.name)")
        try FileManager.default.createDirectory(at: self.directory, withIntermediateDirectories: true)
        let passwords = self.directory.appendingPathComponent("passwords")
        for (index, (user, password)) in users.sorted(by: { $0.key < $1.key }).enumerated() {
            try Command.check(
                ["mosquitto_passwd", "-b"] + (index == 0 ? ["-c"] : []) + [passwords.path, user, password])
        }
        try (acl.joined(separator: "\n") + "\n").write(
            to: self.directory.appendingPathComponent("acl"), atomically: true, encoding: .utf8)
        var configuration = [
            "user root", "persistence false", "listener \(port) \(address)", "allow_anonymous false",
            "password_file \(passwords.path)", "acl_file \(self.directory.appendingPathComponent("acl").path)",
            "log_dest stdout", "log_type error", "log_type warning", "log_type notice",
        ]
        if let tlsPort {
            try self.makeCertificates()
            configuration += [
                "listener \(tlsPort) \(address)", "cafile \(self.authority.path)",
                "certfile \(self.directory.appendingPathComponent("server.pem").path)",
                "keyfile \(self.directory.appendingPathComponent("server.key").path)",
            ]
        }
        try (configuration.joined(separator: "\n") + "\n").write(
            to: self.directory.appendingPathComponent("mosquitto.conf"), atomically: true, encoding: .utf8)
    }

    /// The lab authority's certificate, which signed the TLS listener's.
    public var authority: URL { self.directory.appendingPathComponent("authority.pem") }

    /// A lab certificate authority and a server certificate for `address` (as an IP entry) signed by it.
    private func makeCertificates() throws {
        let path = { (name: String) in self.directory.appendingPathComponent(name).path }
        try Command.check([
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=sleep-proxy lab CA",
            "-keyout", path("authority.key"), "-out", path("authority.pem"),
        ])
        try Command.check([
            "openssl", "req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=\(self.address)", "-keyout",
            path("server.key"), "-out", path("server.csr"),
        ])
        try "subjectAltName = IP:\(self.address)\n".write(
            toFile: path("server.ext"), atomically: true, encoding: .utf8)
        try Command.check([
            "openssl", "x509", "-req", "-in", path("server.csr"), "-CA", path("authority.pem"), "-CAkey",
            path("authority.key"), "-CAcreateserial", "-days", "2", "-extfile", path("server.ext"), "-out",
            path("server.pem"),
        ])
    }

    /// Starts the broker and waits (bounded) until a client of `user` can connect and publish.
    public func start(readyAs user: String) throws {
        self.starts += 1
        let process = try self.host.spawn(
            [Self.executable, "-c", self.directory.appendingPathComponent("mosquitto.conf").path],
            logName: "mosquitto-\(self.starts)")
        self.process = process
        let ready = waitUntil(timeout: 15, interval: 0.2) {
            (try? self.host.run(
                self.client("mosquitto_pub", user: user) + ["-t", "lab/ready", "-m", "1"], timeout: .seconds(5)))?
                .succeeded == true
        }
        guard ready else { throw CommandError("mosquitto did not start: \(process.output)") }
    }

    /// Stops it by its PID.
    public func stop() {
        self.process?.stop()
        self.process = nil
    }

    /// A Mosquitto client's arguments to reach this broker as `user`.
    public func client(_ tool: String, user: String) -> [String] {
        [
            tool, "-h", self.address, "-p", "\(self.port)", "-u", user, "-P", self.users[user] ?? "", "-i",
            "lab-\(user)-\(UUID().uuidString.prefix(8))",
        ]
    }

    /// Every retained message under `filter` as the broker holds it now, topic to payload: what a client that
    /// subscribes now receives at once (bounded: `mosquitto_sub` ends one second after the last of them).
    public func retained(_ filter: String, user: String) throws -> [String: String] {
        let result = try self.host.run(
            self.client("mosquitto_sub", user: user) + ["-t", filter, "-v", "--retained-only", "-W", "1"],
            timeout: .seconds(10))
        var messages: [String: String] = [:]
        for line in result.stdout.split(separator: "\n") {
            guard let space = line.firstIndex(of: " ") else { continue }
            messages[String(line[..<space])] = String(line[line.index(after: space)...])
        }
        return messages
    }

    /// Publishes one message as `user` (not retained unless asked); an empty one clears a retained message.
    public func publish(_ topic: String, _ payload: String, user: String, retain: Bool = false) throws -> CommandResult
    {
        try self.host.run(
            self.client("mosquitto_pub", user: user) + ["-t", topic] + (payload.isEmpty ? ["-n"] : ["-m", payload])
                + (retain ? ["-r"] : []),
            timeout: .seconds(10))
    }

    /// Publishes `count` copies of one message as fast as one client can (`mosquitto_pub -l`: a message a line).
    public func flood(_ topic: String, _ payload: String, count: Int, user: String) throws -> CommandResult {
        try self.host.run(
            self.client("mosquitto_pub", user: user) + ["-t", topic, "-l"], timeout: .seconds(20),
            input: Data(String(repeating: payload + "\n", count: count).utf8))
    }

    /// A subscriber that logs every message under `filter` with the broker's delivery time (`%U`, seconds since
    /// the epoch with nanoseconds), its retain flag and topic, one line each, until stopped.
    public func watch(_ filter: String, user: String, logName: String) throws -> ManagedProcess {
        try self.host.spawn(
            self.client("mosquitto_sub", user: user) + ["-t", filter, "-F", "%U %r %t %p"], logName: logName)
    }
}

/// One line of `Mosquitto.watch`.
public struct MQTTSeen: Sendable {
    public var time: Date
    public var retained: Bool
    public var topic: String
    public var payload: String

    /// The lines of a watcher's log, oldest first.
    public static func parse(_ log: String) -> [MQTTSeen] {
        log.split(separator: "\n").compactMap { line in
            let parts = line.split(separator: " ", maxSplits: 3, omittingEmptySubsequences: false)
            guard parts.count >= 3, let seconds = Double(parts[0]) else { return nil }
            return MQTTSeen(
                time: Date(timeIntervalSince1970: seconds), retained: parts[1] == "1", topic: String(parts[2]),
                payload: parts.count == 4 ? String(parts[3]) : "")
        }
    }
}
