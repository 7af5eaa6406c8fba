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
import SleepProxyWire
import UnixSignals

/// The configuration file and what the settings turn into: wake rules, source rules, the takeover's
/// configuration, the advertised name, and `--check-config`.
extension SleepProxyDaemon {
    /// Every setting the file may hold, named like its flag.
    static let settings: [String: ConfigFile.Kind] = [
        "interface": .repeated, "state-directory": .single, "registration-port": .single, "lease-minimum": .single,
        "lease-maximum": .single,
        "refusal-reply": .single, "expiry-action": .single, "max-hosts": .single, "max-records": .single,
        "allow-transfers": .flag,
        "proxy-name": .single, "metrics": .single, "host-label": .single, "log-level": .single, "wake-rule": .repeated,
        "wake-zero-password": .flag, "wake-ignore-source": .repeated, "wake-only-from": .repeated,
        "wake-from-routed": .flag, "wake-monitor-holdoff": .single, "wake-udp": .flag, "no-takeover": .flag,
        "no-ssdp": .flag, "adopt": .repeated, "mqtt": .single, "mqtt-user": .single, "mqtt-password-file": .single,
        "mqtt-ca-file": .single, "mqtt-discovery-prefix": .single, "mqtt-allow-wake": .flag,
        "control-socket": .single, "runtime-directory": .single,
        "control-group": .single, "http-address": .single, "prometheus-address": .single,
        "host-power": .repeated, "host-power-default": .single, "proxy-power": .single,
    ]

    /// Reads the configuration file into arguments, checking each line on its own so that an error names its line.
    static func configArguments(path: String) throws -> [String] {
        let text: String
        do {
            text = try String(contentsOfFile: path, encoding: .utf8)
        } catch {
            throw ValidationError("cannot read the configuration file \(path): \(fileErrorReason(error))")
        }
        let entries: [ConfigFile.Entry]
        do {
            entries = try ConfigFile.parse(text, settings: Self.settings)
        } catch {
            throw ValidationError("\(path) \(error)")
        }
        var arguments: [String] = []
        for entry in entries {
            let these = ConfigFile.arguments(for: entry, kind: Self.settings[entry.key]!)
            do {
                _ = try Self.parseAsRoot(these)
            } catch {
                let message = Self.message(for: error).replacing("Error: ", with: "")
                throw ValidationError("\(path) line \(entry.line): \(message)")
            }
            arguments += these
        }
        return arguments
    }

