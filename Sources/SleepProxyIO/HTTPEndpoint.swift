import CoreMetrics
import FoundationEssentials
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import Prometheus
import SleepProxyControl
import SleepProxyCore
import SleepProxyStatusPage

#if canImport(Glibc)
    import Glibc
#endif

/// The daemon's HTTP server (docs/status-page.md, docs/metrics.md): Prometheus metrics at
/// `GET /metrics`, the read-only status page at `/` and `/host/MAC`, and the JSON API under `/api/v1/`, on a
/// local TCP address (loopback by default).
///
/// The engine keeps plain counts (it must not pay for metrics on its hot paths); at each scrape the endpoint
/// reads the engine's status and brings swift-metrics counters and gauges, backed by swift-prometheus, up to
/// date with the difference since the last scrape. Pages and API answers are asked of the engine thread as
/// `sleepproxyctl`'s requests are, and built on the event loop, off that thread.
public final class HTTPEndpoint: @unchecked Sendable {
    // @unchecked: `last` is guarded by `lock` (scrapes may come in on several event loops); `channel` is set by
    // `start` before anyone can stop it.
    public let address: String
    public let port: UInt16
    let engine: EngineRunner
    private let logger: Logger
    private let registry = PrometheusCollectorRegistry()
    private let factory: PrometheusMetricsFactory
    private let lock = NIOLock()
    private var last: [String: Int] = [:]
    private var lastFloat: [String: Double] = [:]
    /// The hosts whose savings series the registry holds (`scrape`).
    private var savingsSeries: Set<String> = []
    private var channel: Channel?

    /// A connection that sends nothing for this long is closed: a silent peer holds no resources for long.
    static let idleTimeout: TimeAmount = .seconds(5)
    /// How long a page waits for the engine before it is answered 503 (as `sleepproxyctl` waits).
    static let replyTimeout: TimeAmount = .seconds(10)

    public struct StartError: Error, CustomStringConvertible {
        public var description: String
    }

    /// `address` is `HOST:PORT` with an IPv4 host (localhost by default: the figures are for this machine).
    public init(address: String, engine: EngineRunner, logger: Logger) throws {
        let parts = address.split(separator: ":")
        guard parts.count == 2, let port = UInt16(parts[1]), port > 0, inet_addr(String(parts[0])) != INADDR_NONE else {
            throw StartError(
                description: "--http-address must be IPv4:PORT such as 127.0.0.1:9580, not \"\(address)\"")
        }
        self.address = String(parts[0])
        self.port = port
        self.engine = engine
        self.logger = logger
        self.factory = PrometheusMetricsFactory(registry: self.registry)
    }

