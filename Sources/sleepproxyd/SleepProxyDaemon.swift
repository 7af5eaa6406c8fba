import ArgumentParser
import Foundation
import Logging
import ServiceLifecycle
import SleepProxyControl
import SleepProxyCore
import SleepProxyIO

@main
struct SleepProxyDaemon: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sleepproxyd",
        abstract: "A Bonjour Sleep Proxy: keeps sleeping hosts discoverable on the LAN and wakes them on demand.",
        discussion: """
            Sleeping hosts (Macs, Apple TVs, Linux hosts running sleepproxy-client) register their mDNS records \
            with the proxy before they suspend. The proxy keeps them, with their leases, in its state directory.
            """,
        version: "0.1.0 (control protocol \(ControlProtocol.version))"
    )

    @Option(name: .long, help: "Interface to serve; repeat for several (default: every up, multicast-capable, non-loopback one).")
    var interface: [String] = []

    @Option(name: .long, help: "Directory for the registration journal.")
    var stateDirectory: String = "/var/lib/sleep-proxy"

    @Option(name: .long, help: "UDP port for registrations (advertised in the _sleep-proxy._udp SRV record).")
    var registrationPort: Int = RegistrationListener.defaultPort

    @Option(name: .long, help: "Shortest lease granted, in seconds (RFC 9664 §8 suggests 30).")
    var leaseMinimum: UInt32 = LeasePolicy.defaultMinimum

    @Option(name: .long, help: "Longest lease granted, in seconds (Apple's proxy: 86400).")
    var leaseMaximum: UInt32 = LeasePolicy.defaultMaximum

    @Option(name: .long, help: "How to answer a refused registration: silent (clients move on to the next proxy) or refused.")
    var refusalReply: String = "silent"

    @Option(name: .long, help: "When a lease ends while the host sleeps: wake (Apple's behaviour) or drop (goodbyes).")
    var expiryAction: String = "wake"

    @Flag(name: .long, help: "Accept registrations whose source is not one of the addresses they claim (for transfers from a peer proxy).")
    var allowTransfers = false

    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: String = "notice"

    func validate() throws {
        guard (1...65535).contains(self.registrationPort) else {
            throw ValidationError("--registration-port must be between 1 and 65535, not \(self.registrationPort)")
        }
        guard Logger.Level(rawValue: self.logLevel) != nil else {
            throw ValidationError("--log-level must be one of trace, debug, info, notice, warning, error, critical")
        }
        guard RegistrationConfiguration.ExpiryAction(rawValue: self.expiryAction) != nil else {
            throw ValidationError("--expiry-action must be wake or drop")
        }
        guard RegistrationConfiguration.RefusalReply(rawValue: self.refusalReply) != nil else {
            throw ValidationError("--refusal-reply must be silent or refused")
        }
        do {
            _ = try LeasePolicy(minimum: self.leaseMinimum, maximum: self.leaseMaximum)
        } catch {
            throw ValidationError("--lease-minimum (\(self.leaseMinimum)) must be at least 1 and no more than --lease-maximum (\(self.leaseMaximum))")
        }
    }

    func run() async throws {
        let level = Logger.Level(rawValue: self.logLevel)!
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = level
            return handler
        }
        let logger = Logger(label: "sleepproxyd")

        let registration = RegistrationConfiguration(
            leasePolicy: try LeasePolicy(minimum: self.leaseMinimum, maximum: self.leaseMaximum),
            requireSourceAmongClaimedAddresses: !self.allowTransfers,
            refusalReply: RegistrationConfiguration.RefusalReply(rawValue: self.refusalReply)!,
            expiryAction: RegistrationConfiguration.ExpiryAction(rawValue: self.expiryAction)!
        )
        let engine: RegistrationEngine
        do {
            engine = try RegistrationEngine(
                configuration: RegistrationEngine.Configuration(
                    registration: registration, interfaces: self.interface,
                    stateDirectory: URL(fileURLWithPath: self.stateDirectory, isDirectory: true)
                ),
                logger: logger
            )
        } catch {
            Self.fail("\(error)")
        }
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [.init(service: RegistrationService(engine: engine, port: self.registrationPort, logger: logger))],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger
            )
        )
        do {
            try await group.run()
        } catch {
            Self.fail("\(error)")
        }
    }

    /// Startup problems end in one sentence that names the cause and the fix, and a non-zero exit.
    static func fail(_ message: String) -> Never {
        FileHandle.standardError.write(Data("sleepproxyd: \(message)\n".utf8))
        Foundation.exit(1)
    }
}
