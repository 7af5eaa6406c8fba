import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import SleepProxyCore

/// The registration side as a ServiceLifecycle service: the engine thread plus the UDP listener. On graceful
/// shutdown it stops listening, finishes the batch in progress and leaves every registration in the journal, so
/// a restart or an upgrade neither wakes nor forgets a sleeping host.
public struct RegistrationService: Service {
    public let engine: RegistrationEngine
    public let port: Int
    public let logger: Logger
    public let control: ControlServer?
    public let metrics: MetricsEndpoint?

    public init(
        engine: RegistrationEngine, port: Int, logger: Logger, control: ControlServer? = nil,
        metrics: MetricsEndpoint? = nil
    ) {
        self.engine = engine
        self.port = port
        self.logger = logger
        self.control = control
        self.metrics = metrics
    }

    public func run() async throws {
        self.engine.start()
        let listener: RegistrationListener
        do {
            listener = try await RegistrationListener.bind(port: self.port, engine: self.engine, logger: self.logger)
        } catch {
            self.engine.stop()
            throw error
        }
        do {
            try self.control?.start()
            try self.metrics?.start()
        } catch {
            self.control?.stop()
            await listener.close()
            self.engine.stop()
            throw error
        }
        self.logger.notice("listening for sleep proxy registrations on UDP port \(listener.port)")
        try? await gracefulShutdown()
        self.control?.stop()
        self.metrics?.stop()
        await listener.close()
        self.engine.stop()
        self.logger.notice(
            "registration service stopped; \(self.engine.currentStatus.hostCount) sleeping hosts kept for the next start"
        )
    }
}