    /// Serves HTTP/1.1 with NIOHTTP1 on the event loops NIO already runs for the registration sockets.
    public func start(group: EventLoopGroup = MultiThreadedEventLoopGroup.singleton) throws {
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(IdleStateHandler(readTimeout: Self.idleTimeout))
                    try channel.pipeline.syncOperations.addHandler(
                        HTTPHandler(replyTimeout: Self.replyTimeout) { [self] route, uri, loop, respond in
                            self.serve(route, uri: uri, loop: loop, respond: respond)
                        })
                }
            }
        do {
            self.channel = try bootstrap.bind(host: self.address, port: Int(self.port)).wait()
        } catch {
            throw StartError(
                description:
                    "cannot serve HTTP on \(self.address):\(self.port) (\(error)); choose another with --http-address, or turn it off with --http-address none"
            )
        }
        self.logger.info(
            "http: status page on http://\(self.address):\(self.port)/, Prometheus metrics on /metrics, JSON under \(StatusRoute.apiPrefix)/"
        )
    }

    public func stop() {
        try? self.channel?.close().wait()
        self.channel = nil
    }

    /// Brings every metric up to date with the engine's counts and renders the registry.
    func scrape() -> [UInt8] {
        self.lock.lock()
        defer { self.lock.unlock() }
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
        self.count("sleepproxy_mdns_repeats_coalesced_total", [:], status.repeatedQuestions)
        self.count("sleepproxy_journal_syncs_total", [:], status.journalSyncs)
        self.count("sleepproxy_unicast_sends_deferred_total", [:], status.unicastSendsDeferred)
        self.count("sleepproxy_unicast_sends_failed_total", [:], status.unicastSendsFailed)
        self.count("sleepproxy_multicast_sockets_reopened_total", [:], status.multicastSocketsReopened)
        self.count("sleepproxy_queries_answered_total", [:], status.responder.answeredQueries)
        self.count("sleepproxy_mdns_packets_sent_total", [:], status.responder.packetsSent)
        // Every hand-back, by what showed the host awake (the responder's own count saw only Owner options).
        for signal in HandBackSignal.allCases {
            self.count("sleepproxy_hand_backs_total", ["signal": signal.rawValue], status.handBacks[signal] ?? 0)
        }
        self.count("sleepproxy_magic_packets_total", [:], status.takeover.magicPackets)
        self.countWindows(status.windows)
        self.count("sleepproxy_arp_replies_total", [:], status.takeover.arpReplies)
        self.count("sleepproxy_neighbour_advertisements_total", [:], status.takeover.neighbourAdvertisements)
        self.count("sleepproxy_ignored_connections_total", [:], status.takeover.ignoredConnections)
        // docs/waking.md: every rule that declines (a hold for a retransmission that never came declines with its
        // hold's rule), at zero until it first happens, so that a dashboard's rate() sees the series from the start.
        for rule in WakeRule.allCases where !rule.wakes && rule != .holdingForScan {
            self.count(
                "sleepproxy_wakes_declined_total", ["reason": rule.rawValue], status.wakeDecisions.declined[rule] ?? 0)
        }
        self.count("sleepproxy_scanners_found_total", [:], status.wakeDecisions.scannersFound)
        // docs/several-proxies.md: claims by another proxy, none of which wakes a host.
        self.count("sleepproxy_peer_claims_total", [:], status.takeover.peerClaims)
        self.count("sleepproxy_wake_holds_total", [:], status.wakeDecisions.held)
        for reason in WakeLogEntry.Trigger.Kind.allCases {
            self.count("sleepproxy_wakes_total", ["reason": reason.rawValue], status.wakesByReason[reason] ?? 0)
        }
        CoreMetrics.Gauge(label: "sleepproxy_hosts", dimensions: [], factory: self.factory).record(status.hostCount)
        for state in HostState.held {
            CoreMetrics.Gauge(
                label: "sleepproxy_hosts_by_state", dimensions: [("state", state.rawValue)], factory: self.factory
            ).record(status.hostsByState[state] ?? 0)
        }
        CoreMetrics.Gauge(label: "sleepproxy_records", dimensions: [], factory: self.factory).record(status.recordCount)
        if let ssdp = status.ssdp {
            // SSDP for sleeping UPnP/DLNA hosts (docs/ssdp.md); absent with --no-ssdp.
            self.count("sleepproxy_parse_errors_total", ["reason": "ssdp_malformed"], ssdp.malformed)
            self.count("sleepproxy_ssdp_searches_total", [:], ssdp.searches)
            self.count("sleepproxy_ssdp_sent_total", ["kind": "response"], ssdp.responsesSent)
            self.count("sleepproxy_ssdp_sent_total", ["kind": "alive"], ssdp.notifiesSent)
            self.count("sleepproxy_ssdp_sent_total", ["kind": "byebye"], ssdp.byebyesSent)
            self.count("sleepproxy_ssdp_sent_total", ["kind": "host_search"], ssdp.hostSearchesSent)
            self.count("sleepproxy_ssdp_over_limit_total", [:], ssdp.overLimit)
            CoreMetrics.Gauge(
                label: "sleepproxy_ssdp_entries", dimensions: [("held", "registered")], factory: self.factory
            )
            .record(status.ssdpEntries)
            CoreMetrics.Gauge(
                label: "sleepproxy_ssdp_entries", dimensions: [("held", "unregistered")], factory: self.factory
            )
            .record(status.ssdpUnclaimedEntries)
        }
        if let savings = status.savings {
            // What sleeping saved since the daemon started (docs/savings.md), per host by MAC: running totals that
            // only grow while it runs, as counters do.
            for host in savings.hosts {
                self.countFloat("sleepproxy_host_asleep_seconds_total", ["host": host.mac], host.asleepSeconds)
                self.countFloat("sleepproxy_energy_saved_wh_total", ["host": host.mac], host.savedWattHours)
            }
            // A host the ledger no longer keeps (neither held nor counted on any day kept) loses its series: the
            // registry keeps a series for good otherwise, one more for every host a box ever met.
            let listed = Set(savings.hosts.map(\.mac))
            for mac in self.savingsSeries.subtracting(listed) {
                for name in ["sleepproxy_host_asleep_seconds_total", "sleepproxy_energy_saved_wh_total"] {
                    CoreMetrics.FloatingPointCounter(label: name, dimensions: [("host", mac)], factory: self.factory)
                        .destroy()
                    self.lastFloat["\(name)host=\(mac)"] = nil
                }
            }
            self.savingsSeries = listed
            if let used = savings.proxyUsedWattHours {
                self.countFloat("sleepproxy_proxy_energy_used_wh_total", [:], used)
            }
        }
        if let mqtt = status.mqtt {
            // The Home Assistant link (docs/home-assistant.md); absent without `mqtt`.
            CoreMetrics.Gauge(label: "sleepproxy_mqtt_connected", dimensions: [], factory: self.factory)
                .record(mqtt.connected ? 1 : 0)
            CoreMetrics.Gauge(label: "sleepproxy_mqtt_retained", dimensions: [], factory: self.factory)
                .record(mqtt.retained)
            self.count("sleepproxy_mqtt_connects_total", [:], mqtt.connects)
            self.count("sleepproxy_mqtt_published_total", [:], mqtt.published)
            self.count("sleepproxy_mqtt_superseded_total", [:], mqtt.superseded)
            self.count("sleepproxy_mqtt_wake_presses_total", [:], mqtt.presses)
            self.count("sleepproxy_mqtt_wake_presses_dropped_total", [:], mqtt.pressesDropped)
            self.count("sleepproxy_mqtt_wake_presses_ignored_total", [:], mqtt.pressesIgnored)
        }
        return self.registry.emitToBuffer()
    }

    /// Advances a counter to `value` (the engine's counts only grow; after a reset the difference is dropped).
    private func countFloat(_ name: String, _ labels: [String: String], _ value: Double) {
        let dimensions = labels.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
        let key = name + dimensions.map { "\($0.0)=\($0.1)" }.joined(separator: ",")
        let delta = value - (self.lastFloat[key] ?? 0)
        self.lastFloat[key] = max(value, self.lastFloat[key] ?? 0)
        let counter = CoreMetrics.FloatingPointCounter(label: name, dimensions: dimensions, factory: self.factory)
        counter.increment(by: max(0, delta))
    }

    private func count(_ name: String, _ labels: [String: String], _ value: Int) {
        let dimensions = labels.sorted { $0.key < $1.key }.map { ($0.key, $0.value) }
        let key = name + dimensions.map { "\($0.0)=\($0.1)" }.joined(separator: ",")
        let delta = value - (self.last[key] ?? 0)
        self.last[key] = value
        let counter = CoreMetrics.Counter(label: name, dimensions: dimensions, factory: self.factory)
        if delta > 0 { counter.increment(by: delta) } else { counter.increment(by: 0) }
    }
}

extension HTTPEndpoint {
    /// What was answered for sleeping Windows PCs (docs/windows.md), counted like the mDNS and SSDP sides.
    fileprivate func countWindows(_ windows: WindowsStatistics) {
        self.count("sleepproxy_windows_answers_total", ["kind": "netbios_name"], windows.nameQueries)
        self.count("sleepproxy_windows_answers_total", ["kind": "netbios_node_status"], windows.nodeStatus)
        self.count("sleepproxy_windows_answers_total", ["kind": "llmnr"], windows.llmnrAnswers)
        self.count("sleepproxy_windows_answers_total", ["kind": "wsd_match"], windows.wsdMatches)
        self.count("sleepproxy_windows_metadata_refused_total", [:], windows.metadataRefused)
        self.count("sleepproxy_windows_name_conflicts_total", [:], windows.conflicts)
        self.count("sleepproxy_windows_matches_dropped_total", [:], windows.matchesDropped)
        self.count("sleepproxy_parse_errors_total", ["reason": "windows_malformed"], windows.malformed)
    }
}
