import Foundation
import SleepProxyControl
import SleepProxyCore
import SleepProxyTestSupport
import SleepProxyWire
import Testing

/// What a third host hears from the proxy for a sleeping avahi host is, record for record and byte for
/// byte, what it heard from the host while it was awake; and every message the client prints is true.
// Not serialized: each test builds its own lab (anonymous namespaces, avahi with a private /run), and their long
// waits are idle, so they run side by side.
@Suite("Sleep client fidelity in the lab", .lab(.namespaces, .avahi))
final class ClientFidelityLabTests {
    let lab: LabNetwork
    let proxy: LabHost
    let sleeper: SleepingHost
    let querier: LabHost
    let state: URL

    /// Many strings, spaces, UTF-8, "=" inside a value, an empty string, a key without a value: in this order.
    static let trickyTXT = [
        "path=/index.html", "version=1.0", "note=a=b c", "name=Küche ✨", "flag", "spaces here=yes too", "empty=",
    ]

    init() throws {
        self.lab = try LabNetwork()
        self.proxy = try self.lab.addHost(
            "proxy", mac: ThreeHostLab.proxyMAC, ipv4: ["192.0.2.1/24"], ipv6: ["2001:db8::1/64"])
        // A host with several addresses.
        self.sleeper = try SleepingHost(
            lab: self.lab, name: "sleeper", mac: ThreeHostLab.sleeperMAC, ipv4: ["192.0.2.2/24", "192.0.2.12/24"],
            ipv6: ["2001:db8::2/64"])
        self.querier = try self.lab.addHost(
            "querier", mac: MACAddress("02:53:50:00:00:20")!, ipv4: ["192.0.2.20/24"], ipv6: ["2001:db8::20/64"])
        self.state = self.lab.directory.appendingPathComponent("state")
    }

    deinit {
        self.sleeper.close()
        self.lab.close()
    }

    static let client = Daemon.sibling("sleepproxy-client")
    static let ctl = Daemon.sibling("sleepproxyctl")
    var clientState: String { self.lab.directory.appendingPathComponent("client-state").path }
    var common: [String] { ["--interface", "eth0", "--state-directory", self.clientState] }

    static let instances: [DNSName] = ["Tricky Web._http._tcp.local.", "Sleeper Files._smb._tcp.local."]
    static let reverseNames = ["192.0.2.2", "192.0.2.12", "2001:db8::2"].map {
        ReverseMapping.name(for: IPAddress($0)!)
    }

    /// Everything the host's names, services and addresses resolve to, as a multicast querier on the third host
    /// hears it from `responder`: name, type, cache-flush bit, TTL and the RDATA bytes of each record.
    func heard(from responders: Set<IPAddress>) throws -> Set<String> {
        try self.heardWithSources(from: responders).records
    }

    /// The host answers from whichever of its addresses its kernel picks (here the second one), so every one of
    /// them counts as the host.
    static let sleeperAddresses: Set<IPAddress> = [
        IPAddress("192.0.2.2")!, IPAddress("192.0.2.12")!, IPAddress("2001:db8::2")!,
    ]

    func heardWithSources(from responders: Set<IPAddress>) throws -> (records: Set<String>, sources: [String]) {
        let questions =
            [
                DNSQuestion(name: "_http._tcp.local.", type: .ptr), DNSQuestion(name: "_smb._tcp.local.", type: .ptr),
                DNSQuestion(name: "sleeper.local.", type: .any),
            ]
            + Self.instances.map { DNSQuestion(name: $0, type: .any) }
            + Self.reverseNames.map { DNSQuestion(name: $0, type: .ptr) }
        // Asked three times, 1.5 s apart, and everything heard is kept: a responder multicasts a record at most
        // once a second (RFC 6762 §6.2), so a record it had just announced is held back from one round, not from
        // all of them.
        var responses: [RawMDNS.Response] = []
        for _ in 0..<3 {
            responses += try RawMDNS.exchange(
                in: self.querier, packets: [DNSMessage(questions: questions)], to: .v4(.mdnsGroup), sourcePort: 5353,
                listen: .seconds(1.5))
        }
        let names = Set(
            ["sleeper.local.", "_http._tcp.local.", "_smb._tcp.local."].map { DNSName(stringLiteral: $0) }
                + Self.instances + Self.reverseNames)
        var records: Set<String> = []
        for response in responses where responders.contains(response.source) && response.message.flags.isResponse {
            for record in response.message.answers + response.message.additionals
            where names.contains(record.name) && record.type != .nsec {
                if case .ptr(let ptr) = record.rdata, ReverseMapping.address(from: record.name) == nil,
                    !Self.instances.contains(ptr.target)
                {
                    continue
                }
                let hex = record.rdata.uncompressedBytes.map { String(format: "%02x", $0) }.joined()
                records.insert("\(record.name) \(record.type) flush=\(record.cacheFlush) ttl=\(record.ttl) \(hex)")
            }
        }
        return (
            records,
            responses.map {
                "\($0.source):\($0.sourcePort) \($0.message.flags.isResponse ? "response" : "query") \($0.message.answers.count)+\($0.message.additionals.count)"
            }
        )
    }

