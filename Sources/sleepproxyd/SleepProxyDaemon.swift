import ArgumentParser
import FoundationEssentials
import Glibc
import Logging
import NIOConcurrencyHelpers
import ServiceLifecycle
import SleepProxyControl
import SleepProxyCore
import SleepProxyIO
import SleepProxySystem
import UnixSignals

@main
struct SleepProxyDaemon: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sleepproxyd",
        abstract: "A Bonjour Sleep Proxy: keeps sleeping hosts discoverable on the LAN and wakes them on demand.",
        discussion: """
            Sleeping hosts (Macs, Apple TVs, Linux hosts running sleepproxy-client) register their mDNS records \
            with the proxy before they suspend. The proxy keeps them, with their leases, in its state directory.

            Exit status: 0 stopped cleanly (SIGTERM, SIGINT), or --check-config found nothing wrong; 1 it could not \
            start (the sentence on stderr says why and what to do), or --check-config found a problem; 64 a usage \
            error.
            """,
        version: "\(SleepProxyVersion.current) (control protocol \(ControlProtocol.version))"
    )

    @Option(
        name: .long,
        help: "Interface to serve; repeat for several (default: every up, multicast-capable, non-loopback one).")
    var interface: [String] = []

    @Option(name: .long, help: "Directory for the registration journal.")
    var stateDirectory: String = "/var/lib/sleep-proxy"

    @Option(name: .long, help: "UDP port for registrations (advertised in the _sleep-proxy._udp SRV record).")
    var registrationPort: Int = RegistrationListener.defaultPort

    @Option(name: .long, help: "Shortest lease granted, in seconds (RFC 9664 §8 suggests 30).")
    var leaseMinimum: UInt32 = LeasePolicy.defaultMinimum

    @Option(name: .long, help: "Longest lease granted, in seconds (Apple's proxy: 86400).")
    var leaseMaximum: UInt32 = LeasePolicy.defaultMaximum

    @Option(
        name: .long,
        help: "How to answer a refused registration: silent (clients move on to the next proxy) or refused.")
    var refusalReply: RegistrationConfiguration.RefusalReply = .silent

    @Option(name: .long, help: "When a lease ends while the host sleeps: wake (Apple's behaviour) or drop (goodbyes).")
    var expiryAction: RegistrationConfiguration.ExpiryAction = .wake

    @Option(
        name: .long,
        help: "Most sleeping hosts held at once (Apple: no limit beyond records; 400 = its \"400 machines\").")
    var maxHosts: Int = RegistrationConfiguration.defaultMaximumHosts

    @Option(name: .long, help: "Most proxied records held at once (Apple's MAX_PROXY_RECORDS: 10000).")
    var maxRecords: Int = RegistrationConfiguration.defaultMaximumRecords

    @Flag(
        name: .long,
        help:
            "Accept registrations whose source is not one of the addresses they claim (for transfers from a peer proxy)."
    )
    var allowTransfers = false

    @Option(
        name: .long,
        help:
            "Name shown after the metrics in the advertised _sleep-proxy._udp instance (default: this machine's host name)."
    )
    var proxyName: String?

    @Option(
        name: .long,
        help:
            "Advertised metrics II-PP-MM-TT (intent, portability, marginal and total power, 10-99 each, lower wins), or a preset: dedicated (20-40-10-65, the default: wins over every Apple TV and HomePod) or fallback (80-40-60-65: chosen only when no Apple device offers itself)."
    )
    var metrics: String = "20-40-10-65"

    @Option(
        name: .long,
        help:
            "Host name label the advertisement points at (default: <host name>-sleep-proxy, so it never collides with an avahi-daemon on the same machine)."
    )
    var hostLabel: String?

    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: Logger.Level = .notice

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Wake policy rule; repeat for several. tcp/445 wakes every host on TCP 445, -udp/137 never wakes on UDP 137, 02:00:00:00:00:05@tcp/22 (or -02:...@tcp/22) adds (removes) a port for one host. Registered _tcp/_udp services always count unless removed.",
            valueName: "rule"))
    var wakeRule: [String] = []

    @Option(
        name: .long,
        help: ArgumentHelp(
            "What a host draws awake and, after the slash, asleep, in watts, for what its sleep saves (docs/savings.md): 02:00:00:00:00:05@45/2. Without the draw asleep, --host-power-default's. Repeat for several.",
            valueName: "MAC@AWAKE[/ASLEEP]"))
    var hostPower: [String] = []

    @Option(
        name: .long,
        help: ArgumentHelp(
            "The draw of hosts without --host-power, awake and asleep, in watts (default 50/4: the most ENERGY STAR 4.0 allowed a basic desktop idle and asleep).",
            valueName: "AWAKE[/ASLEEP]"))
    var hostPowerDefault: String = PowerDraw.typicalDesktop.description

    @Option(
        name: .long,
        help: ArgumentHelp(
            "What this box itself draws, in watts, so that the savings shown are net of it (a Raspberry Pi 4: about 3).",
            valueName: "watts"))
    var proxyPower: String?

    @Option(
        name: .long,
        help: ArgumentHelp(
            "A source that never wakes any host: an address, a subnet (192.0.2.0/24) or a MAC (a router's MAC stands for everything it routes). Repeat for several.",
            valueName: "source"))
    var wakeIgnoreSource: [String] = []

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Only these sources may wake: SOURCE for every host, or HOSTMAC@SOURCE for one host (its primary or wake MAC). Repeat for several. A source named here may wake even from another subnet.",
            valueName: "[mac@]source"))
    var wakeOnlyFrom: [String] = []

    @Flag(
        name: .long,
        help:
            "Let traffic routed in from other subnets (a VPN, a port forward) wake hosts; off by default, as the internet's scanners come that way too."
    )
    var wakeFromRouted = false

    @Option(
        name: .long,
        help:
            "Seconds during which a source that woke a host without resolving its name (a monitor polling a port) wakes it no more, retransmitted or not, unless it resolves it; 0 turns this off."
    )
    var wakeMonitorHoldoff: Int = Int(WakeRules.defaultMonitorHoldoff.components.seconds)

    @Flag(
        name: .long,
        help:
            "Append six zero bytes to magic packets of hosts that registered no SecureOn password, as Apple does (some NICs then ignore them)."
    )
    var wakeZeroPassword = false

    @Flag(name: .long, help: "Also send every magic packet as a UDP broadcast to port 9.")
    var wakeUDP = false

    @Flag(name: .long, help: "Answer mDNS only: no address takeover, no wake (no CAP_NET_RAW needed).")
    var noTakeover = false

    @Flag(
        name: .long,
        help:
            "Do not keep sleeping UPnP/DLNA servers discoverable: no SSDP answers or announcements on their behalf, and their description ports do not wake them."
    )
    var noSSDP = false

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Keep a host that cannot register (a Mac on macOS 15 or later, a Windows PC, a NAS) present while it sleeps, by its MAC: the proxy learns what it publishes while awake and answers for it once it is quiet. Repeat for several (at most \(AdoptionRules.maximumAdopted), with those adopted by sleepproxyctl adopt).",
            valueName: "mac"))
    var adopt: [String] = []

    @Option(
        name: .long,
        help: ArgumentHelp(
            "Show the proxy and its hosts in Home Assistant through this MQTT broker's discovery: mqtt://HOST[:PORT] or mqtts://HOST[:PORT] for TLS (default: off).",
            valueName: "url"))
    var mqtt: String?

    @Option(name: .long, help: "User name for the MQTT broker.")
    var mqttUser: String?

    @Option(
        name: .long,
        help:
            "File holding the MQTT password (its first line), readable by the daemon alone: a password is never taken on the command line."
    )
    var mqttPasswordFile: String?

    @Option(
        name: .long, help: "Certificates of the authority that signed an mqtts:// broker's (default: the system's).")
    var mqttCaFile: String?

    @Option(name: .long, help: "Home Assistant's MQTT discovery prefix.")
    var mqttDiscoveryPrefix: String = "homeassistant"

    @Flag(
        name: .long,
        help:
            "Publish a wake button for each host; pressing it wakes the host as sleepproxyctl wake does. Who may press it is the broker's ACL's to decide."
    )
    var mqttAllowWake = false

    @Option(name: .long, help: "The admin socket sleepproxyctl talks to (mode 0660).")
    var controlSocket: String = "/run/sleep-proxy/control.sock"

    @Option(
        name: .long,
        help:
            "Where the history's recent lines and the wake log live between settles to the state directory, sparing an SD card (default: the control socket's directory, memory under systemd)."
    )
    var runtimeDirectory: String?

    @Option(name: .long, help: "Group that may use the admin socket besides root (default: root only).")
    var controlGroup: String?

    @Option(
        name: [.customLong("http-address"), .customLong("prometheus-address")],
        help:
            "Where to serve the read-only status page (/), its JSON API (/api/v1/) and Prometheus metrics (/metrics): IPv4:PORT, or none. Keep it on loopback or a trusted network: the page shows every held host. --prometheus-address is the older name."
    )
    var prometheusAddress: String = "127.0.0.1:9580"

    @Option(
        name: .long,
        help:
            "Configuration file: one `setting = value` per line, settings named like these flags (default: \(SleepProxyDaemon.defaultConfigPath) when it exists). Flags win over the file; SIGHUP re-reads it."
    )
    var config: String?

    @Flag(
        name: .long,
        help:
            "Check the configuration file and flags (values, wake rules, named interfaces), say what is wrong or that all is well, and exit: run it before a reload."
    )
    var checkConfig = false

    static let defaultConfigPath = "/etc/sleep-proxy/sleepproxyd.conf"

    static func main() async {
        // First, on the main thread before any other exists: capabilities belong to threads, and each thread
        // starts with those of the thread that created it.
        MemoryTuning.limitArenas()
        do {
            try ProcessCapabilities.raisePermitted()
        } catch {
            Self.printError("sleepproxyd: capabilities: \(error); running with those in effect")
        }
        do {
            let arguments = try Self.effectiveArguments(Array(CommandLine.arguments.dropFirst()))
            var command = try Self.parseAsRoot(arguments)
            if let daemon = command as? SleepProxyDaemon {
                try await daemon.run()
            } else {
                try command.run()
            }
        } catch {
            Self.exit(withError: error)
        }
    }

    func run() async throws {
        if self.checkConfig {
            do {
                try self.checkConfiguration()
                return
            } catch {
                Self.fail(Self.message(for: error))
            }
        }
        let levelBox = LogLevelBox(self.logLevel)
        LoggingSystem.bootstrap { label in
            ReloadableLogHandler(base: StreamLogHandler.standardError(label: label), level: levelBox)
        }
        let logger = Logger(label: "sleepproxyd")

        let registration = RegistrationConfiguration(
            leasePolicy: try LeasePolicy(minimum: self.leaseMinimum, maximum: self.leaseMaximum),
            maximumRecords: self.maxRecords,
            maximumHosts: self.maxHosts,
            requireSourceAmongClaimedAddresses: !self.allowTransfers,
            refusalReply: self.refusalReply,
            expiryAction: self.expiryAction
        )
        let engine: EngineRunner
        do {
            engine = try EngineRunner(
                configuration: EngineRunner.Configuration(
                    registration: registration, interfaces: self.interface,
                    stateDirectory: URL(fileURLWithPath: self.stateDirectory, isDirectory: true),
                    responder: ResponderConfiguration(
                        instanceLabel: try self.advertisedName().description,
                        hostLabel: self.hostLabel ?? "\(Self.machineHostName)-sleep-proxy",
                        registrationPort: UInt16(self.registrationPort),
                        seed: UInt64.random(in: .min ... .max)),
                    takeover: try self.takeoverConfiguration(),
                    ssdp: !self.noSSDP, adopted: try self.adoptedMACs(), power: try self.powerFigures(),
                    runtimeDirectory: URL(fileURLWithPath: self.runtimeDirectoryPath, isDirectory: true)
                ),
                logger: logger
            )
        } catch {
            Self.fail("\(error)")
        }
        let metrics: HTTPEndpoint?
        do {
            metrics =
                self.prometheusAddress == "none"
                ? nil : try HTTPEndpoint(address: self.prometheusAddress, engine: engine, logger: logger)
        } catch {
            Self.fail("\(error)")
        }
        // Every socket is bound before the services run, in this order, so that a start-up problem ends in its one
        // sentence before anything says the daemon is up.
        let listener: RegistrationListener
        do {
            listener = try await RegistrationListener.bind(port: self.registrationPort, engine: engine, logger: logger)
        } catch {
            Self.fail("\(error)")
        }
        let control = ControlServer(path: self.controlSocket, group: self.controlGroup, engine: engine, logger: logger)
        do {
            try control.start()
            try metrics?.start()
        } catch {
            control.stop()
            Self.fail("\(error)")
        }
        // Started in this order, stopped in the reverse one: the reloader and the admin side go first, the
        // registration side (and the journal) last.
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [
            .init(service: RegistrationService(engine: engine, listener: listener, logger: logger)),
            .init(service: ControlService(server: control)),
        ]
        if let metrics { services.append(.init(service: MetricsService(endpoint: metrics))) }
        do {
            if let homeAssistant = try self.homeAssistantConfiguration() {
                services.append(
                    .init(service: try HomeAssistantLink(configuration: homeAssistant, engine: engine, logger: logger)))
            }
        } catch {
            control.stop()
            Self.fail(Self.message(for: error))
        }
        // SIGHUP is trapped here, before anything says the daemon is up: a reload sent at once must not find the
        // default action (which ends the process) still in place.
        let hangups = await UnixSignalsSequence(trapping: .sighup)
        services.append(
            .init(
                service: ReloadService(
                    hangups: hangups, config: self.config, original: self, engine: engine, levelBox: levelBox,
                    logger: logger)))
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        do {
            try await group.run()
        } catch {
            Self.fail("\(error)")
        }
    }

    /// Startup problems end in one sentence that names the cause and the fix, and a non-zero exit.
    static func fail(_ message: String) -> Never {
        Self.printError("sleepproxyd: \(message)")
        Glibc.exit(1)
    }

    static func printError(_ line: String) {
        var bytes = Array((line + "\n").utf8)
        _ = bytes.withUnsafeMutableBytes { Glibc.write(2, $0.baseAddress, $0.count) }
    }
}

extension RegistrationConfiguration.ExpiryAction: ExpressibleByArgument {}
extension RegistrationConfiguration.RefusalReply: ExpressibleByArgument {}
extension Logger.Level: @retroactive ExpressibleByArgument {}
