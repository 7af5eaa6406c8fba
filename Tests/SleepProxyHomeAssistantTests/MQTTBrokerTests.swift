import Testing

@testable import SleepProxyHomeAssistant

@Suite("The mqtt setting")
struct MQTTBrokerTests {
    @Test func urlsAUserWritesAreTaken() throws {
        let cases: [(String, String, Int, Bool)] = [
            ("mqtt://192.0.2.20", "192.0.2.20", 1883, false), ("mqtts://broker.lan", "broker.lan", 8883, true),
            ("mqtt://broker:11883/", "broker", 11883, false),
            ("MQTT://[2001:db8::20]:1884", "2001:db8::20", 1884, false),
            ("mqtts://[fe80::1%eth0]", "fe80::1%eth0", 8883, true),
        ]
        for (text, host, port, tls) in cases {
            let broker = try MQTTBroker(url: text)
            #expect(broker.host == host && broker.port == port && broker.tls == tls, "\(text)")
        }
        #expect(try MQTTBroker(url: "mqtt://[2001:db8::20]").description == "mqtt://[2001:db8::20]:1883")
    }

    @Test func anythingElseIsRefusedWithASentence() {
        for text in [
            "http://broker", "broker:1883", "mqtt://", "mqtt://broker:0", "mqtt://broker:65536", "mqtt://broker:x",
            "mqtt://broker/topic", "mqtt://2001:db8::1", "mqtt://[2001:db8::1", "mqtt://[broker]", "mqtt://bro ker",
        ] {
            #expect(throws: MQTTBroker.ParseError.self, "\(text)") { try MQTTBroker(url: text) }
        }
        do {
            _ = try MQTTBroker(url: "mqtt://user:secret@broker")
            Issue.record("credentials in the URL were taken")
        } catch {
            #expect(error.description.contains("mqtt-password-file"))
        }
    }
}
