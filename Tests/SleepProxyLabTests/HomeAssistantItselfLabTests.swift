import Foundation
import SleepProxyTestSupport
import SleepProxyWire
import Testing

/// Home Assistant 2024.3.3 itself, with its MQTT integration, in the lab (docs/home-assistant.md §6): the
/// entities as its REST API shows them, and its own button service waking the sleeping host. Run by
/// `scripts/test-home-assistant`, which builds the virtual environment it needs.
@Suite(
    "Home Assistant itself",
    .lab(.namespaces, .mosquitto, .homeAssistant, serialized: true))
final class HomeAssistantItselfLabTests: ThreeHostSuite {
    let setup: ThreeHostLab
    var box: LabHost { self.setup.third }
    let broker: Mosquitto
    let configuration: URL
    let url = "http://192.0.2.20:8123"

    static var driver: String {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../scripts/home-assistant/driver.py").standardized.path
    }

    init() throws {
        self.setup = try ThreeHostLab(thirdName: "hassbox")
        self.broker = try Mosquitto(
            in: self.setup.third, address: "192.0.2.20",
            users: ["sleepproxy": "proxy-secret", "homeassistant": "ha-secret"], acl: HomeAssistantLabTests.acl)
        try self.broker.start(readyAs: "homeassistant")
        self.configuration = self.setup.lab.directory.appendingPathComponent("home-assistant")
        try FileManager.default.createDirectory(at: self.configuration, withIntermediateDirectories: true)
        // The integrations the frontend needs and nothing that reaches out: no default_config. Trusted networks
        // first, so that the browser taking the screenshot is logged in as the one user without a form.
        let yaml = """
            homeassistant:
              name: Lab
              latitude: 0
              longitude: 0
              elevation: 0
              unit_system: metric
              time_zone: UTC
              auth_providers:
                - type: trusted_networks
                  trusted_networks: [192.0.2.0/24]
                  allow_bypass_login: true
                - type: homeassistant
            http:
              server_host: 192.0.2.20
              server_port: 8123
            frontend:
            config:
            api:
            recorder:
              commit_interval: 1
            energy:
            logger:
              default: warning
            """
        try yaml.write(
            to: self.configuration.appendingPathComponent("configuration.yaml"), atomically: true, encoding: .utf8)
    }

    deinit { self.broker.stop() }

    func drive(_ arguments: [String]) throws -> Any? {
        let token = self.configuration.appendingPathComponent("lab-token").path
        let result = try self.box.run(
            ["python3", Self.driver, self.url, arguments[0], token] + arguments.dropFirst(), timeout: .seconds(60))
        guard result.succeeded else { throw CommandError("driver \(arguments): \(result)") }
        return try JSONSerialization.jsonObject(with: Data(result.stdout.utf8))
    }

