import SleepProxyCore
import SleepProxyWire
import Testing

@testable import SleepProxyHomeAssistant

@Suite("MQTT client state machine")
struct MQTTClientStateMachineTests {
    let connect = MQTTConnect(
        clientID: "sleepproxy-nas", keepAlive: MQTTRules.keepAlive,
        will: .init(topic: "sleepproxy/nas/availability", payload: Array("offline".utf8), qos: 1, retain: true),
        userName: "sleepproxy", password: Array("secret".utf8))
    let filters = [
        MQTTSubscription(filter: "homeassistant/status", qos: 0), .init(filter: "sleepproxy/nas/host/+/wake", qos: 0),
    ]
    let start = Timestamp.seconds(1000)

    func connected() -> MQTTClientStateMachine {
        var client = MQTTClientStateMachine(connect: self.connect, subscriptions: self.filters)
        _ = client.opened(now: self.start)
        _ = client.received(.connectAcknowledgement(sessionPresent: false, returnCode: 0), now: self.start)
        _ = client.received(.subscribeAcknowledgement(packetID: 1, returnCodes: [0, 0]), now: self.start)
        return client
    }

    @Test func connectsWithItsWillThenSubscribes() {
        var client = MQTTClientStateMachine(connect: self.connect, subscriptions: self.filters)
        #expect(client.opened(now: self.start) == [.send(.connect(self.connect))])
        #expect(!client.isConnected)
        let accepted = client.received(.connectAcknowledgement(sessionPresent: false, returnCode: 0), now: self.start)
        #expect(accepted == [.send(.subscribe(packetID: 1, filters: self.filters)), .connected])
        #expect(client.isConnected)
        #expect(
            client.received(.subscribeAcknowledgement(packetID: 1, returnCodes: [0, 0x80]), now: self.start)
                == [.subscriptionRefused("sleepproxy/nas/host/+/wake")])
    }

    @Test func aRefusalClosesWithTheReasonAndTheRetriesBackOff() {
        var client = MQTTClientStateMachine(connect: self.connect, subscriptions: self.filters)
        _ = client.opened(now: self.start)
        #expect(
            client.received(.connectAcknowledgement(sessionPresent: false, returnCode: 4), now: self.start)
                == [.close(.refused(4))])
        #expect(MQTTFailure.refused(4).description.contains("wrong user name or password"))
        var waits: [Duration] = []
        for _ in 0..<8 { waits.append(client.closed(now: self.start)) }
        #expect(waits == [1, 2, 4, 8, 16, 32, 60, 60].map { Duration.seconds($0) })
        // A connection that stayed up a minute starts the backoff over.
        _ = client.opened(now: self.start)
        _ = client.received(.connectAcknowledgement(sessionPresent: false, returnCode: 0), now: self.start)
        #expect(client.closed(now: self.start + MQTTRules.stableConnection) == MQTTRules.firstRetry)
    }

    @Test func pingsWhenIdleAndGivesUpOnASilentBroker() {
        var client = self.connected()
        let half = Duration.seconds(Int64(MQTTRules.keepAlive) / 2)
        #expect(client.tick(now: self.start + half - .seconds(1)).isEmpty)
        #expect(client.tick(now: self.start + half) == [.send(.pingRequest)])
        #expect(client.tick(now: self.start + half + .seconds(1)).isEmpty, "one ping at a time")
        #expect(client.received(.pingResponse, now: self.start + half + .seconds(1)).isEmpty)
        // A publish written counts as traffic: no ping until half a keep-alive after it.
        client.wrote(now: self.start + half + .seconds(5))
        #expect(client.tick(now: self.start + half + half).isEmpty)
        let second = self.start + half + half + .seconds(5)
        #expect(client.tick(now: second) == [.send(.pingRequest)])
        #expect(client.tick(now: second + MQTTRules.responseTimeout).isEmpty, "at the bound: still waiting")
        #expect(
            client.tick(now: second + MQTTRules.responseTimeout + .milliseconds(1)) == [.close(.noAnswer("PINGRESP"))])
    }

    @Test func noAcknowledgementInTimeClosesTheConnection() {
        var client = MQTTClientStateMachine(connect: self.connect, subscriptions: self.filters)
        _ = client.opened(now: self.start)
        #expect(client.tick(now: self.start + MQTTRules.responseTimeout).isEmpty)
        #expect(
            client.tick(now: self.start + MQTTRules.responseTimeout + .milliseconds(1)) == [
                .close(.noAnswer("CONNACK"))
            ])
    }

    @Test func messagesAreDeliveredAndAQoS1OneIsAcknowledged() {
        var client = self.connected()
        let press = MQTTPublish(topic: "sleepproxy/nas/host/025350000002/wake", payload: Array("PRESS".utf8))
        #expect(client.received(.publish(press), now: self.start) == [.deliver(press)])
        var qos1 = press
        qos1.qos = 1
        qos1.packetID = 9
        #expect(
            client.received(.publish(qos1), now: self.start) == [
                .send(.publishAcknowledgement(packetID: 9)), .deliver(qos1),
            ])
    }

    @Test func packetsAServerNeverSendsEndTheConnection() {
        let violations: [MQTTPacket] = [
            .connect(self.connect), .subscribe(packetID: 3, filters: self.filters), .pingRequest, .disconnect,
            .connectAcknowledgement(sessionPresent: false, returnCode: 0), .publishAcknowledgement(packetID: 5),
            .subscribeAcknowledgement(packetID: 77, returnCodes: [0, 0]),
        ]
        for packet in violations {
            var client = self.connected()
            let actions = client.received(packet, now: self.start)
            guard case .close(.protocolViolation) = actions.first else {
                Issue.record("\(packet) gave \(actions)")
                continue
            }
            #expect(!client.isConnected)
        }
        var waiting = MQTTClientStateMachine(connect: self.connect, subscriptions: self.filters)
        _ = waiting.opened(now: self.start)
        let early = waiting.received(.publish(MQTTPublish(topic: "a", payload: [])), now: self.start)
        #expect(early.count == 1 && !waiting.isConnected, "a PUBLISH before CONNACK: \(early)")
        #expect(
            waiting.malformed(WireError(.tooLarge, at: 1, "big")) == [
                .close(.malformed(WireError(.tooLarge, at: 1, "")))
            ])
    }
}
