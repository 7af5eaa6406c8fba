import ArgumentParser
import FoundationEssentials
import SleepProxyControl
import SleepProxyHomeAssistant
import SleepProxyIO
import SleepProxyWire

/// The `mqtt` settings (docs/home-assistant.md), checked without touching the network.
extension SleepProxyDaemon {
    /// The longest password MQTT carries (§3.1.3.5: two length bytes).
    static let maximumMQTTPasswordBytes = 65_535

    /// What can be checked of one setting alone (each line of the configuration file is checked so, to name its
    /// line); what ties them together is checked by `homeAssistantConfiguration`.
    func validateHomeAssistant() throws {
        guard let url = self.mqtt else { return }
        let broker: MQTTBroker
        do {
            broker = try MQTTBroker(url: url)
        } catch {
            throw ValidationError("--\(error)")
        }
        if self.mqttPasswordFile != nil, self.mqttUser == nil {
            throw ValidationError(
                "--mqtt-password-file needs --mqtt-user: MQTT 3.1.1 sends a password only with a user name")
        }
        if self.mqttCaFile != nil, !broker.tls {
            throw ValidationError("--mqtt-ca-file is for an mqtts:// broker; \(url) is not TLS")
        }
        if self.mqttAllowWake, self.noTakeover {
            throw ValidationError("--mqtt-allow-wake needs the packet side to wake hosts; drop --no-takeover")
        }
        let prefix = self.mqttDiscoveryPrefix
        guard !prefix.isEmpty, !prefix.hasPrefix("/"), !prefix.hasSuffix("/"),
            !prefix.contains("#"), !prefix.contains("+"), !prefix.utf8.contains(0), prefix.utf8.count <= 200
        else {
            throw ValidationError(
                "--mqtt-discovery-prefix \"\(prefix)\" is not a topic prefix (no wildcards, no leading or trailing /)")
        }
        if let user = self.mqttUser, user.isEmpty || user.utf8.count > 65_535 || user.utf8.contains(0) {
            throw ValidationError("--mqtt-user must be 1 to 65,535 bytes")
        }
    }

    /// The link's configuration, with the password read from its file; nil when `mqtt` is not set.
    func homeAssistantConfiguration() throws -> HomeAssistantConfiguration? {
        try self.validateHomeAssistant()
        guard let url = self.mqtt else {
            let set = [
                ("mqtt-user", self.mqttUser != nil), ("mqtt-password-file", self.mqttPasswordFile != nil),
                ("mqtt-ca-file", self.mqttCaFile != nil), ("mqtt-allow-wake", self.mqttAllowWake),
            ].filter(\.1).map(\.0)
            if let first = set.first { throw ValidationError("--\(first) needs --mqtt (the broker's URL)") }
            return nil
        }
        let broker = try MQTTBroker(url: url)
        var password: [UInt8]? = nil
        if let path = self.mqttPasswordFile {
            let data: Data
            do {
                data = try Data(contentsOf: URL(fileURLWithPath: path))
            } catch {
                throw ValidationError("--mqtt-password-file: cannot read \(path): \(fileErrorReason(error))")
            }
            // The first line, without its line end: `echo secret > file` writes one.
            let line = Array(data.prefix { $0 != 0x0A && $0 != 0x0D })
            guard !line.isEmpty, line.count <= Self.maximumMQTTPasswordBytes else {
                throw ValidationError(
                    "--mqtt-password-file: \(path) must hold the password on its first line (1 to \(Self.maximumMQTTPasswordBytes) bytes)"
                )
            }
            password = line
        }
        if let caFile = self.mqttCaFile, !FileManager.default.isReadableFile(atPath: caFile) {
            throw ValidationError("--mqtt-ca-file: cannot read \(caFile)")
        }
        let host = Self.machineHostName
        return HomeAssistantConfiguration(
            broker: broker, userName: self.mqttUser, password: password, caFile: self.mqttCaFile,
            settings: HomeAssistantSettings(
                discoveryPrefix: self.mqttDiscoveryPrefix, node: host, allowWake: self.mqttAllowWake,
                deviceName: "Sleep proxy \(host)", version: SleepProxyVersion.current))
    }
}
