import FoundationEssentials
import SleepProxyControl
import SleepProxyWire

/// Bounds of what the proxy shows Home Assistant.
public enum HomeAssistantRules {
    /// The most hosts shown as devices of their own: a home has tens of machines, and each host is five retained
    /// configurations of about 700 bytes that Home Assistant keeps as entities. A proxy holding more shows the
    /// held hosts first, then the adopted, then those handed back, and counts every host on its own device.
    public static let maximumHosts = 128
    /// What the button publishes and what presses it (Home Assistant's default `payload_press`).
    public static let press = "PRESS"
    /// What Home Assistant publishes on `<prefix>/status` when it starts: every configuration is published
    /// again then, so entities come back after Home Assistant restarts without a retained copy.
    public static let birth = "online"
}

/// Where the proxy publishes and what it calls itself (docs/home-assistant.md).
public struct HomeAssistantSettings: Hashable, Sendable {
    /// The discovery prefix Home Assistant listens on (`homeassistant` unless changed there).
    public var discoveryPrefix: String
    /// This proxy among others on the same broker: its host name in topic-safe letters.
    public var nodeID: String
    /// Publish a wake button per host, and act on its presses.
    public var allowWake: Bool
    /// The proxy's device name (`Sleep proxy nas`) and software version.
    public var deviceName: String
    public var version: String

    public init(discoveryPrefix: String, node: String, allowWake: Bool, deviceName: String, version: String) {
        self.discoveryPrefix = discoveryPrefix
        self.nodeID = Self.topicSafe(node)
        self.allowWake = allowWake
        self.deviceName = deviceName
        self.version = version
    }

    /// Letters, digits, `_` and `-` (Home Assistant's rule for node and object ids), lower case, at most 64.
    public static func topicSafe(_ text: String) -> String {
        let safe = text.lowercased().unicodeScalars.map { scalar -> Character in
            ("a"..."z").contains(scalar) || ("0"..."9").contains(scalar) || scalar == "-" ? Character(scalar) : "_"
        }
        let result = String(safe.prefix(64))
        return result.isEmpty ? "proxy" : result
    }

    /// Every topic of ours outside the discovery prefix starts here.
    public var baseTopic: String { "sleepproxy/\(self.nodeID)" }
    /// `online` while the daemon runs, `offline` from its last will or its clean stop.
    public var availabilityTopic: String { "\(self.baseTopic)/availability" }
    var proxyStateTopic: String { "\(self.baseTopic)/state" }
    /// The discovery node id: every entity of this proxy's, its hosts' too, is under it, so that one
    /// subscription finds every configuration a previous run left retained.
    var discoveryNode: String { "sleepproxy_\(self.nodeID)" }
    public var homeAssistantStatusTopic: String { "\(self.discoveryPrefix)/status" }

    func hostTopic(_ mac: String, _ leaf: String) -> String { "\(self.baseTopic)/host/\(mac)/\(leaf)" }
    func configTopic(_ component: String, _ object: String) -> String {
        "\(self.discoveryPrefix)/\(component)/\(self.discoveryNode)/\(object)/config"
    }
}

/// What Home Assistant sees of the proxy, as retained MQTT messages: a device for the proxy, one per host linked
/// to it, and the state topics their entities read (Home Assistant's MQTT discovery; docs/home-assistant.md).
/// Pure: built from what `sleepproxyctl status`, `hosts` and `adopted` answer.
public struct HomeAssistantDiscovery: Sendable {
    public let settings: HomeAssistantSettings

    public init(settings: HomeAssistantSettings) { self.settings = settings }

    /// The subscriptions: Home Assistant's birth message, our own retained configurations and host states (so
    /// that those a previous run left for hosts since forgotten are cleared), and the buttons' topics, also
    /// without `mqtt-allow-wake`: a press is then counted as ignored, so `status` shows that someone pressed.
    public var subscriptions: [MQTTSubscription] {
        [
            self.settings.homeAssistantStatusTopic,
            "\(self.settings.discoveryPrefix)/+/\(self.settings.discoveryNode)/+/config",
            "\(self.settings.baseTopic)/host/+/state", "\(self.settings.baseTopic)/host/+/wake",
        ].map { MQTTSubscription(filter: $0, qos: 0) }
    }

    /// Whether a message is ours to keep tidy (see `subscriptions`).
    public func isOwnRetained(_ topic: String) -> Bool {
        let parts = topic.split(separator: "/", omittingEmptySubsequences: false)
        if parts.count == 5, parts[0] == self.settings.discoveryPrefix, parts[2] == self.settings.discoveryNode,
            parts[4] == "config"
        {
            return true
        }
        return parts.count == 5 && topic.hasPrefix(self.settings.baseTopic + "/host/") && parts[4] == "state"
    }

    /// The host a button press is for (its MAC as `sleepproxyctl wake` takes it), or nil for anything else. A
    /// retained press is no press: the broker replays it to every new subscriber (MQTT §3.3.1.3), and a wake
    /// must come from a person pressing now.
    public func wakeTarget(of message: MQTTPublish) -> String? {
        guard self.settings.allowWake, !message.retain, message.payload == Array(HomeAssistantRules.press.utf8)
        else { return nil }
        return self.buttonHost(of: message.topic)
    }

    /// The host whose button topic this is, whatever was published on it.
    public func buttonHost(of topic: String) -> String? {
        let parts = topic.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 5, topic.hasPrefix(self.settings.baseTopic + "/host/"), parts[4] == "wake",
            let mac = MACAddress(hexDigits: String(parts[3]))
        else { return nil }
        return mac.description
    }

    /// Every retained message the proxy wants the broker to hold now.
    public func topics(for view: HomeAssistantView) -> [String: [UInt8]] {
        var topics: [String: [UInt8]] = [:]
        self.addProxy(view, into: &topics)
        for host in view.shownHosts(limit: HomeAssistantRules.maximumHosts) { self.add(host, into: &topics) }
        return topics
    }

    var availability: JSONText {
        .array([
            .object([
                ("topic", .string(self.settings.availabilityTopic)), ("payload_available", "online"),
                ("payload_not_available", "offline"),
            ])
        ])
    }

    var proxyDevice: JSONText {
        .object([
            ("identifiers", .array([.string(self.settings.discoveryNode)])),
            ("name", .string(self.settings.deviceName)),
            ("manufacturer", "sleep-proxy"), ("model", "Bonjour Sleep Proxy"),
            ("sw_version", .string(self.settings.version)),
        ])
    }

    /// One entity's configuration: what every entity has, then its own fields.
    func config(object: String, name: String, stateTopic: String?, _ fields: [(String, JSONText)]) -> [UInt8] {
        var members: [(String, JSONText)] = [
            ("name", .string(name)), ("unique_id", .string("\(self.settings.discoveryNode)_\(object)")),
            ("object_id", .string("\(self.settings.discoveryNode)_\(object)")),
            ("availability", self.availability),
        ]
        if let stateTopic { members.append(("state_topic", .string(stateTopic))) }
        return JSONText.object(members + fields).bytes
    }
}

extension MACAddress {
    /// Twelve ASCII hex digits (a topic's host part), with or without case; anything else is nil.
    init?(hexDigits text: String) {
        let digits = Array(text.utf8)
        guard digits.count == 12 else { return nil }
        var bytes: [UInt8] = []
        for pair in stride(from: 0, to: 12, by: 2) {
            guard let high = Self.hexValue(digits[pair]), let low = Self.hexValue(digits[pair + 1]) else { return nil }
            bytes.append(high << 4 | low)
        }
        self.init(bytes: bytes)
    }

    private static func hexValue(_ digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): digit - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
