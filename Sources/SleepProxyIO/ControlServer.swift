import Foundation
import Logging
import SleepProxyControl

#if canImport(Glibc)
    import Glibc
#endif

/// The admin socket (issue 6 §2): a Unix stream socket, mode 0660, owned by root and an optional group, one
/// JSON request per line and one JSON response per line (`events --follow` keeps streaming). A plain accept
/// thread and a thread per connection: admin traffic is a handful of requests, and every request is answered
/// on the engine thread anyway.
public final class ControlServer: @unchecked Sendable {
    // @unchecked: `connections` is guarded by `lock`; `loop` is set by `start` before any connection is served.
    /// Connections served at once; more are told to retry (a local script looping on the socket must not exhaust
    /// threads).
    public static let maximumConnections = 16
    /// How long one request waits for the engine.
    static let replyTimeout: TimeInterval = 10

    public let path: String
    private let group: String?
    private let engine: RegistrationEngine
    private let logger: Logger
    private let lock = NSLock()
    private var connections = 0
    private var loop: AcceptLoop?

    public init(path: String, group: String?, engine: RegistrationEngine, logger: Logger) {
        self.path = path
        self.group = group
        self.engine = engine
        self.logger = logger
    }

    public struct StartError: Error, CustomStringConvertible {
        public var description: String
    }

    public func start() throws {
        let directory = (self.path as NSString).deletingLastPathComponent
        if !directory.isEmpty {
            try? FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o755])
        }
        var info = stat()
        if lstat(self.path, &info) == 0 {
            // A socket left by a daemon that died: replace it. Anything else is not ours to delete.
            guard info.st_mode & S_IFMT == S_IFSOCK else {
                throw StartError(
                    description:
                        "the control socket path \(self.path) exists and is not a socket; remove it or choose another with --control-socket"
                )
            }
            unlink(self.path)
        }
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else {
            throw StartError(
                description: "cannot create the control socket: \(SystemCallError(function: "socket", errno: errno))")
        }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let bytes = Array(self.path.utf8)
        guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else {
            close(fd)
            throw StartError(
                description: "the control socket path \(self.path) is too long for a Unix socket (at most 107 bytes)")
        }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            for (i, byte) in bytes.enumerated() { raw[i] = byte }
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard bound == 0, listen(fd, 16) == 0 else {
            let error = SystemCallError(function: "bind", errno: errno)
            close(fd)
            throw StartError(description: "cannot listen on the control socket \(self.path): \(error)")
        }
        chmod(self.path, 0o660)
        if let group = self.group {
            guard let entry = getgrnam(group) else {
                close(fd)
                unlink(self.path)
                throw StartError(
                    description:
                        "the control group \"\(group)\" does not exist; create it (groupadd \(group)) or leave --control-group out"
                )
            }
            // Group only (the owner stays whoever runs the daemon: changing it needs CAP_CHOWN).
            chown(self.path, uid_t.max, entry.pointee.gr_gid)
        }
        self.loop = AcceptLoop(fd: fd, name: "control") { [self] client in self.admit(client) }
        self.logger.info("control: listening on \(self.path)")
    }

    public func stop() {
        guard let loop = self.loop, !loop.isStopped else { return }
        loop.stop()
        unlink(self.path)
    }

    private var isStopped: Bool { self.loop?.isStopped ?? true }

    /// One connection: served on a thread of its own, up to `maximumConnections` at once.
    private func admit(_ client: Int32) {
        let admitted = self.lock.withLock { () -> Bool in
            guard self.connections < Self.maximumConnections else { return false }
            self.connections += 1
            return true
        }
        guard admitted else {
            Self.write(ControlResponse.failure("too many admin connections at once; try again"), to: client)
            close(client)
            return
        }
        let thread = Thread { [self] in
            self.serve(client)
            close(client)
            self.lock.withLock { self.connections -= 1 }
        }
        thread.start()
    }

    @discardableResult
    static func write(_ response: ControlResponse, to fd: Int32) -> Bool {
        guard let line = try? ControlProtocol.frame(response) else { return false }
        var offset = 0
        while offset < line.count {
            let sent = line[offset...].withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if sent <= 0 { return false }
            offset += sent
        }
        return true
    }

    private func serve(_ fd: Int32) {
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var buffer: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while !self.isStopped {
            let count = recv(fd, &chunk, chunk.count, 0)
            guard count > 0 else { return }
            buffer += chunk[0..<count]
            let lines: [[UInt8]]
            do {
                lines = try ControlProtocol.takeLines(from: &buffer)
            } catch {
                Self.write(.failure("request longer than \(ControlProtocol.maximumLineLength) bytes"), to: fd)
                return
            }
            for line in lines {
                guard let request = try? ControlProtocol.decode(ControlRequest.self, from: line) else {
                    Self.write(.failure("not a control request (one JSON object per line; see README)"), to: fd)
                    continue
                }
                let response = self.ask(request)
                guard Self.write(response, to: fd) else { return }
                if request.command == .events, request.follow == true, response.ok {
                    self.follow(request, after: response.events?.last, to: fd)
                    return
                }
            }
        }
    }

    private func ask(_ request: ControlRequest) -> ControlResponse {
        let box = ResponseBox()
        self.engine.control(request) { response in box.set(response) }
        return box.wait(timeout: Self.replyTimeout)
            ?? .failure("the daemon did not answer within \(Int(Self.replyTimeout)) s")
    }

    /// Streams each new wake-log entry until the client goes away or the daemon stops.
    private func follow(_ request: ControlRequest, after last: WakeLogEntry?, to fd: Int32) {
        var seen = self.engine.wakeLog.recent.count
        var lastSeen = last ?? self.engine.wakeLog.recent.last
        while !self.isStopped {
            usleep(250_000)
            let recent = self.engine.wakeLog.recent
            // The log keeps the newest 1,000: find where the last entry sent sits now.
            var start = recent.count
            if let lastSeen, let index = recent.lastIndex(of: lastSeen) {
                start = index + 1
            } else if recent.count > seen {
                start = seen
            }
            seen = recent.count
            for entry in recent[min(start, recent.count)...] {
                lastSeen = entry
                if let target = request.target {
                    let name = RegistrationEngine.normalisedName(target)
                    guard
                        entry.mac == target.lowercased()
                            || entry.hostName.map(RegistrationEngine.normalisedName) == name
                    else { continue }
                }
                guard Self.write(ControlResponse(events: [entry]), to: fd) else { return }
            }
            // A peer that closed its end: recv returns 0 at once.
            var probe: UInt8 = 0
            if recv(fd, &probe, 1, Int32(MSG_DONTWAIT | MSG_PEEK)) == 0 { return }
        }
    }
}

/// A one-shot slot a reply is delivered to from the engine thread.
final class ResponseBox: @unchecked Sendable {
    private let condition = NSCondition()
    private var value: ControlResponse?

    func set(_ response: ControlResponse) {
        self.condition.lock()
        self.value = response
        self.condition.signal()
        self.condition.unlock()
    }

    func wait(timeout: TimeInterval) -> ControlResponse? {
        self.condition.lock()
        defer { self.condition.unlock() }
        let deadline = Date(timeIntervalSinceNow: timeout)
        while self.value == nil, self.condition.wait(until: deadline) {}
        return self.value
    }
}
