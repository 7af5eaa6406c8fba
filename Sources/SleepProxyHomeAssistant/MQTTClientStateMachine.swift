import SleepProxyCore
import SleepProxyWire

/// Times and bounds of the MQTT link, each with where it comes from.
public enum MQTTRules {
    /// The keep-alive we ask for (§3.1.2.10): a broker that hears nothing for one and a half of it drops us and
    /// publishes our last will. Home Assistant's own client asks 60 s; ours is half that, so a proxy that died
    /// with its machine shows unavailable within 45 s.
    public static let keepAlive: UInt16 = 30
    /// How long a CONNACK, SUBACK or PINGRESP may take before the connection is taken as dead: a broker on the
    /// same LAN answers in milliseconds; 10 s covers a Raspberry Pi broker swapping.
    public static let responseTimeout: Duration = .seconds(10)
    /// The pause before the first reconnection, doubled after each failed one up to `longestRetry`: a broker
    /// that restarts is back within seconds, one that is down for good is not hammered.
    public static let firstRetry: Duration = .seconds(1)
    public static let longestRetry: Duration = .seconds(60)
    /// A connection that stayed up this long starts the backoff over.
    public static let stableConnection: Duration = .seconds(60)
}

/// Why an MQTT connection ended or could not start, in words for the log.
public enum MQTTFailure: Error, Hashable, Sendable, CustomStringConvertible {
    /// CONNACK's return code (§3.2.2.3): 4 is a wrong user name or password, 5 not authorised.
    case refused(UInt8)
    /// The broker broke the protocol (a packet a server never sends, an answer to nothing).
    case protocolViolation(String)
    /// The broker sent bytes that are not MQTT.
    case malformed(WireError)
    /// No answer within `MQTTRules.responseTimeout`.
    case noAnswer(String)

    public var description: String {
        switch self {
        case .refused(let code):
            let reasons = [
                1: "it does not speak MQTT 3.1.1", 2: "it refused our client identifier",
                3: "it says it is unavailable", 4: "wrong user name or password (mqtt-user, mqtt-password-file)",
                // Mosquitto answers a wrong password with 5, not 4.
                5: "not authorised: check mqtt-user, the password in mqtt-password-file and the broker's users",
            ]
            return "the broker refused the connection (code \(code): \(reasons[Int(code)] ?? "unknown reason"))"
        case .protocolViolation(let what): return "the broker broke MQTT: \(what)"
        case .malformed(let error): return "the broker sent a malformed packet: \(error)"
        case .noAnswer(let what): return "no \(what) from the broker within \(MQTTRules.responseTimeout)"
        }
    }
}

/// The client side of one MQTT 3.1.1 connection at a time, and the pauses between them: CONNECT with a last
/// will, SUBSCRIBE once accepted, keep-alive pings, and what every packet from the broker means. Pure: the
/// connection handler feeds it packets and time and carries out its actions (docs/home-assistant.md §5).
public struct MQTTClientStateMachine: Sendable {
    public enum Action: Hashable, Sendable {
        case send(MQTTPacket)
        /// End the connection (without DISCONNECT: the broker should publish the will only when we vanish, and
        /// a protocol failure is not a clean stop, but the will says `offline` either way).
        case close(MQTTFailure)
        /// The broker accepted us and our subscriptions are asked for: publish everything retained again.
        case connected
        /// A subscription the broker refused (its ACL), by filter.
        case subscriptionRefused(String)
        /// A message on one of our subscriptions.
        case deliver(MQTTPublish)
    }

    enum Phase: Hashable, Sendable {
        case closed
        case waitingForAcknowledgement(since: Timestamp)
        case connected
    }

    public let connect: MQTTConnect
    public let subscriptions: [MQTTSubscription]
    private(set) var phase = Phase.closed
    private var openedAt: Timestamp?
    private var lastSent: Timestamp?
    /// When a SUBACK or PINGRESP became due, and for which packet identifier (0 for a ping).
    private var awaiting: [UInt16: Timestamp] = [:]
    private var nextPacketID: UInt16 = 1
    private var retry = MQTTRules.firstRetry

    public init(connect: MQTTConnect, subscriptions: [MQTTSubscription]) {
        self.connect = connect
        self.subscriptions = subscriptions
    }

    public var isConnected: Bool { self.phase == .connected }

    /// The TCP (or TLS) connection is open: say who we are.
    public mutating func opened(now: Timestamp) -> [Action] {
        self.phase = .waitingForAcknowledgement(since: now)
        self.openedAt = now
        self.awaiting = [:]
        self.lastSent = now
        return [.send(.connect(self.connect))]
    }

