import Foundation
import SleepProxyControl
import SleepProxyTestSupport
import SleepProxyWire
import Testing

/// Home Assistant through MQTT discovery against Debian's Mosquitto (docs/home-assistant.md): what the broker
/// retains and what a subscriber receives, read with `mosquitto_sub`, never our log.
@Suite("Home Assistant through Mosquitto", .lab(.namespaces, .mosquitto, serialized: true))
final class HomeAssistantLabTests: ThreeHostSuite {
    let setup: ThreeHostLab
    /// The Home Assistant box: the broker runs there.
    var box: LabHost { self.setup.third }
    let broker: Mosquitto
    static let sleeperID = "025350000002"

    /// The proxy may publish its topics and read presses and Home Assistant's birth; Home Assistant may read
    /// everything and press; a viewer may only read (the README's ACL).
    static let acl = [
        "user sleepproxy", "topic readwrite homeassistant/#", "topic readwrite sleepproxy/#",
        "user homeassistant", "topic readwrite #",
        "user viewer", "topic read #",
    ]

    init() throws {
        self.setup = try ThreeHostLab(thirdName: "hassbox")
        self.broker = try Mosquitto(
            in: self.setup.third, address: "192.0.2.20",
            users: ["sleepproxy": "proxy-secret", "homeassistant": "ha-secret", "viewer": "viewer-secret"],
            acl: Self.acl)
        try self.broker.start(readyAs: "homeassistant")
    }

    deinit { self.broker.stop() }

    func startDaemon(password: String = "proxy-secret", allowWake: Bool = true) throws -> ManagedProcess {
        let file = self.lab.directory.appendingPathComponent("mqtt-password")
        try (password + "\n").write(to: file, atomically: true, encoding: .utf8)
        return try Daemon.start(
            in: self.proxy, stateDirectory: self.state,
            extra: ["--mqtt", "mqtt://192.0.2.20", "--mqtt-user", "sleepproxy", "--mqtt-password-file", file.path]
                + (allowWake ? ["--mqtt-allow-wake"] : []))
    }

    func register() throws {
        let message = SampleRegistration.message(
            id: 0x4A00, mac: ThreeHostLab.sleeperMAC, host: "sleeper.local.",
            addresses: [IPAddress("192.0.2.2")!, IPAddress("2001:db8::2")!], services: [("Web._http._tcp", 8080)])
        let replies = try UDPClient.exchange(
            in: self.sleeper.host, to: "192.0.2.1", port: 5599, from: "192.0.2.2",
            payloads: [message.encoded(options: .appleUpdate)])
        #expect(replies.first??.prefix(2) == [0x4A, 0x00], "registration not accepted")
    }

    /// The proxy's node in the topics, from its retained availability (bounded wait).
    func node() -> String? {
        var node: String? = nil
        waitUntil(timeout: 15, interval: 0.3) {
            node = (try? self.broker.retained("sleepproxy/+/availability", user: "viewer"))?.keys.first?
                .split(separator: "/").dropFirst().first.map(String.init)
            return node != nil
        }
        return node
    }

