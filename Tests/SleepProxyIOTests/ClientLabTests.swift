import Foundation
import SleepProxyTestSupport
import SleepProxyWire
import Testing

/// The Linux sleep client end to end (issue 7 §6): a host whose avahi-daemon publishes a service registers it
/// with our proxy through `sleepproxy-client hook pre`, suspends (simulated: avahi-daemon frozen, addresses
/// gone), stays discoverable, is woken by a connection, and hands back on `hook post` without goodbyes.
@Suite("Sleep client in the lab", .serialized, .enabled(if: Command.canBuildNetworks && FileManager.default.isExecutableFile(atPath: "/usr/sbin/avahi-daemon"), "needs root, iproute2, util-linux and avahi-daemon (scripts/test installs them)"))
final class ClientLabTests {
    let lab: LabNetwork
    let proxy: LabHost
    let sleeper: SleepingHost
    let querier: LabHost
    let state: URL

    static let sleeperMAC = MACAddress("02:53:50:00:00:02")!

    init() throws {
        self.lab = try LabNetwork()
        self.proxy = try self.lab.addHost("proxy", mac: MACAddress("02:53:50:00:00:01")!, ipv4: ["192.0.2.1/24"], ipv6: ["2001:db8::1/64"])
        self.sleeper = try SleepingHost(lab: self.lab, name: "sleeper", mac: Self.sleeperMAC, ipv4: ["192.0.2.2/24"], servicePort: 8080)
        self.querier = try self.lab.addHost("querier", mac: MACAddress("02:53:50:00:00:20")!, ipv4: ["192.0.2.20/24"])
        self.state = self.lab.directory.appendingPathComponent("state")
    }

    deinit {
        self.sleeper.close()
        self.lab.close()
    }

    static var client: String { Daemon.executable.deletingLastPathComponent().appendingPathComponent("sleepproxy-client").path }

    @Test func aLinuxHostSleepsStaysVisibleWakesOnAConnectionAndHandsBack() throws {
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state, extra: ["--proxy-name", "Lab Proxy"])
        defer { daemon.stop() }
        let avahi = try AvahiDaemon(in: self.sleeper.host, hostName: "sleeper", directory: self.lab.directory)
        defer { avahi.stop() }
        try avahi.publish(name: "Sleeper Files", type: "_http._tcp", port: 8080, txt: ["path=/files"], logName: "publish")
        let clientState = self.lab.directory.appendingPathComponent("client-state").path
        let common = ["--interface", "eth0", "--host-name", "sleeper", "--state-directory", clientState]
        usleep(3_000_000)  // the proxy's advertisement is probed and announced

        let proxies = try avahi.run([Self.client, "proxies"] + common)
        #expect(proxies.succeeded && proxies.stdout.contains("20-40-10-65.0 Lab Proxy  192.0.2.1:5599"), "\(proxies)")
        let pre = try avahi.run([Self.client, "hook", "pre", "suspend"] + common)
        #expect(pre.succeeded && pre.stdout.contains("registered") && pre.stdout.contains("Lab Proxy"), "\(pre)")
        #expect(pre.stderr.contains("Wake-on-LAN"), "the WoL state of a veth cannot be read; the hook says so: \(pre)")
        #expect(daemon.waitForOutput("registered sleeper.local."), "\(daemon.output)")
        #expect(daemon.output.contains("_http._tcp:8080"), "avahi's published service was not registered: \(daemon.output)")
        let status = try avahi.run([Self.client, "status"] + common)
        #expect(status.stdout.contains("Owner sequence: 0") && status.stdout.contains("Lab Proxy"), "\(status)")

        // Suspend: processes freeze, the NIC keeps only Wake-on-LAN.
        _ = try Command.run(["kill", "-STOP", "\(avahi.process.pid)"])
        try self.sleeper.sleep()
        usleep(5_000_000)  // the takeover
        let found = try Queriers.zeroconf(in: self.querier, type: "_http._tcp.local.")
        let files = try #require(found.first { $0.name == "Sleeper Files" }, "not discoverable while asleep: \(found)")
        #expect(files.host == "sleeper.local." && files.port == 8080 && files.addresses.contains("192.0.2.2") && files.txt == ["path=/files"], "\(files)")

        // A connection wakes it.
        let connect = try self.querier.spawn(["/usr/bin/python3", "-c", "import socket; s=socket.create_connection(('192.0.2.2', 8080), 8); print('connected', s.recv(16).decode().strip(), flush=True)"], logName: "connect")
        defer { connect.stop() }
        #expect(!self.sleeper.waitForMagicPackets(1, timeout: 5).isEmpty, "no magic packet")
        try self.sleeper.wake()
        _ = try Command.run(["kill", "-CONT", "\(avahi.process.pid)"])
        #expect(connect.waitForOutput("connected awake", timeout: 8), "\(connect.output)")

        // Resume: a new Owner sequence; the proxy drops the records at once and says no goodbye.
        let listener = try self.querier.spawn(["/usr/bin/python3", "-c", RawGoodbyeWatch.script], logName: "goodbyes")
        defer { listener.stop() }
        usleep(300_000)
        let post = try avahi.run([Self.client, "hook", "post", "suspend"] + common)
        #expect(post.succeeded && post.stdout.contains("Owner sequence 1"), "\(post)")
        #expect(daemon.waitForOutput("hand-back: sleeper.local.", timeout: 5), "\(daemon.output)")
        usleep(3_000_000)
        #expect(!listener.output.contains("goodbye from 192.0.2.1"), "the proxy sent goodbyes after the hand-back: \(listener.output)")
        #expect(try avahi.run([Self.client, "status"] + common).stdout.contains("Owner sequence: 1"))
    }
}

/// Listens on 224.0.0.251:5353 and prints "goodbye from ADDRESS" for every response with a TTL-0 record.
enum RawGoodbyeWatch {
    static let script = """
        import socket, struct, time
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        s.bind(('', 5353))
        s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, socket.inet_aton('224.0.0.251') + socket.inet_aton('0.0.0.0'))
        s.settimeout(0.5)
        end = time.time() + 10
        print('listening', flush=True)
        while time.time() < end:
            try:
                data, (address, port) = s.recvfrom(9000)
            except socket.timeout:
                continue
            if len(data) < 12 or not data[2] & 0x80:
                continue
            # Crude scan: a TTL of zero right after a class field, as goodbyes carry.
            if b'\\x00\\x00\\x00\\x00\\x00' in data[12:]:
                print('goodbye from', address, flush=True)
        """
}