    @Test func whatTheProxyAnswersForASleepingAvahiHostIsWhatTheHostAnswered() throws {
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state, extra: ["--proxy-name", "Lab Proxy"])
        defer { daemon.stop() }
        let avahi = try AvahiDaemon(in: self.sleeper.host, hostName: "sleeper", directory: self.lab.directory)
        defer { avahi.stop() }
        try avahi.publish(
            name: "Tricky Web", type: "_http._tcp", port: 8080, txt: Self.trickyTXT, logName: "publish-web")
        try avahi.publish(name: "Sleeper Files", type: "_smb._tcp", port: 445, logName: "publish-files")
        let watcher = try AvahiDaemon(in: self.querier, hostName: "querier", directory: self.lab.directory)
        defer { watcher.stop() }
        usleep(Scenario.pastAvahiAnnouncements)

        let (awake, sources) = try self.heardWithSources(from: Self.sleeperAddresses)
        let awakeBrowse = try Queriers.avahiBrowse(watcher, type: "_http._tcp") {
            $0.contains { $0.name == "Tricky Web" }
        }.filter { $0.name == "Tricky Web" }
        #expect(
            awake.contains { $0.hasPrefix("sleeper.local. A ") }
                && awake.contains { $0.hasPrefix("Tricky Web._http._tcp.local. TXT ") }, "\(awake) heard: \(sources)")

        let register = try avahi.run([Self.client, "register"] + self.common)
        #expect(register.succeeded && register.stdout.contains("(2 services)"), "\(register)")
        #expect(register.stderr.contains("Wake-on-LAN"), "register says what it knows of Wake-on-LAN: \(register)")

        _ = try Command.run(["kill", "-STOP", "\(avahi.process.pid)"])
        try self.sleeper.sleep()
        #expect(
            Daemon.waitForHost("sleeper.local.", in: .asleep, proxy: self.proxy, stateDirectory: self.state) == .asleep,
            "\(daemon.output)")
        usleep(Scenario.pastProxyAnnouncements)
        let asleep = try self.heard(from: [IPAddress("192.0.2.1")!])
        #expect(
            asleep == awake,
            "only while awake: \(awake.subtracting(asleep).sorted()); only from the proxy: \(asleep.subtracting(awake).sorted())"
        )
        let asleepBrowse = try Queriers.avahiBrowse(watcher, type: "_http._tcp") {
            $0.contains { $0.name == "Tricky Web" }
        }.filter { $0.name == "Tricky Web" }
        #expect(
            !asleepBrowse.isEmpty && Set(asleepBrowse.map(\.txt)) == Set(awakeBrowse.map(\.txt))
                && Set(asleepBrowse.map(\.port)) == [8080], "awake: \(awakeBrowse); asleep: \(asleepBrowse)")
        _ = try Command.run(["kill", "-CONT", "\(avahi.process.pid)"])
        try self.sleeper.wake()
    }

    @Test func theClientsMessagesTellTheTruth() throws {
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state, extra: ["--proxy-name", "Lab Proxy"])
        defer { daemon.stop() }
        // No mDNS responder on the host: nothing to register, said so, exit status 2 ...
        let empty = try self.sleeper.host.run([Self.client, "register"] + self.common)
        #expect(
            empty.status == 2 && empty.stderr.contains("nothing to register: no mDNS responder answered")
                && !empty.stdout.contains("registered"), "\(empty)")
        let untouched = Daemon.status(proxy: self.proxy, stateDirectory: self.state)
        #expect(
            untouched?.registrationsAccepted == 0 && untouched?.refusals.values.allSatisfy({ $0 == 0 }) == true,
            "a registration went out with nothing in it: \(String(describing: untouched))")
        // ... unless asked for: then the addresses alone, and a registration the proxy accepts.
        let allowed = try self.sleeper.host.run([Self.client, "register", "--allow-empty"] + self.common)
        #expect(allowed.succeeded && allowed.stdout.contains("(0 services)"), "\(allowed)")

        // A non-root user whose state directory it cannot write: the proxy took the registration, and it says so.
        try FileManager.default.createDirectory(atPath: self.clientState, withIntermediateDirectories: true)
        let nobody = try self.sleeper.host.run(
            [
                "setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "--", Self.client, "register",
                "--allow-empty",
            ] + self.common)
        #expect(nobody.succeeded && nobody.stdout.contains("registered"), "\(nobody)")
        #expect(nobody.stderr.contains("the registration was accepted, but it could not be recorded"), "\(nobody)")

        // After `hook post` the registration is reported as handed back, not as held until its lease ends.
        let before = try self.sleeper.host.run([Self.client, "status"] + self.common)
        #expect(before.stdout.contains("held by the proxy until"), "\(before)")
        let post = try self.sleeper.host.run(
            [Self.client, "hook", "post", "suspend"] + self.common, timeout: .seconds(30))
        #expect(post.succeeded, "\(post)")
        let after = try self.sleeper.host.run([Self.client, "status"] + self.common)
        #expect(after.stdout.contains("handed back at") && after.stdout.contains("Owner sequence: 1"), "\(after)")
    }
}
