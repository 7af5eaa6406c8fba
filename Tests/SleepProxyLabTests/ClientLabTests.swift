import Foundation
import SleepProxyTestSupport
import SleepProxyWire
import Testing

/// The Linux sleep client end to end: a host whose avahi-daemon publishes a service registers it
/// with our proxy through `sleepproxy-client hook pre`, suspends (simulated: avahi-daemon frozen, addresses
/// gone), stays discoverable, is woken by a connection, and hands back on `hook post` without goodbyes.
@Suite("Sleep client in the lab", .lab(.namespaces, .avahi, serialized: true))
final class ClientLabTests: ThreeHostSuite {
    let setup: ThreeHostLab
    var querier: LabHost { self.setup.third }

    static let sleeperMAC = ThreeHostLab.sleeperMAC

    init() throws {
        self.setup = try ThreeHostLab(thirdName: "querier")
    }

    static var client: String {
        Daemon.executable.deletingLastPathComponent().appendingPathComponent("sleepproxy-client").path
    }

    @Test func aLinuxHostSleepsStaysVisibleWakesOnAConnectionAndHandsBack() throws {
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state, extra: ["--proxy-name", "Lab Proxy"])
        defer { daemon.stop() }
        let avahi = try AvahiDaemon(in: self.sleeper.host, hostName: "sleeper", directory: self.lab.directory)
        defer { avahi.stop() }
        try avahi.publish(
            name: "Sleeper Files", type: "_http._tcp", port: 8080, txt: ["path=/files"], logName: "publish")
        let clientState = self.lab.directory.appendingPathComponent("client-state").path
        let common = ["--interface", "eth0", "--host-name", "sleeper", "--state-directory", clientState]
        // The proxy's advertisement is probed and announced a few seconds after it starts: asked until it is
        // there (bounded), not after a fixed wait.
        var proxies = try avahi.run([Self.client, "proxies"] + common)
        for _ in 0..<4 where !proxies.succeeded { proxies = try avahi.run([Self.client, "proxies"] + common) }
        #expect(proxies.succeeded && proxies.stdout.contains("20-40-10-65.0 Lab Proxy  192.0.2.1:5599"), "\(proxies)")
        let pre = try avahi.run([Self.client, "hook", "pre", "suspend"] + common)
        #expect(pre.succeeded && pre.stdout.contains("registered") && pre.stdout.contains("Lab Proxy"), "\(pre)")
        #expect(pre.stderr.contains("Wake-on-LAN"), "the WoL state of a veth cannot be read; the hook says so: \(pre)")
        #expect(
            Daemon.waitForHosts(proxy: self.proxy, stateDirectory: self.state) {
                $0["sleeper.local."]?.services.contains("_http._tcp:8080") == true
            }, "avahi's published service was not registered: \(daemon.output)")
        let status = try avahi.run([Self.client, "status"] + common)
        #expect(status.stdout.contains("Owner sequence: 0") && status.stdout.contains("Lab Proxy"), "\(status)")

        // Suspend: processes freeze, the NIC keeps only Wake-on-LAN.
        _ = try Command.run(["kill", "-STOP", "\(avahi.process.pid)"])
        try self.sleeper.sleep()
        #expect(
            Daemon.waitForHost("sleeper.local.", in: .asleep, proxy: self.proxy, stateDirectory: self.state) == .asleep)
        let found = try Queriers.zeroconf(in: self.querier, type: "_http._tcp.local.")
        let files = try #require(found.first { $0.name == "Sleeper Files" }, "not discoverable while asleep: \(found)")
        #expect(
            files.host == "sleeper.local." && files.port == 8080 && files.addresses.contains("192.0.2.2")
                && files.txt == ["path=/files"], "\(files)")

        // A connection wakes it.
        let connect = try self.querier.spawn(
            [
                "/usr/bin/python3", "-c",
                "import socket; s=socket.create_connection(('192.0.2.2', 8080), 20); print('connected', s.recv(16).decode().strip(), flush=True)",
            ], logName: "connect")
        defer { connect.stop() }
        // Bounds with room for a loaded machine (two test runs at once, a package build beside): the wake itself
        // comes at the first SYN, the querier having resolved the host.
        #expect(!self.sleeper.waitForMagicPackets(1, timeout: 15).isEmpty, "no magic packet")
        try self.sleeper.wake()
        _ = try Command.run(["kill", "-CONT", "\(avahi.process.pid)"])
        #expect(connect.waitForOutput("connected awake", timeout: 20), "\(connect.output)")

        // Resume with the network slow to come back (the address returns 1.5 s after the hook starts, as after a
        // DHCP renewal): the hook waits for it, then announces the new Owner sequence; the proxy drops the records
        // at once and says no goodbye. A raw mDNS listener on the third host (our codec, every record's TTL) hears
        // the link while the hook runs and after.
        let heard = ListenerResult()
        let querier = self.querier
        let bound = DispatchSemaphore(value: 0)
        let listening = Thread {
            heard.set(
                Result {
                    try RawMDNS.exchange(
                        in: querier, packets: [], to: .v4(.mdnsGroup), sourcePort: 5353, listen: .seconds(10),
                        ready: { bound.signal() })
                })
        }
        listening.start()
        #expect(bound.wait(timeout: .now() + 5) == .success, "the mDNS listener did not start")
        try self.sleeper.sleep()
        let post = try self.sleeper.host.spawn(
            [
                "nsenter", "-t", "\(avahi.process.pid)", "-m", "--", "setpriv", "--pdeathsig", "KILL", "--",
                Self.client, "hook", "post", "suspend",
            ] + common, logName: "hook-post")
        defer { post.stop() }
        usleep(Scenario.addressReturns)
        // The hand-back itself may already have happened: once avahi-daemon ran again after the wake above, its own
        // mDNS told the proxy the host was up (docs/coexistence.md). What matters here is that the hook waits for
        // the address and announces the new Owner sequence, which the listener checks below.
        try self.sleeper.wake()
        #expect(
            post.waitForOutput("announced the wake (Owner sequence 1) with 6 probes", timeout: 15), "\(post.output)")
        #expect(
            Daemon.waitForHosts(proxy: self.proxy, stateDirectory: self.state, timeout: 5) {
                $0["sleeper.local."] == nil
            },
            "not handed back: \(daemon.output)")
        let responses = try heard.wait()
        // The hook's probes were heard, all six (so the listener works) ...
        #expect(
            responses.filter {
                $0.source == .v4(IPv4Address(192, 0, 2, 2)) && $0.message.ednsOptions?.owner?.sequence == 1
            }.count == 6,
            "the wake announcement was not on the wire; heard: \(responses.map { "\($0.source) \($0.message.questions.map(\.name)) owner \($0.message.ednsOptions?.owner.map { String($0.sequence) } ?? "-")" })"
        )
        // ... and nothing from the proxy withdrew the sleeper's records.
        let goodbyes = responses.filter { $0.source == .v4(IPv4Address(192, 0, 2, 1)) }.flatMap(\.message.answers)
            .filter { $0.ttl == 0 }
        #expect(goodbyes.isEmpty, "the proxy sent goodbyes after the hand-back: \(goodbyes)")
        #expect(try avahi.run([Self.client, "status"] + common).stdout.contains("Owner sequence: 1"))
    }
}

/// The result of a listener running on another thread.
final class ListenerResult: @unchecked Sendable {
    // @unchecked: `value` is guarded by `condition`.
    private let condition = NSCondition()
    private var value: Result<[RawMDNS.Response], Error>?

    func set(_ result: Result<[RawMDNS.Response], Error>) {
        self.condition.lock()
        self.value = result
        self.condition.signal()
        self.condition.unlock()
    }

    /// Waits (bounded: the listener's own listen time plus a margin) for the result.
    func wait(timeout: TimeInterval = 15) throws -> [RawMDNS.Response] {
        self.condition.lock()
        defer { self.condition.unlock() }
        let deadline = Date(timeIntervalSinceNow: timeout)
        while self.value == nil, self.condition.wait(until: deadline) {}
        guard let value = self.value else { throw CommandError("the mDNS listener did not finish") }
        return try value.get()
    }
}