    /// A packet from the broker.
    public mutating func received(_ packet: MQTTPacket, now: Timestamp) -> [Action] {
        switch (self.phase, packet) {
        case (.waitingForAcknowledgement, .connectAcknowledgement(_, let code)):
            guard code == 0 else { return self.fail(.refused(code)) }
            self.phase = .connected
            var actions: [Action] = [.connected]
            if !self.subscriptions.isEmpty {
                let id = self.takePacketID()
                self.awaiting[id] = now
                actions.insert(.send(.subscribe(packetID: id, filters: self.subscriptions)), at: 0)
                self.lastSent = now
            }
            return actions
        case (.connected, .subscribeAcknowledgement(let id, let codes)):
            guard self.awaiting.removeValue(forKey: id) != nil, id != 0, codes.count == self.subscriptions.count
            else { return self.fail(.protocolViolation("a SUBACK for nothing we asked")) }
            return zip(self.subscriptions, codes).compactMap { $1 == 0x80 ? .subscriptionRefused($0.filter) : nil }
        case (.connected, .pingResponse):
            self.awaiting[0] = nil
            return []
        case (.connected, .publish(let message)):
            // §3.3.4: a QoS 1 message is acknowledged; we subscribe at QoS 0, so only a broker that ignores
            // that sends one, and it still gets its PUBACK.
            var actions: [Action] = []
            if message.qos == 1, let id = message.packetID {
                actions.append(.send(.publishAcknowledgement(packetID: id)))
                self.lastSent = now
            }
            actions.append(.deliver(message))
            return actions
        case (.closed, _):
            return []
        default:
            return self.fail(.protocolViolation("an unexpected \(Self.name(of: packet))"))
        }
    }

    /// Bytes that are not MQTT ended the connection's usefulness.
    public mutating func malformed(_ error: WireError) -> [Action] { self.fail(.malformed(error)) }

    /// Keep-alive and answers that are due; call it at least every second while connected.
    public mutating func tick(now: Timestamp) -> [Action] {
        switch self.phase {
        case .closed:
            return []
        case .waitingForAcknowledgement(let since):
            return now - since > MQTTRules.responseTimeout ? self.fail(.noAnswer("CONNACK")) : []
        case .connected:
            if let oldest = self.awaiting.values.min(), now - oldest > MQTTRules.responseTimeout {
                return self.fail(.noAnswer(self.awaiting[0] == oldest ? "PINGRESP" : "SUBACK"))
            }
            // §3.1.2.10: a client with nothing to send pings within the keep-alive; at half of it, so a broker
            // that is slow to read never sees us silent for the whole of it.
            if self.awaiting[0] == nil, let lastSent = self.lastSent,
                now - lastSent >= .seconds(Int64(MQTTRules.keepAlive) / 2)
            {
                self.awaiting[0] = now
                self.lastSent = now
                return [.send(.pingRequest)]
            }
            return []
        }
    }

    /// Something was written (a publish): the keep-alive counts from it.
    public mutating func wrote(now: Timestamp) { self.lastSent = now }

    /// The connection ended; returns how long to wait before the next attempt.
    public mutating func closed(now: Timestamp) -> Duration {
        let wasConnected = self.phase == .connected
        self.phase = .closed
        self.awaiting = [:]
        if wasConnected, let openedAt, now - openedAt >= MQTTRules.stableConnection {
            self.retry = MQTTRules.firstRetry
        }
        let wait = self.retry
        self.retry = min(self.retry * 2, MQTTRules.longestRetry)
        return wait
    }

    private mutating func fail(_ failure: MQTTFailure) -> [Action] {
        self.phase = .closed
        self.awaiting = [:]
        return [.close(failure)]
    }

    private mutating func takePacketID() -> UInt16 {
        defer { self.nextPacketID = self.nextPacketID == .max ? 1 : self.nextPacketID + 1 }
        return self.nextPacketID
    }

    static func name(of packet: MQTTPacket) -> String {
        switch packet {
        case .connect: "CONNECT"
        case .connectAcknowledgement: "CONNACK"
        case .publish: "PUBLISH"
        case .publishAcknowledgement: "PUBACK"
        case .subscribe: "SUBSCRIBE"
        case .subscribeAcknowledgement: "SUBACK"
        case .pingRequest: "PINGREQ"
        case .pingResponse: "PINGRESP"
        case .disconnect: "DISCONNECT"
        }
    }
}
