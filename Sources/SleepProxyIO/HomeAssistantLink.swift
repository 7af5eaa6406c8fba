import FoundationEssentials
import Logging
import NIOCore
import NIOPosix
import NIOSSL
import ServiceLifecycle
import SleepProxyControl
import SleepProxyCore
import SleepProxyHomeAssistant
import SleepProxyWire

/// The `mqtt` settings, checked.
public struct HomeAssistantConfiguration: Sendable {
    public var broker: MQTTBroker
    public var userName: String?
    public var password: [UInt8]?
    /// Certificates that sign the broker's, for `mqtts://` with a private authority (default: the system's).
    public var caFile: String?
    public var settings: HomeAssistantSettings

    public init(
        broker: MQTTBroker, userName: String?, password: [UInt8]?, caFile: String?, settings: HomeAssistantSettings
    ) {
        self.broker = broker
        self.userName = userName
        self.password = password
        self.caFile = caFile
        self.settings = settings
    }
}

/// Home Assistant through MQTT discovery (docs/home-assistant.md): keeps the broker's retained messages in step
/// with what the proxy knows, and turns a button press into the wake `sleepproxyctl wake` makes.
///
/// It asks the engine as `sleepproxyctl` does, so nothing of it runs on the engine thread but a notification that
/// something changed. Everything else runs on one event loop: the broker can be down, slow, refuse us or send
/// garbage, and answering and waking go on as before. What waits for a slow broker is one payload per topic
/// (`RetainedTopics`), the newest; those replaced before they went out are counted.
public final class HomeAssistantLink: Service, @unchecked Sendable {
    // @unchecked: every mutable property is touched only on `loop`.
    let configuration: HomeAssistantConfiguration
    let engine: EngineRunner
    let logger: Logger
    let loop: any EventLoop
    let discovery: HomeAssistantDiscovery
    private let sslContext: NIOSSLContext?
    private var client: MQTTClientStateMachine
    private var topics = RetainedTopics()
    private var channel: (any Channel)?
    private var stopping = false
    private var refreshing = false
    private var refreshAgain = false
    private var lastRefresh: NIODeadline?
    private var timers: [RepeatedTask] = []
    private var pendingRefresh: Scheduled<Void>?
    /// Presses acted on, at most a person's share (`PressBudget`).
    private var pressBudget = PressBudget()
    /// Counts reads of the proxy's state, so that a late answer to an abandoned one is ignored.
    private var generation = 0
    /// The failure last logged, so that a broker that stays down is one line, not one per attempt.
    private var lastFailure: String?

    /// How often everything is read again without a change notice: adopted hosts move between `awake` and
    /// `checking` without a history line, and the counts by state are taken at most once a second.
    static let refreshInterval: TimeAmount = .seconds(10)
    /// Changes closer together than this are one refresh (a burst of 100 registrations is one read).
    static let refreshSpacing: TimeAmount = .milliseconds(200)
    /// Messages written before the link yields the event loop to others.
    static let writesPerTurn = 64
    static let connectTimeout: TimeAmount = .seconds(5)
    /// How long a read of the proxy's state may wait for the engine before another is started: the engine
    /// answers in milliseconds, and a control request waits at most 10 s (`HTTPEndpoint.replyTimeout`).
    static let refreshTimeout: TimeAmount = .seconds(30)

    public init(
        configuration: HomeAssistantConfiguration, engine: EngineRunner, logger: Logger,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) throws {
        self.configuration = configuration
        self.engine = engine
        self.logger = logger
        self.loop = group.next()
        self.discovery = HomeAssistantDiscovery(settings: configuration.settings)
        let settings = configuration.settings
        let connect = MQTTConnect(
            clientID: "sleepproxy-\(settings.nodeID)", cleanSession: true, keepAlive: MQTTRules.keepAlive,
            will: .init(topic: settings.availabilityTopic, payload: Array("offline".utf8), qos: 1, retain: true),
            userName: configuration.userName, password: configuration.password)
        self.client = MQTTClientStateMachine(connect: connect, subscriptions: self.discovery.subscriptions)
        if configuration.broker.tls {
            var tls = TLSConfiguration.makeClientConfiguration()
            if let caFile = configuration.caFile { tls.trustRoots = .file(caFile) }
            do {
                self.sslContext = try NIOSSLContext(configuration: tls)
            } catch {
                throw EngineRunnerError(description: "mqtt-ca-file \(configuration.caFile ?? ""): \(error)")
            }
        } else {
            self.sslContext = nil
        }
    }

    public func run() async throws {
        self.engine.noteHomeAssistant(broker: self.configuration.broker.description)
        self.engine.observeChanges { [weak self] in
            guard let self else { return }
            self.loop.execute { self.changed() }
        }
        self.loop.execute { self.start() }
        try? await gracefulShutdown()
        try? await self.loop.flatSubmit { self.stop() }.get()
    }

    // MARK: - On the loop

