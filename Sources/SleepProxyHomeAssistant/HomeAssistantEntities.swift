import FoundationEssentials
import SleepProxyControl
import SleepProxyWire

/// What the proxy knows, as `status`, `hosts` and `adopted` answer it.
public struct HomeAssistantView: Hashable, Sendable {
    public var status: DaemonStatus
    /// The held hosts (a page of `hosts`, at most `HomeAssistantRules.maximumHosts`).
    public var hosts: [HostSummary]
    public var adopted: [AdoptedSummary]

    public init(status: DaemonStatus, hosts: [HostSummary], adopted: [AdoptedSummary]) {
        self.status = status
        self.hosts = hosts
        self.adopted = adopted
    }

    /// One host as Home Assistant shows it.
    struct Host: Hashable {
        var mac: String
        var name: String?
        /// The proxy's word for where it stands: a held host's state, an adopted one's (`awake`, `checking`,
        /// `off or away`, ...), or `handed-back`.
        var state: String
        var asleep: Bool
        var adopted: Bool
        var addresses: [String]
        var services: [String]
        var lastWake: WakeLogEntry?
        /// What its sleep saved since the daemon started, in Wh (docs/savings.md).
        var savedWattHours = 0.0
    }

    /// The hosts to show: held ones first, then adopted ones not held, then those handed back in the last day
    /// (a host that woke stays in Home Assistant as awake rather than vanishing each time it wakes), at most
    /// `limit`. A host whose lease ended or that was forgotten is in none of these, and so is removed.
    func shownHosts(limit: Int) -> [Host] {
        let adoptedMACs = Set(self.adopted.map { $0.mac.lowercased() })
        var seen = Set<String>()
        var shown: [Host] = []
        let saved = Dictionary(
            (self.status.savings?.hosts ?? []).map { ($0.mac.lowercased(), $0.savedWattHours) },
            uniquingKeysWith: { first, _ in first })
        func add(_ host: Host) {
            guard shown.count < limit, seen.insert(host.mac).inserted else { return }
            var host = host
            host.savedWattHours = saved[host.mac] ?? 0
            shown.append(host)
        }
        for host in self.hosts {
            let asleep: Set<PresenceState> = [.asleep, .waking, .standby]
            add(
                Host(
                    mac: host.mac.lowercased(), name: host.name.map(DisplayText.bareName), state: host.state.rawValue,
                    asleep: asleep.contains(host.state), adopted: adoptedMACs.contains(host.mac.lowercased()),
                    addresses: host.addresses, services: host.services, lastWake: host.lastWake))
        }
        let recent = Dictionary(
            (self.status.recentHosts ?? []).map { ($0.mac.lowercased(), $0) }, uniquingKeysWith: { first, _ in first })
        for host in self.adopted {
            let mac = host.mac.lowercased()
            add(
                Host(
                    mac: mac, name: host.names.first.map(DisplayText.bareName), state: host.state, asleep: false,
                    adopted: true, addresses: host.addresses, services: host.services,
                    lastWake: recent[mac]?.lastWake))
        }
        for host in self.status.recentHosts ?? [] where host.state == .handedBack {
            add(
                Host(
                    mac: host.mac.lowercased(), name: host.name.map(DisplayText.bareName), state: host.state.rawValue,
                    asleep: false,
                    adopted: false, addresses: [], services: [], lastWake: host.lastWake))
        }
        return shown
    }
}

extension HomeAssistantDiscovery {
    /// What Home Assistant's Energy dashboard takes as an individual device's meter: energy in kWh, a total that only
    /// grows and starts again from zero when the daemon restarts (docs/savings.md, "Home Assistant").
    static let energySensor: [(String, JSONText)] = [
        ("device_class", "energy"), ("state_class", "total_increasing"), ("unit_of_measurement", "kWh"),
        ("icon", "mdi:leaf"),
    ]