    /// The arguments to run with: the configuration file's (if any) first, then the command line's.
    static func effectiveArguments(_ commandLine: [String]) throws -> [String] {
        var path: String? = nil
        var explicit = false
        if let index = commandLine.firstIndex(of: "--config"), index + 1 < commandLine.count {
            path = commandLine[index + 1]
            explicit = true
        } else if let inline = commandLine.first(where: { $0.hasPrefix("--config=") }) {
            path = String(inline.dropFirst("--config=".count))
            explicit = true
        } else if FileManager.default.fileExists(atPath: Self.defaultConfigPath) {
            path = Self.defaultConfigPath
        }
        guard let path else { return commandLine }
        if explicit, !FileManager.default.fileExists(atPath: path) {
            throw ValidationError("the configuration file \(path) does not exist")
        }
        return try Self.configArguments(path: path) + commandLine + (explicit ? [] : ["--config", path])
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

    /// The hosts adopted by `--adopt` (`adopt = MAC` in the file), each a host's MAC, at most the bound.
    func adoptedMACs() throws -> Set<MACAddress> {
        var macs: Set<MACAddress> = []
        for text in self.adopt {
            guard let mac = MACAddress(text), mac != .zero, mac != .broadcast, mac.bytes[0] & 1 == 0 else {
                throw ValidationError(
                    "--adopt: \"\(text)\" is not a host's MAC address (six hex pairs such as 02:00:00:00:00:05)")
            }
            macs.insert(mac)
        }
        guard macs.count <= AdoptionRules.maximumAdopted else {
            throw ValidationError(
                "--adopt: \(macs.count) hosts; at most \(AdoptionRules.maximumAdopted) can be adopted")
        }
        return macs
    }

    /// What hosts and this box draw (`host-power`, `host-power-default`, `proxy-power`; docs/savings.md), checked.
    func powerFigures() throws -> PowerFigures {
        let defaultDraw: PowerDraw
        do {
            defaultDraw = try PowerDraw(
                parsing: self.hostPowerDefault, asleepDefault: PowerDraw.typicalDesktop.asleepWatts)
        } catch {
            throw ValidationError("--host-power-default: \(error)")
        }
        var hosts: [MACAddress: PowerDraw] = [:]
        for text in self.hostPower {
            do {
                let (mac, draw) = try PowerDraw.parseHost(text, asleepDefault: defaultDraw.asleepWatts)
                guard hosts[mac] == nil else {
                    throw ValidationError("--host-power: \(mac) is given twice")
                }
                hosts[mac] = draw
            } catch let error as PowerDraw.ParseError {
                throw ValidationError("--host-power: \(error)")
            }
        }
        var proxyWatts: Double? = nil
        if let text = self.proxyPower {
            do {
                proxyWatts = try PowerDraw.parseWatts(text)
            } catch {
                throw ValidationError("--proxy-power: \(error)")
            }
        }
        return PowerFigures(hosts: hosts, defaultDraw: defaultDraw, proxyWatts: proxyWatts)
    }

    func wakeSources() throws -> WakeSources {
        var sources = WakeSources(allowRouted: self.wakeFromRouted)
        do {
            for source in self.wakeIgnoreSource { try sources.addIgnored(source) }
            for source in self.wakeOnlyFrom { try sources.addOnlyFrom(source) }
        } catch {
            throw ValidationError("\(error)")
        }
        return sources
    }

    /// What the packet side runs with (at start and after SIGHUP).
    func takeoverConfiguration() throws -> TakeoverConfiguration? {
        guard !self.noTakeover else { return nil }
        return TakeoverConfiguration(
            policy: try self.wakePolicy(), sources: try self.wakeSources(),
            monitorHoldoff: .seconds(self.wakeMonitorHoldoff), appendZeroPassword: self.wakeZeroPassword,
            udpMagicPacket: self.wakeUDP)
    }

    /// The settings a reload cannot change in place.
    var restartSettings: [String] {
        [
            self.interface.joined(separator: ","), self.stateDirectory, "\(self.registrationPort)",
            "\(self.leaseMinimum)", "\(self.leaseMaximum)",
            "\(self.maxHosts)", "\(self.maxRecords)", "\(self.allowTransfers)", self.proxyName ?? "", self.metrics,
            self.hostLabel ?? "",
            self.controlSocket, self.runtimeDirectoryPath, self.controlGroup ?? "", self.prometheusAddress,
            self.mqtt ?? "", self.mqttUser ?? "", self.mqttPasswordFile ?? "", self.mqttCaFile ?? "",
            self.mqttDiscoveryPrefix, "\(self.mqttAllowWake)",
        ]
    }

    static var machineHostName: String {
        let name = ProcessInfo.processInfo.hostName.split(separator: ".").first.map(String.init) ?? "linux"
        return name.isEmpty ? "linux" : name
    }

    /// The `II-PP-MM-TT.F Name` label (docs/protocol.md §1.2) from --metrics and --proxy-name.
    /// Named metrics (docs/several-proxies.md). Every Apple TV and HomePod advertises
    /// 70-35-60-63 and an AirPort base station 30-35-10: a dedicated box at intent 20 wins every Apple client's
    /// choice; a fallback at intent 80 ("a computer that never sleeps") loses to every Apple device, so Apple
    /// clients use it only when none is there.
    static let metricPresets = ["dedicated": "20-40-10-65", "fallback": "80-40-60-65"]

    func advertisedName() throws -> SleepProxyName {
        let metrics = Self.metricPresets[self.metrics.lowercased()] ?? self.metrics
        let parts = metrics.split(separator: "-", omittingEmptySubsequences: false).map { Int($0) }
        guard parts.count == 4, parts.allSatisfy({ $0 != nil }) else {
            throw ValidationError(
                "--metrics must be four two-digit numbers like 20-40-10-65, or dedicated or fallback, not \"\(self.metrics)\""
            )
        }
        do {
            return try SleepProxyName(
                intent: parts[0]!, portability: parts[1]!, marginalPower: parts[2]!, totalPower: parts[3]!, features: 0,
                niceName: self.proxyName ?? Self.machineHostName)
        } catch {
            throw ValidationError(
                "--metrics/--proxy-name: \(error) (each metric 10-99; the whole label at most 63 bytes)")
        }
    }

    /// `--check-config`: everything `validate()` checks (it has run by now) plus what only this machine can tell,
    /// whether each named interface exists. Prints one line; the exit status is the verdict.
    func checkConfiguration() throws {
        let source = self.config.map { "\($0)" } ?? "the command line (no configuration file)"
        if !self.interface.isEmpty {
            let inventory = try InterfaceInventory.read()
            for name in self.interface where inventory.interface(named: name) == nil {
                throw ValidationError("--interface \(name): no such interface on this machine (see `ip link`)")
            }
        }
        _ = try self.homeAssistantConfiguration()
        print("sleepproxyd: \(source) is valid")
    }

    /// The runtime directory: given, or the control socket's (`/run/sleep-proxy` by default and under systemd).
    var runtimeDirectoryPath: String {
        self.runtimeDirectory
            ?? URL(fileURLWithPath: self.controlSocket).deletingLastPathComponent().path
    }

    func validate() throws {
        guard (1...65535).contains(self.registrationPort) else {
            throw ValidationError("--registration-port must be between 1 and 65535, not \(self.registrationPort)")
        }
        guard (1...100_000).contains(self.maxHosts), (1...1_000_000).contains(self.maxRecords) else {
            throw ValidationError("--max-hosts must be 1-100000 and --max-records 1-1000000")
        }
        _ = try self.advertisedName()
        _ = try self.wakePolicy()
        _ = try self.wakeSources()
        _ = try self.adoptedMACs()
        _ = try self.powerFigures()
        try self.validateHomeAssistant()
        if self.noTakeover, !self.adopt.isEmpty {
            throw ValidationError(
                "--adopt needs the packet side: adopted hosts are learned from their own frames; drop --no-takeover")
        }
        guard (0...WakeRules.maximumMonitorHoldoffSeconds).contains(self.wakeMonitorHoldoff) else {
            throw ValidationError(
                "--wake-monitor-holdoff must be 0 to \(WakeRules.maximumMonitorHoldoffSeconds) seconds, not \(self.wakeMonitorHoldoff)"
            )
        }
        if self.prometheusAddress != "none",
            self.prometheusAddress.split(separator: ":").count != 2
                || UInt16(self.prometheusAddress.split(separator: ":").last ?? "") == nil
        {
            throw ValidationError("--http-address must be IPv4:PORT such as 127.0.0.1:9580, or none")
        }
        if let label = self.hostLabel, label.isEmpty || label.utf8.count > 63 || label.contains(".") {
            throw ValidationError("--host-label must be 1 to 63 bytes without dots, not \"\(label)\"")
        }
        do {
            _ = try LeasePolicy(minimum: self.leaseMinimum, maximum: self.leaseMaximum)
        } catch {
            throw ValidationError(
                "--lease-minimum (\(self.leaseMinimum)) must be at least 1 and no more than --lease-maximum (\(self.leaseMaximum))"
            )
        }
    }
}
