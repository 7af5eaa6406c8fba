import Foundation
import SleepProxyControl
import SleepProxyWire
import Testing

@testable import SleepProxyHomeAssistant

@Suite("Home Assistant discovery")
struct HomeAssistantDiscoveryTests {
    let discovery = HomeAssistantDiscovery(
        settings: HomeAssistantSettings(
            discoveryPrefix: "homeassistant", node: "Pi.Box", allowWake: true, deviceName: "Sleep proxy pi",
            version: "1.0"))

    static func status(recent: [DaemonStatus.RecentHost] = []) -> DaemonStatus {
        DaemonStatus(
            version: "1.0", startedAt: Date(timeIntervalSince1970: 0), uptimeSeconds: 1, interfaces: ["eth0"],
            advertisedName: nil, hosts: 1, records: 4, registrationsAccepted: 1, refusals: [:], queriesAnswered: 0,
            wakes: 0, magicPackets: 0, hostsByState: [.asleep: 1],
            lastDay: .init(wakes: 2, declined: 5, wakesByReason: ["connection": 2]), recentHosts: recent,
            warnings: ["forwarding sends redirects"])
    }

    static func host(_ index: Int, state: PresenceState = .asleep, name: String? = nil) -> HostSummary {
        let mac = String(format: "02:00:00:00:%02x:%02x", index >> 8, index & 0xFF)
        return HostSummary(
            name: name ?? "host\(index).local.", mac: mac, interface: "eth0", addresses: ["192.0.2.\(index % 250 + 1)"],
            services: ["_smb._tcp:445"], leaseSeconds: 7200, state: state, lastWake: nil)
    }

    func json(_ bytes: [UInt8]?) -> [String: Any]? {
        bytes.flatMap { try? JSONSerialization.jsonObject(with: Data($0)) as? [String: Any] }
    }