    /// The retained host state, decoded, once `condition` holds for it (bounded wait).
    func hostState(_ node: String, timeout: Double = 15, until condition: ([String: Any]) -> Bool) -> [String: Any]? {
        var state: [String: Any]? = nil
        waitUntil(timeout: timeout, interval: 0.3) {
            guard
                let text = try? self.broker.retained("sleepproxy/\(node)/host/\(Self.sleeperID)/state", user: "viewer")
                    .values.first,
                let json = try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any]
            else { return false }
            state = json
            return condition(json)
        }
        return state
    }

    func configs(_ node: String) throws -> [String: [String: Any]] {
        try self.broker.retained("homeassistant/+/sleepproxy_\(node)/+/config", user: "viewer").compactMapValues {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
    }

    /// A host registered, put to sleep, woken with the button and forgotten, as the broker shows it: the retained
    /// discovery with Home Assistant's device classes, each state change on the host's state topic within a
    /// second of the proxy's own history, the press waking it as an administrator's wake, and the removal.
    @Test func aHostsDayReachesTheBrokerAndTheButtonWakesIt() throws {
        let daemon = try self.startDaemon()
        defer { daemon.stop() }
        let node = try #require(self.node(), "no availability retained: \(daemon.output)")
        let watcher = try self.broker.watch("sleepproxy/\(node)/host/#", user: "homeassistant", logName: "watch")
        defer { watcher.stop() }
        try self.register()
        try self.sleeper.sleep()
        let asleep = self.hostState(node) { $0["asleep"] as? String == "ON" }
        #expect(asleep?["state"] as? String == "asleep", "\(String(describing: asleep)); \(daemon.output)")

        let configs = try self.configs(node)
        let prefix = "homeassistant/%@/sleepproxy_\(node)/\(Self.sleeperID)_%@/config"
        let state = configs[String(format: prefix, "sensor", "state")]
        let lastWake = configs[String(format: prefix, "sensor", "last_wake")]
        let binary = configs[String(format: prefix, "binary_sensor", "asleep")]
        let button = configs[String(format: prefix, "button", "wake")]
        #expect(state != nil && binary != nil && button != nil, "configs: \(configs.keys.sorted())")
        #expect(lastWake?["device_class"] as? String == "timestamp")
        let device = state?["device"] as? [String: Any]
        #expect(device?["via_device"] as? String == "sleepproxy_\(node)", "linked to the proxy's device")
        #expect(device?["name"] as? String == "sleeper")
        #expect(
            (state?["availability"] as? [[String: Any]])?.first?["topic"] as? String
                == "sleepproxy/\(node)/availability")
        #expect(configs.keys.contains("homeassistant/sensor/sleepproxy_\(node)/proxy_hosts_asleep/config"))

        // The button, pressed as Home Assistant presses it: magic packets reach the sleeper.
        let pressed = try self.broker.publish(
            "sleepproxy/\(node)/host/\(Self.sleeperID)/wake", "PRESS", user: "homeassistant")
        #expect(pressed.succeeded, "\(pressed)")
        #expect(!self.sleeper.waitForMagicPackets(1, timeout: 10).isEmpty, "the press did not wake: \(daemon.output)")
        let waking = self.hostState(node) { ($0["last_wake_details"] as? [String: Any])?["reason"] != nil }
        #expect((waking?["last_wake_details"] as? [String: Any])?["reason"] as? String == "administrator")
        // A flood of presses: a person's share is acted on (20 a minute, this first press among them), the rest
        // dropped and counted.
        let flood = try self.broker.flood(
            "sleepproxy/\(node)/host/\(Self.sleeperID)/wake", "PRESS", count: 24, user: "homeassistant")
        #expect(flood.succeeded, "\(flood)")
        var link: DaemonStatus.MQTTLinkStatus? = nil
        waitUntil(timeout: 10, interval: 0.3) {
            link = Daemon.status(proxy: self.proxy, stateDirectory: self.state)?.mqtt
            return (link?.presses ?? 0) + (link?.pressesDropped ?? 0) == 25
        }
        #expect(link?.presses == 20 && link?.pressesDropped == 5, "\(String(describing: link))")
        try self.sleeper.wake()
        let back = self.hostState(node) { $0["asleep"] as? String == "OFF" }
        #expect(back?["state"] as? String != "asleep", "\(String(describing: back))")

        // Each change reached the broker within a second of the proxy's own history line for it.
        let history = try self.historyTimes()
        let seen = MQTTSeen.parse(watcher.output).filter { $0.topic.hasSuffix("/state") }
        for (time, word) in history {
            let arrival = seen.first { $0.time >= time.addingTimeInterval(-0.01) && $0.payload.contains("\"\(word)\"") }
            let delay = arrival.map { $0.time.timeIntervalSince(time) }
            print(
                "home assistant: \(word) reached the broker \(delay.map { String(format: "%.3f s", $0) } ?? "never") after the history"
            )
            #expect(delay != nil, "\(word) never reached the broker")
        }

        // Forgotten: every retained configuration and state of the host is cleared.
        let socket = self.state.appendingPathComponent("control.sock").path
        try self.proxy.run([Daemon.sibling("sleepproxyctl"), "forget", "sleeper", "--socket", socket])
        let cleared = waitUntil(timeout: 10, interval: 0.3) {
            let left = (try? self.configs(node))?.keys.filter { $0.contains(Self.sleeperID) } ?? ["?"]
            return left.isEmpty
        }
        #expect(cleared, "configs left: \((try? self.configs(node))?.keys.sorted() ?? [])")
    }

    /// `kill -9`: the broker publishes the proxy's last will, so Home Assistant shows its entities unavailable;
    /// a clean stop says `offline` itself. A broker restarted without persistence under a running daemon gets
    /// everything again once the daemon is back in.
    @Test func theLastWillAndABrokerRestart() throws {
        var daemon = try self.startDaemon()
        defer { daemon.stop() }
        let node = try #require(self.node(), "no availability retained: \(daemon.output)")
        let availability = "sleepproxy/\(node)/availability"
        #expect(try self.broker.retained(availability, user: "viewer")[availability] == "online")
        try self.register()
        #expect(self.hostState(node) { _ in true } != nil)

        self.broker.stop()
        try self.broker.start(readyAs: "homeassistant")
        #expect(try self.broker.retained(availability, user: "viewer").isEmpty, "persistence is off: all forgotten")
        // Back within the first retries (1 s, 2 s, 4 s), with every configuration and state again.
        let back = waitUntil(timeout: 20, interval: 0.3) {
            (try? self.broker.retained(availability, user: "viewer"))?[availability] == "online"
                && (try? self.configs(node))?.keys.contains { $0.contains(Self.sleeperID) } == true
        }
        #expect(back, "not republished after the broker's restart: \(daemon.output)")

        // Home Assistant started without a retained copy (someone cleared one): its birth message brings it back.
        let stateConfig = "homeassistant/sensor/sleepproxy_\(node)/\(Self.sleeperID)_state/config"
        #expect(try self.broker.publish(stateConfig, "", user: "homeassistant", retain: true).succeeded)
        #expect(try self.configs(node)[stateConfig] == nil, "the copy was not cleared")
        #expect(try self.broker.publish("homeassistant/status", "online", user: "homeassistant").succeeded)
        let reborn = waitUntil(timeout: 10, interval: 0.3) { (try? self.configs(node))?[stateConfig] != nil }
        #expect(reborn, "Home Assistant's birth message did not bring the configuration back")

        daemon.stop(signal: SIGKILL)
        let will = waitUntil(timeout: 10, interval: 0.3) {
            (try? self.broker.retained(availability, user: "viewer"))?[availability] == "offline"
        }
        #expect(will, "no last will after kill -9")

        daemon = try self.startDaemon()
        #expect(
            waitUntil(timeout: 10, interval: 0.3) {
                (try? self.broker.retained(availability, user: "viewer"))?[availability] == "online"
            })
        daemon.stop()
        #expect(
            (try? self.broker.retained(availability, user: "viewer"))?[availability] == "offline",
            "a clean stop says offline")
    }

    /// A broker that refuses the proxy (a wrong password) changes nothing about answering: the host is still
    /// taken over and answered for, `status` says what is wrong, and no button exists without
    /// `mqtt-allow-wake`, nor does a retained press replayed at connection wake anyone.
    @Test func aRefusingBrokerChangesNothingAndPressesNeedPermission() throws {
        var daemon = try self.startDaemon(password: "wrong")
        defer { daemon.stop() }
        try self.register()
        try self.sleeper.sleep()
        #expect(
            Daemon.waitForHost("sleeper.local.", in: .asleep, proxy: self.proxy, stateDirectory: self.state) == .asleep,
            "the refusal stopped the proxy: \(daemon.output)")
        var warnings: [String] = []
        waitUntil(timeout: 10, interval: 0.3) {
            warnings = Daemon.status(proxy: self.proxy, stateDirectory: self.state)?.warnings ?? []
            return warnings.contains { $0.contains("refused the connection") }
        }
        #expect(warnings.contains { $0.contains("Home Assistant") && $0.contains("password") }, "\(warnings)")
        daemon.stop()

        // A press left retained on the broker before the proxy connects, and a proxy without the permission.
        let node = HomeAssistantLabTests.nodeName
        #expect(
            try self.broker.publish(
                "sleepproxy/\(node)/host/\(Self.sleeperID)/wake", "PRESS", user: "homeassistant", retain: true
            ).succeeded)
        daemon = try self.startDaemon(allowWake: true)
        #expect(self.hostState(node) { $0["asleep"] as? String == "ON" } != nil, "\(daemon.output)")
        // The daemon's verdict first (the replayed press seen and ignored), then no magic packet: a wake would
        // have been asked for before the count.
        #expect(self.ignoredPresses(1), "the replayed press never reached the daemon")
        #expect(self.sleeper.waitForMagicPackets(1, timeout: 1).isEmpty, "a retained press woke the host")
        daemon.stop()
        #expect(
            try self.broker.publish(
                "sleepproxy/\(node)/host/\(Self.sleeperID)/wake", "", user: "homeassistant", retain: true
            ).succeeded)
        daemon = try self.startDaemon(allowWake: false)
        #expect(self.hostState(node) { $0["asleep"] as? String == "ON" } != nil)
        #expect(try self.configs(node).keys.allSatisfy { !$0.contains("/button/") }, "a button without permission")
        #expect(
            try self.broker.publish("sleepproxy/\(node)/host/\(Self.sleeperID)/wake", "PRESS", user: "homeassistant")
                .succeeded)
        #expect(self.ignoredPresses(1), "the press never reached the daemon")
        #expect(self.sleeper.waitForMagicPackets(1, timeout: 1).isEmpty, "a press woke the host without permission")
    }

    /// Waits (bounded) until the daemon counted `count` messages on a button's topic that it did not act on.
    func ignoredPresses(_ count: Int) -> Bool {
        waitUntil(timeout: 10, interval: 0.2) {
            Daemon.status(proxy: self.proxy, stateDirectory: self.state)?.mqtt?.pressesIgnored == count
        }
    }

    /// The node the daemon names itself by: this machine's host name (the lab's namespaces share it).
    static var nodeName: String {
        let host = ProcessInfo.processInfo.hostName.split(separator: ".").first.map(String.init) ?? "linux"
        return String(host.lowercased().map { $0.isLetter || $0.isNumber || $0 == "-" ? $0 : "_" }.prefix(64))
    }

    /// The sleeper's presence changes with their times, from `sleepproxyctl history`.
    func historyTimes() throws -> [(Date, String)] {
        let socket = self.state.appendingPathComponent("control.sock").path
        let result = try self.proxy.run([
            Daemon.sibling("sleepproxyctl"), "history", "sleeper", "--json", "--socket", socket,
        ])
        guard let line = result.stdout.split(separator: "\n").first,
            let response = try? ControlProtocol.decode(ControlResponse.self, from: Array(line.utf8))
        else { return [] }
        return (response.history?.records ?? []).compactMap { record in
            record.state.flatMap { [.asleep, .waking, .awake].contains($0) ? (record.time, $0.rawValue) : nil }
        }
    }
}

extension LabRequirement {
    static let mosquitto = LabRequirement(need: "mosquitto and mosquitto-clients (scripts/test installs them)") {
        Mosquitto.isInstalled
    }
}
