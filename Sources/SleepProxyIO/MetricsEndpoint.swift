import CoreMetrics
import Foundation
import Logging
import Prometheus
import SleepProxyControl
import SleepProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// The Prometheus endpoint (issue 6 §3): `GET /metrics` on a local TCP address, in the text exposition format.
///
/// The engine keeps plain counts (it must not pay for metrics on its hot paths); at each scrape the endpoint
/// reads the engine's status and brings swift-metrics counters and gauges, backed by swift-prometheus, up to
/// date with the difference since the last scrape.
public final class MetricsEndpoint: @unchecked Sendable {
    // @unchecked: `last` is touched only by the serving thread; `loop` is set by `start` before it serves.
    public let address: String
    public let port: UInt16
    private let engine: RegistrationEngine
    private let logger: Logger
    private let registry = PrometheusCollectorRegistry()
    private let factory: PrometheusMetricsFactory
    private var last: [String: Int] = [:]
    private var loop: AcceptLoop?

    public struct StartError: Error, CustomStringConvertible {
        public var description: String
    }

    /// `address` is `HOST:PORT` with an IPv4 host (localhost by default: the figures are for this machine).
    public init(address: String, engine: RegistrationEngine, logger: Logger) throws {
        let parts = address.split(separator: ":")
        guard parts.count == 2, let port = UInt16(parts[1]), port > 0, inet_addr(String(parts[0])) != INADDR_NONE else {
            throw StartError(
                description: "--prometheus-address must be IPv4:PORT such as 127.0.0.1:9580, not \"\(address)\"")
        }
        self.address = String(parts[0])
        self.port = port
        self.engine = engine
        self.logger = logger
        self.factory = PrometheusMetricsFactory(registry: self.registry)
    }

    public func start() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else {
            throw StartError(
                description: "cannot create the metrics socket: \(SystemCallError(function: "socket", errno: errno))")
        }
        var one: Int32 = 1
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = self.port.bigEndian
        address.sin_addr.s_addr = inet_addr(self.address)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard bound == 0, listen(fd, 8) == 0 else {
            let error = SystemCallError(function: "bind", errno: errno)
            close(fd)
            throw StartError(
                description:
                    "cannot serve metrics on \(self.address):\(self.port) (\(error)); choose another with --prometheus-address, or turn it off with --prometheus-address none"
            )
        }
        self.loop = AcceptLoop(fd: fd, name: "metrics") { [self] client in self.respond(to: client) }
        self.logger.info("metrics: serving Prometheus metrics on http://\(self.address):\(self.port)/metrics")
    }

    public func stop() {
        self.loop?.stop()
    }

    private func respond(to client: Int32) {
        // One request per connection, read with a short timeout: a slow or silent peer cannot hold the loop.
        var timeout = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var request = [UInt8](repeating: 0, count: 2048)
        let count = recv(client, &request, request.count, 0)
        let line =
            count > 0
            ? String(decoding: request[0..<count], as: UTF8.self).split(separator: "\r\n").first.map(String.init) ?? ""
            : ""
        let response: [UInt8]
        if line.hasPrefix("GET /metrics ") || line == "GET /metrics" {
            let body = self.scrape()
            response =
                Array(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n"
                        .utf8) + body
        } else {
            let body = Array("sleepproxyd serves GET /metrics only\n".utf8)
            response =
                Array(
                    "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: \(body.count)\r\nConnection: close\r\n\r\n"
                        .utf8) + body
        }
        _ = response.withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
        close(client)
    }

    /// Brings every metric up to date with the engine's counts and renders the registry.
    func scrape() -> [UInt8] {
        let status = self.engine.currentStatus
        let registration = status.statistics
        self.count("sleepproxy_registrations_total", ["outcome": "accepted"], registration.accepted)
        self.count("sleepproxy_registrations_total", ["outcome": "refused"], registration.refused.values.reduce(0, +))
        self.count(
            "sleepproxy_registrations_total", ["outcome": "malformed"], registration.malformed.values.reduce(0, +))
        self.count("sleepproxy_registrations_total", ["outcome": "not_implemented"], registration.notImplemented)
        for reason in RegistrationRefusal.allCases {
            self.count("sleepproxy_refusals_total", ["reason": reason.rawValue], registration.refused[reason] ?? 0)
        }
        for problem in RegistrationProblem.allCases {
            self.count(
                "sleepproxy_parse_errors_total", ["reason": "registration_\(problem.rawValue)"],
                registration.malformed[problem] ?? 0)
        }
        self.count("sleepproxy_parse_errors_total", ["reason": "mdns_malformed"], status.responder.malformed)
        self.count("sleepproxy_parse_errors_total", ["reason": "frame_malformed"], status.takeover.malformedFrames)
        self.count("sleepproxy_datagrams_dropped_total", [:], status.droppedDatagrams)
        self.count("sleepproxy_frames_dropped_total", [:], status.droppedFrames)
        self.count("sleepproxy_queries_answered_total", [:], status.responder.answeredQueries)
        self.count("sleepproxy_mdns_packets_sent_total", [:], status.responder.packetsSent)
        self.count("sleepproxy_hand_backs_total", [:], status.responder.handBacks)
        self.count("sleepproxy_magic_packets_total", [:], status.takeover.magicPackets)
        self.count("sleepproxy_arp_replies_total", [:], status.takeover.arpReplies)
        self.count("sleepproxy_neighbour_advertisements_total", [:], status.takeover.neighbourAdvertisements)
        self.count("sleepproxy_ignored_connections_total", [:], status.takeover.ignoredConnections)
        for reason in WakeLogEntry.Trigger.Kind.allCases {
            self.count("sleepproxy_wakes_total", ["reason": reason.rawValue], status.wakesByReason[reason] ?? 0)
        }
        CoreMetrics.Gauge(label: "sleepproxy_hosts", dimensions: [], factory: self.factory).record(status.hostCount)
        for state in HostState.allCases {
            CoreMetrics.Gauge(
                label: "sleepproxy_hosts_by_state", dimensions: [("state", state.rawValue)], factory: self.factory
            ).record(status.hostsByState[state] ?? 0)
        }
        CoreMetrics.Gauge(label: "sleepproxy_records", dimensions: [], factory: self.factory).record(status.recordCount)
        return self.registry.emitToBuffer()
    }

    /// Advances a counter to `value` (the engine's counts only grow; after a reset the difference is dropped).
    private func count(_ name: String, _ labels: [String: String], _ value: Int) {
        let dimensions = labels.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
        let key = name + dimensions.map { "\($0.0)=\($0.1)" }.joined(separator: ",")
        let delta = value - (self.last[key] ?? 0)
        self.last[key] = value
        let counter = CoreMetrics.Counter(label: name, dimensions: dimensions, factory: self.factory)
        if delta > 0 { counter.increment(by: delta) } else { counter.increment(by: 0) }
    }
}