    private func start() {
        self.timers.append(
            self.loop.scheduleRepeatedTask(initialDelay: .seconds(1), delay: .seconds(1)) { [self] _ in
                self.perform(self.client.tick(now: SystemClock.now()))
            })
        self.timers.append(
            self.loop.scheduleRepeatedTask(initialDelay: .zero, delay: Self.refreshInterval) { [self] _ in
                self.refresh()
            })
        self.connect()
    }

    private func connect() {
        guard !self.stopping, self.channel == nil else { return }
        let broker = self.configuration.broker
        let sslContext = self.sslContext
        ClientBootstrap(group: self.loop)
            .connectTimeout(Self.connectTimeout)
            .channelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    let handlers = channel.pipeline.syncOperations
                    if let sslContext {
                        // The host name is checked against the certificate; an address is checked against its
                        // IP entries, and is not sent as SNI (RFC 6066 §3 allows names only).
                        let isAddress = broker.host.contains(":") || broker.host.allSatisfy { $0.isNumber || $0 == "." }
                        try handlers.addHandler(
                            try NIOSSLClientHandler(context: sslContext, serverHostname: isAddress ? nil : broker.host))
                    }
                    try handlers.addHandler(ByteToMessageHandler(MQTTPacketDecoder()))
                    try handlers.addHandler(MessageToByteHandler(MQTTPacketEncoder()))
                    try handlers.addHandler(MQTTConnectionHandler(link: self))
                }
            }
            .connect(host: broker.host, port: broker.port)
            .whenFailure { [self] error in
                self.note("cannot reach the broker at \(broker): \(error)")
                self.retry()
            }
    }

    func opened(_ channel: any Channel) {
        self.channel = channel
        self.perform(self.client.opened(now: SystemClock.now()))
    }

    func received(_ packet: MQTTPacket) {
        self.perform(self.client.received(packet, now: SystemClock.now()))
    }

    func failed(_ error: any Error) {
        if let error = error as? WireError {
            self.perform(self.client.malformed(error))
        } else {
            self.note("connection to the broker at \(self.configuration.broker): \(Self.describe(error))")
        }
    }

    func closed(_ channel: any Channel) {
        guard self.channel === channel else { return }
        self.channel = nil
        self.engine.updateHomeAssistant { $0.connected = false }
        self.retry()
    }

    private func retry() {
        guard !self.stopping else { return }
        let wait = self.client.closed(now: SystemClock.now())
        self.loop.scheduleTask(in: .nanoseconds(wait.nanosecondsClamped)) { [self] in self.connect() }
    }

    private func perform(_ actions: [MQTTClientStateMachine.Action]) {
        guard let channel = self.channel else { return }
        for action in actions {
            switch action {
            case .send(let packet):
                channel.write(packet, promise: nil)
            case .close(let failure):
                self.note("\(failure)")
                channel.close(promise: nil)
                return
            case .connected:
                self.lastFailure = nil
                self.logger.notice("mqtt: connected to \(self.configuration.broker); Home Assistant sees this proxy")
                self.engine.updateHomeAssistant {
                    $0.connected = true
                    $0.connects += 1
                    $0.problem = nil
                }
                channel.write(
                    MQTTPacket.publish(
                        MQTTPublish(
                            topic: self.configuration.settings.availabilityTopic, payload: Array("online".utf8),
                            retain: true)), promise: nil)
                self.topics.reconnected()
            case .subscriptionRefused(let filter):
                self.logger.warning(
                    "mqtt: the broker refused our subscription to \(filter): check its ACL for this user (docs/home-assistant.md)"
                )
            case .deliver(let message):
                self.deliver(message)
            }
        }
        channel.flush()
        self.flush()
    }

    private func deliver(_ message: MQTTPublish) {
        let settings = self.configuration.settings
        if message.topic == settings.homeAssistantStatusTopic {
            if message.payload == Array(HomeAssistantRules.birth.utf8) {
                // Home Assistant started: it may have no retained copy, so everything goes out again.
                self.topics.reconnected()
                self.flush()
            }
        } else if let mac = self.discovery.wakeTarget(of: message) {
            self.press(mac)
        } else if self.discovery.buttonHost(of: message.topic) != nil {
            // A replayed (retained) press, another payload, or presses without `mqtt-allow-wake`: counted, so
            // that it shows a press was seen and not acted on.
            self.engine.updateHomeAssistant { $0.pressesIgnored += 1 }
        } else if message.retain, self.discovery.isOwnRetained(message.topic) {
            self.topics.found(message.topic, message.payload)
            self.flush()
        }
    }

    /// The wake button: the wake `sleepproxyctl wake` makes, so it shows in the host's history as an
    /// administrator's wake.
    private func press(_ mac: String) {
        let verdict = self.pressBudget.press(now: SystemClock.now())
        guard verdict == .act else {
            let dropped = self.pressBudget.dropped
            self.engine.updateHomeAssistant { $0.pressesDropped = dropped }
            if verdict == .dropFirst {
                self.logger.warning(
                    "mqtt: more than \(PressBudget.maximumPresses) wake presses within \(PressBudget.window); the rest are dropped until it has passed"
                )
            }
            return
        }
        self.engine.updateHomeAssistant { $0.presses += 1 }
        let logger = self.logger
        self.engine.control(ControlRequest(command: .wake, target: mac)) { response in
            if response.ok {
                logger.notice("mqtt: the wake button of \(mac) was pressed; waking it")
            } else {
                logger.warning("mqtt: the wake button of \(mac) was pressed: \(response.error ?? "refused")")
            }
        }
    }

    /// Writes what waits, as long as the connection takes it.
    func flush() {
        guard let channel = self.channel, self.client.isConnected else { return }
        var wrote = 0
        while channel.isWritable {
            let batch = self.topics.next(Self.writesPerTurn)
            guard !batch.isEmpty else { break }
            for (topic, payload) in batch {
                channel.write(
                    MQTTPacket.publish(MQTTPublish(topic: topic, payload: payload, retain: true)), promise: nil)
            }
            wrote += batch.count
            channel.flush()
        }
        if wrote > 0 {
            self.client.wrote(now: SystemClock.now())
            let (superseded, held) = (self.topics.superseded, self.topics.held)
            self.engine.updateHomeAssistant {
                $0.published += wrote
                $0.superseded = superseded
                $0.retained = held
            }
        }
    }

    private func changed() {
        self.refreshSoon()
        // The counts by state are taken at most once a second (`EngineRunner.publishStatus`): look again after.
        self.pendingRefresh?.cancel()
        self.pendingRefresh = self.loop.scheduleTask(in: .milliseconds(1100)) { [self] in self.refresh() }
    }

    private func refreshSoon() {
        let now = NIODeadline.now()
        if let last = self.lastRefresh, now - last < Self.refreshSpacing {
            self.loop.scheduleTask(deadline: last + Self.refreshSpacing) { [self] in self.refresh() }
        } else {
            self.refresh()
        }
    }

    /// Reads the proxy's state as `status`, `hosts` and `adopted` answer it, and wants it retained.
    private func refresh() {
        guard !self.stopping else { return }
        // An answer that never came (the engine refuses nothing silently, but a stopping one may drop a request)
        // must not stop the refreshes for good: after `refreshTimeout` a new read starts, and the late one's
        // answers are ignored by their generation.
        if self.refreshing, let last = self.lastRefresh, NIODeadline.now() - last < Self.refreshTimeout {
            self.refreshAgain = true
            return
        }
        self.refreshing = true
        self.generation &+= 1
        let generation = self.generation
        self.lastRefresh = .now()
        let requests = [
            ControlRequest(command: .status),
            ControlRequest(command: .hosts, limit: HomeAssistantRules.maximumHosts),
            ControlRequest(command: .adopted),
        ]
        let answers = NIOLoopBoundBox([Int: ControlResponse](), eventLoop: self.loop)
        for (index, request) in requests.enumerated() {
            self.engine.control(request) { [self] response in
                self.loop.execute {
                    answers.value[index] = response
                    guard answers.value.count == requests.count, generation == self.generation else { return }
                    self.refreshed(answers.value)
                }
            }
        }
    }

    private func refreshed(_ answers: [Int: ControlResponse]) {
        self.refreshing = false
        if let status = answers[0]?.status, answers[1]?.ok == true, answers[2]?.ok == true {
            let view = HomeAssistantView(
                status: status, hosts: answers[1]?.hosts ?? [], adopted: answers[2]?.adopted ?? [])
            self.topics.want(self.discovery.topics(for: view))
            self.flush()
        }
        if self.refreshAgain {
            self.refreshAgain = false
            self.refreshSoon()
        }
    }

    private func stop() -> EventLoopFuture<Void> {
        self.stopping = true
        for timer in self.timers { timer.cancel() }
        self.pendingRefresh?.cancel()
        guard let channel = self.channel else { return self.loop.makeSucceededFuture(()) }
        // A clean stop says `offline` itself: DISCONNECT makes the broker drop the will (§3.14.4).
        let closed: EventLoopFuture<Void>
        if self.client.isConnected {
            channel.write(
                MQTTPacket.publish(
                    MQTTPublish(
                        topic: self.configuration.settings.availabilityTopic, payload: Array("offline".utf8),
                        retain: true)), promise: nil)
            closed = channel.writeAndFlush(MQTTPacket.disconnect).flatMap { channel.close() }
        } else {
            closed = channel.close()
        }
        // Bounded: a broker that stopped reading must not hold the daemon's stop.
        let bounded = self.loop.makePromise(of: Void.self)
        let done = NIOLoopBoundBox(false, eventLoop: self.loop)
        let finish: @Sendable () -> Void = {
            guard !done.value else { return }
            done.value = true
            bounded.succeed(())
        }
        self.loop.scheduleTask(in: .seconds(2)) { finish() }
        closed.whenComplete { _ in finish() }
        return bounded.futureResult
    }

    /// A failure once, not once per retry.
    private func note(_ problem: String) {
        self.engine.updateHomeAssistant { $0.problem = problem }
        guard problem != self.lastFailure else { return }
        self.lastFailure = problem
        self.logger.warning("mqtt: \(problem); answering and waking go on, and the link retries")
    }
}