    /// The proxy's own device: hosts by state, wakes and declined wakes over the last day, other proxies,
    /// warnings. Their values are in one state message, each entity picking its field.
    func addProxy(_ view: HomeAssistantView, into topics: inout [String: [UInt8]]) {
        let status = view.status
        let stateTopic = self.settings.proxyStateTopic
        let counts = status.hostsByState ?? [:]
        var sensors: [(object: String, name: String, field: String, extra: [(String, JSONText)])] =
            PresenceState.held.map {
                (
                    "hosts_\($0.rawValue)", "Hosts \($0.rawValue)", "hosts_\($0.rawValue)",
                    [("unit_of_measurement", "hosts"), ("state_class", "measurement"), ("icon", "mdi:lan")]
                )
            }
        sensors += [
            ("wakes", "Wakes in the last 24 h", "wakes", [("icon", "mdi:alarm"), ("unit_of_measurement", "wakes")]),
            (
                "declined", "Declined wakes in the last 24 h", "declined",
                [("icon", "mdi:shield-check"), ("unit_of_measurement", "wakes")]
            ),
            ("other_proxies", "Other sleep proxies", "other_proxies", [("icon", "mdi:server-network")]),
            ("warnings", "Warnings", "warnings", [("icon", "mdi:alert"), ("entity_category", "diagnostic")]),
            ("energy_saved", "Energy saved", "energy_saved", Self.energySensor),
        ]
        if status.savings?.proxyUsedWattHours != nil {
            sensors.append(("energy_used", "Energy used", "energy_used", Self.energySensor))
        }
        for sensor in sensors {
            topics[self.settings.configTopic("sensor", "proxy_\(sensor.object)")] = self.config(
                object: "proxy_\(sensor.object)", name: sensor.name, stateTopic: stateTopic,
                [
                    ("value_template", .string("{{ value_json.\(sensor.field) }}")),
                    ("json_attributes_topic", .string(stateTopic)),
                    ("json_attributes_template", .string("{{ value_json.attributes.\(sensor.field) | tojson }}")),
                    ("device", self.proxyDevice),
                ] + sensor.extra)
        }
        let day = status.lastDay
        var fields: [(String, JSONText)] = PresenceState.held.map { ("hosts_\($0.rawValue)", .number(counts[$0] ?? 0)) }
        fields += [
            ("wakes", .number(day?.wakes ?? 0)), ("declined", .number(day?.declined ?? 0)),
            ("other_proxies", .number(status.otherProxies?.count ?? 0)),
            ("warnings", .number(status.warnings?.count ?? 0)),
            ("energy_saved", .decimal((status.savings?.savedWattHours ?? 0) / 1000, digits: 3)),
        ]
        if let used = status.savings?.proxyUsedWattHours {
            fields.append(("energy_used", .decimal(used / 1000, digits: 3)))
        }
        var attributes: [(String, JSONText)] = PresenceState.held.map { ("hosts_\($0.rawValue)", .object([])) }
        attributes += [
            (
                "wakes",
                .object((day?.wakesByReason ?? [:]).sorted { $0.key < $1.key }.map { ($0.key, .number($0.value)) })
            ),
            ("declined", .object([])),
            (
                "other_proxies",
                .object([
                    ("proxies", .array((status.otherProxies ?? []).map { .string("\($0.label) (\($0.address))") }))
                ])
            ),
            ("warnings", .object([("warnings", .array((status.warnings ?? []).map { .string($0) }))])),
            ("energy_saved", .object([])),
        ]
        if status.savings?.proxyUsedWattHours != nil { attributes.append(("energy_used", .object([]))) }
        topics[stateTopic] = JSONText.object(fields + [("attributes", .object(attributes))]).bytes
    }

    /// A host's device, linked to the proxy's: its state, an asleep binary sensor, its last wake (a timestamp,
    /// the reason beside it), its address, and the wake button when allowed.
    func add(_ host: HomeAssistantView.Host, into topics: inout [String: [UInt8]]) {
        let id = String(host.mac.filter { $0 != ":" })
        let stateTopic = self.settings.hostTopic(id, "state")
        let device: JSONText = .object([
            ("identifiers", .array([.string("\(self.settings.discoveryNode)_\(id)")])),
            ("connections", .array([.array(["mac", .string(host.mac)])])),
            ("name", .string(host.name ?? host.mac)), ("manufacturer", "sleep-proxy"),
            ("model", host.adopted ? "Adopted host" : "Registered host"),
            ("via_device", .string(self.settings.discoveryNode)),
        ])
        func add(_ component: String, _ object: String, _ name: String, _ fields: [(String, JSONText)]) {
            topics[self.settings.configTopic(component, "\(id)_\(object)")] = self.config(
                object: "\(id)_\(object)", name: name, stateTopic: component == "button" ? nil : stateTopic,
                fields + [("device", device)])
        }
        add(
            "sensor", "state", "State",
            [
                ("value_template", "{{ value_json.state }}"), ("icon", "mdi:power-sleep"),
                ("json_attributes_topic", .string(stateTopic)),
                ("json_attributes_template", "{{ value_json.details | tojson }}"),
            ])
        add(
            "binary_sensor", "asleep", "Asleep",
            [
                ("value_template", "{{ value_json.asleep }}"), ("payload_on", "ON"), ("payload_off", "OFF"),
                ("icon", "mdi:sleep"),
            ])
        add(
            "sensor", "last_wake", "Last wake",
            [
                ("value_template", "{{ value_json.last_wake }}"), ("device_class", "timestamp"),
                ("json_attributes_topic", .string(stateTopic)),
                ("json_attributes_template", "{{ value_json.last_wake_details | tojson }}"),
            ])
        add(
            "sensor", "address", "Address",
            [
                ("value_template", "{{ value_json.address }}"), ("icon", "mdi:ip-network"),
                ("entity_category", "diagnostic"), ("json_attributes_topic", .string(stateTopic)),
                ("json_attributes_template", "{{ {'addresses': value_json.addresses} | tojson }}"),
            ])
        add(
            "sensor", "energy_saved", "Energy saved",
            [("value_template", "{{ value_json.energy_saved }}")] + Self.energySensor)
        if self.settings.allowWake {
            add(
                "button", "wake", "Wake",
                [
                    ("command_topic", .string(self.settings.hostTopic(id, "wake"))),
                    ("payload_press", .string(HomeAssistantRules.press)), ("icon", "mdi:power"),
                ])
        }
        let wake = host.lastWake
        let lastWake: JSONText = wake.map { .string($0.time.formatted(.iso8601)) } ?? "None"
        let details: JSONText =
            wake.map { wake in
                .object([
                    ("reason", .string(wake.trigger.type.rawValue)), ("rule", .optional(wake.rule)),
                    ("summary", .string(wake.summary)),
                ])
            } ?? .object([])
        topics[stateTopic] =
            JSONText.object([
                ("state", .string(host.state)), ("asleep", .string(host.asleep ? "ON" : "OFF")),
                ("last_wake", lastWake), ("last_wake_details", details),
                ("energy_saved", .decimal(host.savedWattHours / 1000, digits: 3)),
                ("address", .string(host.addresses.first ?? "None")),
                ("addresses", .array(host.addresses.map { .string($0) })),
                (
                    "details",
                    .object([
                        ("mac", .string(host.mac)), ("adopted", .bool(host.adopted)),
                        ("services", .array(host.services.map { .string($0) })),
                    ])
                ),
            ]).bytes
    }
}