    @Test func aSleepingHostIsADeviceLinkedToTheProxy() throws {
        let wake = WakeLogEntry(
            kind: .wake, time: Date(timeIntervalSince1970: 1_790_000_000), mac: "02:00:00:00:00:01", interface: "eth0",
            hostName: "host1.local.", trigger: .init(type: .connection, client: "192.0.2.50", port: 445),
            seconds: nil, attempts: nil, rule: "resolved-first", summary: "SMB from 192.0.2.50")
        var host = Self.host(1)
        host.lastWake = wake
        let topics = self.discovery.topics(
            for: HomeAssistantView(status: Self.status(), hosts: [host], adopted: []))
        #expect(self.discovery.settings.nodeID == "pi_box")
        let state = try #require(self.json(topics["homeassistant/sensor/sleepproxy_pi_box/020000000001_state/config"]))
        #expect(state["state_topic"] as? String == "sleepproxy/pi_box/host/020000000001/state")
        let device = try #require(state["device"] as? [String: Any])
        #expect(device["via_device"] as? String == "sleepproxy_pi_box" && device["name"] as? String == "host1")
        #expect((device["connections"] as? [[String]]) == [["mac", "02:00:00:00:00:01"]])
        let lastWake = try #require(
            self.json(topics["homeassistant/sensor/sleepproxy_pi_box/020000000001_last_wake/config"]))
        #expect(lastWake["device_class"] as? String == "timestamp")
        let button = try #require(self.json(topics["homeassistant/button/sleepproxy_pi_box/020000000001_wake/config"]))
        #expect(button["command_topic"] as? String == "sleepproxy/pi_box/host/020000000001/wake")
        #expect(button["state_topic"] == nil)
        let values = try #require(self.json(topics["sleepproxy/pi_box/host/020000000001/state"]))
        #expect(values["state"] as? String == "asleep" && values["asleep"] as? String == "ON")
        #expect(values["last_wake"] as? String == "2026-09-21T14:13:20Z")
        #expect((values["last_wake_details"] as? [String: Any])?["reason"] as? String == "connection")
        let proxy = try #require(self.json(topics["sleepproxy/pi_box/state"]))
        #expect(proxy["hosts_asleep"] as? Int == 1 && proxy["wakes"] as? Int == 2 && proxy["declined"] as? Int == 5)
        #expect(proxy["warnings"] as? Int == 1)
        #expect(topics.keys.filter { $0.hasPrefix("homeassistant/sensor/sleepproxy_pi_box/proxy_") }.count == 10)
    }

    /// docs/savings.md, "Home Assistant": per host and for the proxy, a kWh total that only grows, which the Energy
    /// dashboard takes as an individual device; the proxy's own use only when its draw is given.
    @Test func energySensorsAreWhatTheEnergyDashboardTakes() throws {
        var status = Self.status()
        status.savings = SavingsCounters(
            hosts: [.init(mac: "02:00:00:00:00:01", name: "host1.local.", asleepSeconds: 3600, savedWattHours: 1234.5)],
            savedWattHours: 2000, proxyUsedWattHours: 100.25)
        let topics = self.discovery.topics(for: HomeAssistantView(status: status, hosts: [Self.host(1)], adopted: []))
        for object in ["020000000001_energy_saved", "proxy_energy_saved", "proxy_energy_used"] {
            let config = try #require(self.json(topics["homeassistant/sensor/sleepproxy_pi_box/\(object)/config"]))
            #expect(config["device_class"] as? String == "energy", "\(object)")
            #expect(
                config["state_class"] as? String == "total_increasing"
                    && config["unit_of_measurement"] as? String == "kWh")
        }
        let host = try #require(self.json(topics["sleepproxy/pi_box/host/020000000001/state"]))
        #expect(host["energy_saved"] as? Double == 1.235 || host["energy_saved"] as? Double == 1.234)
        #expect(
            String(decoding: topics["sleepproxy/pi_box/state"] ?? [], as: UTF8.self).contains("\"energy_saved\":2.000"))
        let proxy = try #require(self.json(topics["sleepproxy/pi_box/state"]))
        #expect(proxy["energy_used"] as? Double == 0.1)
        status.savings?.proxyUsedWattHours = nil
        let without = self.discovery.topics(for: HomeAssistantView(status: status, hosts: [], adopted: []))
        #expect(without["homeassistant/sensor/sleepproxy_pi_box/proxy_energy_used/config"] == nil)
        #expect(DisplayText.fixed(0.0005, digits: 3) == "0.001" && DisplayText.fixed(12, digits: 3) == "12.000")
        #expect(DisplayText.fixed(.nan, digits: 3) == "0" && DisplayText.fixed(-1.5, digits: 1) == "-1.5")
    }

    @Test func aHostThatWokeStaysAndOneForgottenGoes() {
        let recent = [
            DaemonStatus.RecentHost(
                mac: "02:00:00:00:00:07", name: "pc.local.", state: .handedBack, since: Date(), lastWake: nil),
            DaemonStatus.RecentHost(
                mac: "02:00:00:00:00:08", name: "old.local.", state: .gone, since: Date(), lastWake: nil),
        ]
        let topics = self.discovery.topics(
            for: HomeAssistantView(status: Self.status(recent: recent), hosts: [], adopted: []))
        #expect(self.json(topics["sleepproxy/pi_box/host/020000000007/state"])?["state"] as? String == "handed-back")
        #expect(!topics.keys.contains { $0.contains("020000000008") })
    }

    @Test func atMostTheBoundOfHostsAreShown() {
        func shown(_ count: Int) -> Int {
            let hosts = (1...count).map { Self.host($0) }
            let topics = self.discovery.topics(
                for: HomeAssistantView(status: Self.status(), hosts: hosts, adopted: []))
            return topics.keys.filter { $0.hasSuffix("/state") && $0.contains("/host/") }.count
        }
        #expect(shown(HomeAssistantRules.maximumHosts) == HomeAssistantRules.maximumHosts)
        #expect(shown(HomeAssistantRules.maximumHosts + 1) == HomeAssistantRules.maximumHosts)
    }

    @Test func namesFromTheWireAreWrittenAsValidJSON() throws {
        let host = Self.host(3, name: "a\"b\\c\u{1}\nd.local.")
        let topics = self.discovery.topics(
            for: HomeAssistantView(status: Self.status(), hosts: [host], adopted: []))
        let config = try #require(self.json(topics["homeassistant/sensor/sleepproxy_pi_box/020000000003_state/config"]))
        #expect((config["device"] as? [String: Any])?["name"] as? String == "a\"b\\c\u{1}\nd")
    }

    @Test func onlyAFreshPressOnAHostsTopicIsAWake() {
        func press(_ topic: String, _ payload: String = "PRESS", retain: Bool = false) -> MQTTPublish {
            MQTTPublish(topic: topic, payload: Array(payload.utf8), retain: retain)
        }
        let topic = "sleepproxy/pi_box/host/025350000002/wake"
        #expect(self.discovery.wakeTarget(of: press(topic)) == "02:53:50:00:00:02")
        #expect(self.discovery.wakeTarget(of: press(topic, retain: true)) == nil, "replayed by the broker")
        #expect(self.discovery.wakeTarget(of: press(topic, "press")) == nil)
        #expect(self.discovery.wakeTarget(of: press("sleepproxy/other/host/025350000002/wake")) == nil)
        #expect(self.discovery.wakeTarget(of: press("sleepproxy/pi_box/host/02535000000g/wake")) == nil)
        #expect(self.discovery.wakeTarget(of: press("sleepproxy/pi_box/host/-25350000002/wake")) == nil)
        // Twelve bytes but six characters: full-width digits are hex digits to Unicode, not to a MAC.
        #expect(self.discovery.wakeTarget(of: press("sleepproxy/pi_box/host/025\u{FF15}\u{FF10}\u{FF10}/wake")) == nil)
        #expect(self.discovery.buttonHost(of: topic) == "02:53:50:00:00:02")
        #expect(self.discovery.wakeTarget(of: press("sleepproxy/pi_box/host/025350000002/state")) == nil)
        var settings = self.discovery.settings
        settings.allowWake = false
        #expect(HomeAssistantDiscovery(settings: settings).wakeTarget(of: press(topic)) == nil)
        // Still heard, to be counted as ignored.
        #expect(HomeAssistantDiscovery(settings: settings).buttonHost(of: topic) == "02:53:50:00:00:02")
    }

    @Test func ownRetainedTopicsAreRecognised() {
        #expect(self.discovery.isOwnRetained("homeassistant/sensor/sleepproxy_pi_box/020000000001_state/config"))
        #expect(self.discovery.isOwnRetained("sleepproxy/pi_box/host/020000000001/state"))
        #expect(!self.discovery.isOwnRetained("homeassistant/sensor/sleepproxy_other/x/config"))
        #expect(!self.discovery.isOwnRetained("sleepproxy/pi_box/availability"))
        #expect(!self.discovery.isOwnRetained("sleepproxy/pi_box/host/020000000001/wake"))
    }
}
