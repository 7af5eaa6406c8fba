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

    @Option(name: .long, help: "Most sleeping hosts held at once (Apple: no limit beyond records; 400 = its \"400 machines\").")
    var maxHosts: Int = RegistrationConfiguration.defaultMaximumHosts

    @Option(name: .long, help: "Most proxied records held at once (Apple's MAX_PROXY_RECORDS: 10000).")
    var maxRecords: Int = RegistrationConfiguration.defaultMaximumRecords

    @Flag(name: .long, help: "Accept registrations whose source is not one of the addresses they claim (for transfers from a peer proxy).")
    var allowTransfers = false

    @Option(name: .long, help: "Name shown after the metrics in the advertised _sleep-proxy._udp instance (default: this machine's host name).")
    var proxyName: String?

    @Option(name: .long, help: "Advertised metrics II-PP-MM-TT: intent, portability, marginal and total power, 10-99 each, lower wins (default 20-40-10-65, a dedicated always-on box).")
    var metrics: String = "20-40-10-65"

    @Option(name: .long, help: "Host name label the advertisement points at (default: <host name>-sleep-proxy, so it never collides with an avahi-daemon on the same machine).")
    var hostLabel: String?

    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: String = "notice"

    @Option(name: .long, help: ArgumentHelp("Wake policy rule; repeat for several. tcp/445 wakes every host on TCP 445, -udp/137 never wakes on UDP 137, 02:00:00:00:00:05@tcp/22 (or -02:...@tcp/22) adds (removes) a port for one host. Registered _tcp/_udp services always count unless removed.", valueName: "rule"))
    var wakeRule: [String] = []

    @Flag(name: .long, help: "Append six zero bytes to magic packets of hosts that registered no SecureOn password, as Apple does (some NICs then ignore them).")
    var wakeZeroPassword = false

    @Flag(name: .long, help: "Also send every magic packet as a UDP broadcast to port 9.")
    var wakeUDP = false

    @Flag(name: .long, help: "Answer mDNS only: no address takeover, no wake (no CAP_NET_RAW needed).")
    var noTakeover = false

    @Option(name: .long, help: "The admin socket sleepproxyctl talks to (mode 0660).")
    var controlSocket: String = "/run/sleep-proxy/control.sock"

    @Option(name: .long, help: "Group that may use the admin socket besides root (default: root only).")
    var controlGroup: String?

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
        guard (1...100_000).contains(self.maxHosts), (1...1_000_000).contains(self.maxRecords) else {
            throw ValidationError("--max-hosts must be 1-100000 and --max-records 1-1000000")
        }
        _ = try self.advertisedName()
        _ = try self.wakePolicy()
        if let label = self.hostLabel, label.isEmpty || label.utf8.count > 63 || label.contains(".") {
            throw ValidationError("--host-label must be 1 to 63 bytes without dots, not \"\(label)\"")
        }
        do {
            _ = try LeasePolicy(minimum: self.leaseMinimum, maximum: self.leaseMaximum)
        } catch {
            throw ValidationError("--lease-minimum (\(self.leaseMinimum)) must be at least 1 and no more than --lease-maximum (\(self.leaseMaximum))")
        }
    }

    func wakePolicy() throws -> WakePolicy {
        var policy = WakePolicy()
        for rule in self.wakeRule {
            do {
                try policy.add(rule: rule)
            } catch {
                throw ValidationError("--wake-rule: \(error)")
            }
        }
        return policy
    }

    static var machineHostName: String {
        let name = ProcessInfo.processInfo.hostName.split(separator: ".").first.map(String.init) ?? "linux"
        return name.isEmpty ? "linux" : name
    }

    /// The `II-PP-MM-TT.F Name` label (sps-protocol §1.2) from --metrics and --proxy-name.
    func advertisedName() throws -> SleepProxyName {
        let parts = self.metrics.split(separator: "-", omittingEmptySubsequences: false).map { Int($0) }
        guard parts.count == 4, parts.allSatisfy({ $0 != nil }) else {
            throw ValidationError("--metrics must be four two-digit numbers like 20-40-10-65, not \"\(self.metrics)\"")
        }
        do {
            return try SleepProxyName(
                intent: parts[0]!, portability: parts[1]!, marginalPower: parts[2]!, totalPower: parts[3]!, features: 0,
                niceName: self.proxyName ?? Self.machineHostName)
        } catch {
            throw ValidationError("--metrics/--proxy-name: \(error) (each metric 10-99; the whole label at most 63 bytes)")
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
            maximumRecords: self.maxRecords,
            maximumHosts: self.maxHosts,
            requireSourceAmongClaimedAddresses: !self.allowTransfers,
            refusalReply: RegistrationConfiguration.RefusalReply(rawValue: self.refusalReply)!,
            expiryAction: RegistrationConfiguration.ExpiryAction(rawValue: self.expiryAction)!
        )
        let engine: RegistrationEngine
        do {
            engine = try RegistrationEngine(
                configuration: RegistrationEngine.Configuration(
                    registration: registration, interfaces: self.interface,
                    stateDirectory: URL(fileURLWithPath: self.stateDirectory, isDirectory: true),
                    responder: ResponderConfiguration(
                        instanceLabel: try self.advertisedName().description,
                        hostLabel: self.hostLabel ?? "\(Self.machineHostName)-sleep-proxy",
                        registrationPort: UInt16(self.registrationPort),
                        seed: UInt64.random(in: .min ... .max)),
                    takeover: self.noTakeover ? nil : TakeoverConfiguration(policy: try self.wakePolicy(), appendZeroPassword: self.wakeZeroPassword, udpMagicPacket: self.wakeUDP)
                ),
                logger: logger
            )
        } catch {
            Self.fail("\(error)")
        }
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [.init(service: RegistrationService(
                    engine: engine, port: self.registrationPort, logger: logger,
                    control: ControlServer(path: self.controlSocket, group: self.controlGroup, engine: engine, logger: logger)))],
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
