import Foundation
import SleepProxyControl
import SleepProxyTestSupport
import SleepProxyWire
import Testing

/// The link to brokers that are not the plain, friendly one (docs/home-assistant.md §4, §5): Mosquitto over TLS
/// with a private authority, the same with an authority the proxy does not trust, and a port that speaks garbage
/// or nothing at all. Answering for a sleeping host goes on through all of it.
@Suite("Home Assistant through difficult brokers", .lab(.namespaces, .mosquitto, serialized: true))
final class HomeAssistantBrokerLabTests: ThreeHostSuite {
    let setup: ThreeHostLab
    var box: LabHost { self.setup.third }
    let broker: Mosquitto

    init() throws {
        self.setup = try ThreeHostLab(thirdName: "hassbox")
        self.broker = try Mosquitto(
            in: self.setup.third, address: "192.0.2.20", tlsPort: 8883,
            users: ["sleepproxy": "proxy-secret", "viewer": "viewer-secret"], acl: HomeAssistantLabTests.acl)
        try self.broker.start(readyAs: "viewer")
    }

    deinit { self.broker.stop() }

    func startDaemon(_ url: String, extra: [String] = []) throws -> ManagedProcess {
        let file = self.lab.directory.appendingPathComponent("mqtt-password")
        try "proxy-secret\n".write(to: file, atomically: true, encoding: .utf8)
        return try Daemon.start(
            in: self.proxy, stateDirectory: self.state,
            extra: ["--mqtt", url, "--mqtt-user", "sleepproxy", "--mqtt-password-file", file.path] + extra)
    }

    func availability() -> String? {
        let topic = "sleepproxy/\(HomeAssistantLabTests.nodeName)/availability"
        return (try? self.broker.retained(topic, user: "viewer"))?[topic]
    }

    func warnings(containing text: String) -> [String] {
        var warnings: [String] = []
        waitUntil(timeout: 15, interval: 0.3) {
            warnings = Daemon.status(proxy: self.proxy, stateDirectory: self.state)?.warnings ?? []
            return warnings.contains { $0.contains(text) }
        }
        return warnings
    }

    @Test func mqttsWithAPrivateAuthorityAndNotWithoutIt() throws {
        var daemon = try self.startDaemon(
            "mqtts://192.0.2.20:8883", extra: ["--mqtt-ca-file", self.broker.authority.path])
        defer { daemon.stop() }
        #expect(waitUntil(timeout: 15, interval: 0.3) { self.availability() == "online" }, "\(daemon.output)")
        daemon.stop()
        #expect(self.availability() == "offline")

        // The system's authorities do not know the lab's: the certificate is refused, and status says so.
        daemon = try self.startDaemon("mqtts://192.0.2.20:8883")
        let warnings = self.warnings(containing: "certificate")
        #expect(
            warnings.contains { $0.contains("Home Assistant") && $0.contains("not signed by an authority") },
            "\(warnings)")
        #expect(self.availability() == "offline", "connected without trusting the broker")
    }

    /// A port that answers with a web server's error page, and one that accepts and never says a word: the link
    /// gives up on each (a malformed packet; no CONNACK within 10 s) and the proxy answers for the host.
    @Test func garbageAndSilenceChangeNothingAboutAnswering() throws {
        let script = """
            import socket, sys, threading
            server = socket.socket(); server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            server.bind(('192.0.2.20', int(sys.argv[1]))); server.listen(8)
            held = []
            for _ in range(64):
                connection, _ = server.accept()
                if sys.argv[2] == 'garbage':
                    connection.sendall(b'HTTP/1.1 400 Bad Request\\r\\nServer: nginx\\r\\nContent-Type: text/html\\r\\n'
                                       b'Content-Length: 150\\r\\n\\r\\n<html><body>400</body></html>' * 4)
                held.append(connection)
            """
        let garbage = try self.box.spawn(["python3", "-c", script, "1885", "garbage"], logName: "garbage")
        defer { garbage.stop() }
        let silent = try self.box.spawn(["python3", "-c", script, "1886", "silent"], logName: "silent")
        defer { silent.stop() }
        for (port, says) in [(1885, "malformed"), (1886, "no CONNACK")] {
            let daemon = try self.startDaemon("mqtt://192.0.2.20:\(port)")
            defer { daemon.stop() }
            // Registered once; the second daemon restores it from the journal, asleep.
            if port == 1885 {
                let message = SampleRegistration.message(
                    id: 0x4C00, mac: ThreeHostLab.sleeperMAC, host: "sleeper.local.",
                    addresses: [IPAddress("192.0.2.2")!], services: [("Web._http._tcp", 8080)])
                _ = try UDPClient.exchange(
                    in: self.sleeper.host, to: "192.0.2.1", port: 5599, from: "192.0.2.2",
                    payloads: [message.encoded(options: .appleUpdate)])
                try self.sleeper.sleep()
            }
            #expect(
                Daemon.waitForHost("sleeper.local.", in: .asleep, proxy: self.proxy, stateDirectory: self.state)
                    == .asleep, "\(daemon.output)")
            let warnings = self.warnings(containing: says)
            #expect(warnings.contains { $0.contains(says) }, "\(warnings)")
            let answered = try Queriers.dig(in: self.box, server: "192.0.2.1", name: "sleeper.local.", type: "A")
            #expect(answered.contains { $0.data == "192.0.2.2" }, "not answered for the host: \(answered)")
        }
    }
}
