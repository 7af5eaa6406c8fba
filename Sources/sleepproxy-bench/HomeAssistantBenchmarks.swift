import Foundation
import SleepProxyControl
import SleepProxyHomeAssistant
import SleepProxyWire

/// What the Home Assistant link costs a small box (docs/home-assistant.md §4): each refresh builds every retained
/// message from `status`, `hosts` and `adopted` and compares it with what the broker holds; a refresh comes with
/// each change and every 10 s. And the codec that reads the broker.
enum HomeAssistantBenchmarks {
    static func run() throws {
        print("Home Assistant: the proxy and \(HomeAssistantRules.maximumHosts) hosts (the most shown)")
        let discovery = HomeAssistantDiscovery(
            settings: HomeAssistantSettings(
                discoveryPrefix: "homeassistant", node: "pi", allowWake: true, deviceName: "Sleep proxy pi",
                version: "bench"))
        let wake = WakeLogEntry(
            kind: .wake, time: Date(timeIntervalSince1970: 1_790_000_000), mac: "02:00:00:00:00:01",
            interface: "eth0", hostName: "host.local.",
            trigger: .init(type: .connection, client: "192.0.2.50", port: 445),
            seconds: nil, attempts: nil, rule: "resolved-first", summary: "SMB from 192.0.2.50")
        var hosts = (0..<HomeAssistantRules.maximumHosts).map { index in
            HostSummary(
                name: "host-\(index).local.", mac: String(format: "02:00:00:00:%02x:%02x", index >> 8, index & 0xFF),
                interface: "eth0", addresses: ["192.0.2.\(index % 250 + 1)", "2001:db8::\(index + 1)"],
                services: ["_smb._tcp:445", "_http._tcp:80"], leaseSeconds: 7200, state: .asleep, lastWake: wake)
        }
        let status = DaemonStatus(
            version: "bench", startedAt: Date(), uptimeSeconds: 1, interfaces: ["eth0"], advertisedName: nil,
            hosts: hosts.count, records: 2000, registrationsAccepted: 0, refusals: [:], queriesAnswered: 0, wakes: 0,
            magicPackets: 0, hostsByState: [.asleep: hosts.count])
        var topics = RetainedTopics()
        topics.reconnected()
        var bytes = 0
        _ = measure("a refresh: every retained message built, 128 hosts", iterations: 200) {
            let built = discovery.topics(for: HomeAssistantView(status: status, hosts: hosts, adopted: []))
            bytes = built.values.reduce(0) { $0 + $1.count }
            return built.count
        }
        print("  retained messages: \(bytes / 1024) KiB for the proxy and \(hosts.count) hosts")
        topics.want(discovery.topics(for: HomeAssistantView(status: status, hosts: hosts, adopted: [])))
        _ = topics.next(Int.max)
        var flip = false
        _ = measure("a refresh with one host changed: built, compared, one message out", iterations: 200) {
            flip.toggle()
            hosts[7].state = flip ? .waking : .asleep
            topics.want(discovery.topics(for: HomeAssistantView(status: status, hosts: hosts, adopted: [])))
            return topics.next(Int.max).count
        }
        let press = try MQTTPacket.publish(
            MQTTPublish(topic: "sleepproxy/pi/host/020000000007/wake", payload: Array("PRESS".utf8))
        ).encoded()
        _ = try measure("a button press decoded from the broker's stream", iterations: 200_000) {
            guard let length = try MQTTPacket.frameLength(of: press) else { return 0 }
            if case .publish(let message) = try MQTTPacket(decoding: press) { return message.payload.count + length }
            return 0
        }
    }
}