    @Test func itsEntitiesShowTheHostAndItsButtonWakesIt() throws {
        let venv = try #require(HomeAssistantVenv.path)
        let hass = try self.box.spawn(
            ["\(venv)/bin/hass", "-c", self.configuration.path, "--skip-pip"], logName: "home-assistant")
        defer { hass.stop() }
        let up = waitUntil(timeout: 180, interval: 1) {
            (try? self.box.run(["curl", "-sf", "-o", "/dev/null", "\(self.url)/manifest.json"]))?.succeeded == true
        }
        try #require(up, "Home Assistant did not start: \(hass.output.suffix(3000))")
        _ = try self.drive(["onboard"])
        let flow = try self.drive(["mqtt", "192.0.2.20", "1883", "homeassistant", "ha-secret"]) as? [String: Any]
        #expect(flow?["type"] as? String == "create_entry", "\(String(describing: flow))")

        let daemon = try Daemon.start(
            in: self.proxy, stateDirectory: self.state,
            extra: try self.mqttArguments())
        defer { daemon.stop() }
        let message = SampleRegistration.message(
            id: 0x4B00, mac: ThreeHostLab.sleeperMAC, host: "sleeper.local.",
            addresses: [IPAddress("192.0.2.2")!], services: [("Web._http._tcp", 8080)])
        _ = try UDPClient.exchange(
            in: self.sleeper.host, to: "192.0.2.1", port: 5599, from: "192.0.2.2",
            payloads: [message.encoded(options: .appleUpdate)])
        try self.sleeper.sleep()

        let node = HomeAssistantLabTests.nodeName
        let prefix = "sleepproxy_\(node)_\(HomeAssistantLabTests.sleeperID)"
        var entities: [String: [String: Any]] = [:]
        let started = Date()
        let shown = waitUntil(timeout: 60, interval: 0.5) {
            let list = (try? self.drive(["states", prefix])) as? [[String: Any]] ?? []
            entities = Dictionary(
                list.compactMap { entry in (entry["entity_id"] as? String).map { ($0, entry) } },
                uniquingKeysWith: { first, _ in first })
            return entities["binary_sensor.\(prefix)_asleep"]?["state"] as? String == "on"
        }
        print(
            "home assistant: the sleeping host's entities showed asleep \(String(format: "%.1f", Date().timeIntervalSince(started))) s after it slept"
        )
        #expect(shown, "entities: \(entities.keys.sorted()); \(daemon.output.suffix(2000))")
        #expect(entities["sensor.\(prefix)_state"]?["state"] as? String == "asleep")
        let lastWake = entities["sensor.\(prefix)_last_wake"]?["attributes"] as? [String: Any]
        #expect(lastWake?["device_class"] as? String == "timestamp")
        #expect(entities["button.\(prefix)_wake"] != nil)
        #expect(entities["sensor.\(prefix)_address"]?["state"] as? String == "192.0.2.2")

        try self.expectEnergyAccepted(prefix: prefix, node: node)

        if let screenshot = ProcessInfo.processInfo.environment["SLEEPPROXY_HA_SCREENSHOT"] {
            try self.screenshot(entity: "sensor.\(prefix)_state", to: screenshot)
        }

        let pressedAt = Date()
        _ = try self.drive(["press", "button.\(prefix)_wake"])
        let packets = self.sleeper.waitForMagicPackets(1, timeout: 10)
        #expect(!packets.isEmpty, "Home Assistant's press did not wake the host: \(daemon.output.suffix(2000))")
        if let first = packets.first {
            print(
                "home assistant: the button's magic packet reached the sleeper \(String(format: "%.3f", first.frame.at.timeIntervalSince(pressedAt))) s after the press"
            )
        }
        let reason = waitUntil(timeout: 10, interval: 0.5) {
            let list = (try? self.drive(["states", prefix])) as? [[String: Any]] ?? []
            return list.contains {
                $0["entity_id"] as? String == "sensor.\(prefix)_last_wake"
                    && ($0["attributes"] as? [String: Any])?["reason"] as? String == "administrator"
            }
        }
        #expect(reason, "the last wake's reason never showed as an administrator's")
    }

