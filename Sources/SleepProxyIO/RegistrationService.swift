import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import SleepProxyCore

/// The registration side as a ServiceLifecycle service: the engine thread plus the UDP listener. On graceful
/// shutdown it stops listening, finishes the batch in progress and leaves every registration in the journal, so
/// a restart or an upgrade neither wakes nor forgets a sleeping host.
public struct RegistrationService: Service {
    public let engine: EngineRunner
    /// Bound before the group runs (`RegistrationListener.bind`): a port in use is a start-up problem, said in
    /// one sentence, not a service failing later.
    public let listener: RegistrationListener
    public let logger: Logger

    public init(engine: EngineRunner, listener: RegistrationListener, logger: Logger) {
        self.engine = engine
        self.listener = listener
        self.logger = logger
    }

    public func run() async throws {
        try self.engine.start()
        self.logger.notice("listening for sleep proxy registrations on UDP port \(self.listener.port)")
        try? await gracefulShutdown()
        await self.listener.close()
        self.engine.stop()
        self.logger.notice(
            "registration service stopped; \(self.engine.currentStatus.hostCount) sleeping hosts kept for the next start"
        )
    }
}

/// The admin socket as a service. It is bound before the group runs (`ControlServer.start`), so that a daemon
/// that cannot serve it refuses to start with a sentence, and so that it is ready once the daemon says it
/// listens; the service holds it until graceful shutdown and then closes it, followers included.
public struct ControlService: Service {
    public let server: ControlServer

    public init(server: ControlServer) { self.server = server }

    public func run() async throws {
        try? await gracefulShutdown()
        self.server.stop()
    }
}

/// The Prometheus endpoint as a service, bound before the group runs like the admin socket.
public struct MetricsService: Service {
    public let endpoint: HTTPEndpoint

    public init(endpoint: HTTPEndpoint) { self.endpoint = endpoint }

    public func run() async throws {
        try? await gracefulShutdown()
        self.endpoint.stop()
    }
}