    /// docs/savings.md, "Where it shows": the host's and the proxy's energy sensors are what the Energy dashboard
    /// takes as individual devices. Home Assistant's own checks say so: its statistics validation finds no issue
    /// with them, and the Energy configuration that names them validates clean.
    func expectEnergyAccepted(prefix: String, node: String) throws {
        let host = "sensor.\(prefix)_energy_saved"
        let proxy = "sensor.sleepproxy_\(node)_proxy_energy_saved"
        var attributes: [String: Any] = [:]
        let shown = waitUntil(timeout: 30, interval: 0.5) {
            let list = (try? self.drive(["states", "sleepproxy_\(node)"])) as? [[String: Any]] ?? []
            let found = list.first { $0["entity_id"] as? String == host }
            attributes = found?["attributes"] as? [String: Any] ?? [:]
            return found != nil && list.contains { $0["entity_id"] as? String == proxy }
        }
        #expect(shown, "no energy sensors")
        #expect(
            attributes["device_class"] as? String == "energy"
                && attributes["state_class"] as? String == "total_increasing")
        #expect(attributes["unit_of_measurement"] as? String == "kWh", "\(attributes)")
        let venv = try #require(HomeAssistantVenv.path)
        let token = self.configuration.appendingPathComponent("lab-token").path
        func websocket(_ messages: [String]) throws -> [String: Any] {
            let result = try self.box.run(
                ["\(venv)/bin/python", Self.driver, self.url, "ws", token] + messages, timeout: .seconds(60))
            guard result.succeeded,
                let answer = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
            else { throw CommandError("websocket \(messages): \(result)") }
            return answer
        }
        let validation = try websocket([#"{"type": "recorder/validate_statistics"}"#])
        let issues = validation["result"] as? [String: Any]
        #expect(issues != nil, "\(validation)")
        #expect(issues?[host] == nil && issues?[proxy] == nil, "statistics issues: \(validation)")
        let energy = try websocket([
            #"{"type": "energy/save_prefs", "device_consumption": [{"stat_consumption": "\#(host)"}, {"stat_consumption": "\#(proxy)"}]}"#,
            #"{"type": "energy/validate"}"#,
        ])
        let devices = (energy["result"] as? [String: Any])?["device_consumption"] as? [[[String: Any]]]
        // Its statistics are compiled every five minutes; until the first, the dashboard says only that they are not
        // there yet. Any other issue (a unit, a state class, a sensor the recorder does not keep) is ours.
        let kinds = devices?.map { $0.compactMap { $0["type"] as? String }.filter { $0 != "statistics_not_defined" } }
        #expect(devices?.count == 2 && kinds?.allSatisfy(\.isEmpty) == true, "energy issues: \(energy)")
        print("home assistant: the energy sensors validate clean: \(validation["result"] ?? "?"), \(devices ?? [])")
        // With SLEEPPROXY_HA_WAIT_STATISTICS=1, past Home Assistant's first compile of statistics (the next
        // five-minute mark and a little: at most six minutes) the Energy configuration validates with no issue at all.
        guard ProcessInfo.processInfo.environment["SLEEPPROXY_HA_WAIT_STATISTICS"] == "1" else { return }
        var last: [String: Any] = [:]
        let clean = waitUntil(timeout: 400, interval: 15) {
            last = (try? websocket([#"{"type": "energy/validate"}"#])) ?? [:]
            let devices = (last["result"] as? [String: Any])?["device_consumption"] as? [[Any]]
            return devices?.count == 2 && devices?.allSatisfy(\.isEmpty) == true
        }
        #expect(clean, "after the first compile of statistics: \(last)")
        print(
            "home assistant: after its first compile of statistics the Energy configuration validates clean: \(clean)")
    }

    func mqttArguments() throws -> [String] {
        let file = self.setup.lab.directory.appendingPathComponent("mqtt-password")
        try "proxy-secret\n".write(to: file, atomically: true, encoding: .utf8)
        return [
            "--mqtt", "mqtt://192.0.2.20", "--mqtt-user", "sleepproxy", "--mqtt-password-file", file.path,
            "--mqtt-allow-wake",
        ]
    }

    /// Home Assistant's device page for the host, as headless Chromium draws it for a logged-in user.
    func screenshot(entity: String, to path: String) throws {
        let venv = try #require(HomeAssistantVenv.path)
        let device = try #require((try self.drive(["device", entity]) as? [String: Any])?["device"] as? String)
        let profile = self.setup.lab.directory.appendingPathComponent("chromium-ha").path
        let browser = try self.box.spawn(
            [
                "chromium", "--headless=new", "--no-sandbox", "--disable-gpu", "--user-data-dir=\(profile)",
                "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=9222", "about:blank",
            ], logName: "chromium")
        defer { browser.stop() }
        let ready = waitUntil(timeout: 30, interval: 0.3) {
            (try? self.box.run(["curl", "-sf", "-o", "/dev/null", "http://127.0.0.1:9222/json"]))?.succeeded == true
        }
        try #require(ready, "chromium did not start: \(browser.output)")
        let token = self.configuration.appendingPathComponent("lab-token").path
        let result = try self.box.run(
            [
                "\(venv)/bin/python", Self.driver, self.url, "screenshot", token, "/config/devices/device/\(device)",
                path, "http://127.0.0.1:9222",
            ], timeout: .seconds(120))
        #expect(result.succeeded && FileManager.default.fileExists(atPath: path), "\(result)")
    }
}

extension LabRequirement {
    static let homeAssistant = LabRequirement(
        need:
            "SLEEPPROXY_HOME_ASSISTANT, a virtual environment with homeassistant 2024.3.3 (scripts/test-home-assistant)"
    ) {
        HomeAssistantVenv.path.map {
            FileManager.default.isExecutableFile(atPath: "\($0)/bin/hass")
        } ?? false
    }
}

/// The virtual environment `scripts/test-home-assistant` builds, named by SLEEPPROXY_HOME_ASSISTANT.
enum HomeAssistantVenv {
    static var path: String? { ProcessInfo.processInfo.environment["SLEEPPROXY_HOME_ASSISTANT"] }
}
