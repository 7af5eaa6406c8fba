import Foundation
import NIOCore
import SleepProxyControl
import SleepProxyCore
import SleepProxyIO
import SleepProxyTestSupport
import SleepProxyWire
import Testing

/// Two of our proxies on one link, a sleeping host registered with both (docs/coexistence.md, "Other sleep
/// proxies"). Before, each took the other's claim for a conflict and woke the host: 74 magic packets in a minute,
/// and neither answered ARP for it. Now: no magic packet, exactly one MAC answers for the host, and when that
/// proxy stops the other takes the host over without waking it, and wakes it for a real connection.
/// Each test builds a lab of its own, so they run side by side.
@Suite("Two sleep proxies on one link", .lab(.namespaces))
final class PeerProxiesLabTests: ThreeHostSuite {
    static let secondMAC = MACAddress("02:53:50:00:00:03")!

    let setup: ThreeHostLab
    /// The lab's proxy is the first of the two.
    var first: LabHost { self.setup.proxy }
    var firstState: URL { self.setup.state }
    var client: LabHost { self.setup.third }
    let second: LabHost
    let secondState: URL

    init() throws {
        let setup = try ThreeHostLab(thirdName: "client")
        self.setup = setup
        self.second = try setup.lab.addHost(
            "second", mac: Self.secondMAC, ipv4: ["192.0.2.3/24"], ipv6: ["2001:db8::3/64"])
        self.secondState = setup.lab.directory.appendingPathComponent("second-state")
    }

    func register(with proxy: String) throws {
        let message = SampleRegistration.message(
            id: 0x7300, mac: ThreeHostLab.sleeperMAC, host: "sleeper.local.",
            addresses: [IPAddress("192.0.2.2")!, IPAddress("2001:db8::2")!], services: [("Web._http._tcp", 8080)])
        let replies = try UDPClient.exchange(
            in: self.sleeper.host, to: proxy, port: 5599, from: "192.0.2.2",
            payloads: [message.encoded(options: .appleUpdate)])
        #expect(replies.first??.prefix(2) == [0x73, 0x00], "\(proxy) did not accept the registration")
    }

    /// Asks for TARGET by ARP every 100 ms for SECONDS from a raw socket on IFACE, and prints the longest time
    /// between two answers (any MAC) once done: what a client looking for the host meets.
    static let arpAsker = """
        import socket, struct, sys, time
        iface, mac, ip, target, seconds = sys.argv[1:6]
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0806))
        s.bind((iface, 0))
        s.settimeout(0.01)
        own, tip = bytes.fromhex(mac.replace(':', '')), socket.inet_aton(target)
        frame = (b'\\xff' * 6 + own + b'\\x08\\x06' + struct.pack('!HHBBH', 1, 0x0800, 6, 4, 1) + own
                 + socket.inet_aton(ip) + b'\\x00' * 6 + tip)
        print('asking', flush=True)
        end, due, answers = time.time() + float(seconds), 0.0, []
        while time.time() < end:
            if time.time() >= due:
                s.send(frame)
                due = time.time() + 0.1
            try:
                data = s.recv(64)
            except socket.timeout:
                continue
            if data[12:14] == b'\\x08\\x06' and data[20:22] == b'\\x00\\x02' and data[28:32] == tip:
                answers.append(time.time())
        gaps = [b - a for a, b in zip(answers, answers[1:])]
        print('answers %d longest-gap %.2f' % (len(answers), max(gaps or [99.0])), flush=True)
        """

    /// The MACs that answer an ARP request for the sleeper's address from the client, within a second.
    func arpAnswerers() throws -> Set<MACAddress> {
        let capture = try FrameCapture(in: self.client.namespace)
        defer { capture.stop() }
        try self.client.namespace.sendFrame(
            TestFrames.arpRequest(
                from: self.client.mac, senderIP: IPv4Address(192, 0, 2, 20), for: IPv4Address(192, 0, 2, 2)))
        usleep(1_000_000)  // scenario timing: a second for every proxy that would answer to do so
        var answerers: Set<MACAddress> = []
        for frame in capture.captured where frame.packetType != 4 {
            guard let ethernet = try? EthernetFrame(decoding: ByteBuffer(bytes: frame.bytes)),
                ethernet.etherType == .arp, let arp = try? ARPPacket(decoding: ethernet.payload),
                arp.operation == .reply, arp.senderIP == IPv4Address(192, 0, 2, 2)
            else { continue }
            answerers.insert(arp.senderMAC)
        }
        return answerers
    }

    /// Which of the two ends up active depends on who claimed first (a proxy that already answers keeps the host;
    /// the better metric decides only between two that both answer, as the unit tests show); either way exactly
    /// one answers and nothing wakes the host.
    /// `sleepproxyctl release-all --transfer` on the first proxy, once it has heard the second's advertisement
    /// (whose SRV names the registration port the hosts are offered on).
    func leaveWithTransfer() throws -> CommandResult {
        waitUntil(timeout: 10, interval: 0.2) {
            (Daemon.status(proxy: self.first, stateDirectory: self.firstState)?.otherProxies ?? []).contains {
                $0.address == "192.0.2.3"
            }
        }
        let socket = self.firstState.appendingPathComponent("control.sock").path
        return try self.first.run(
            [Daemon.sibling("sleepproxyctl"), "release-all", "--transfer", "--yes", "--socket", socket],
            timeout: .seconds(30))
    }

    /// The MACs that answer a neighbour solicitation for the sleeper's IPv6 address from the client, within a
    /// second.
    func ndAnswerers() throws -> Set<MACAddress> {
        let capture = try FrameCapture(in: self.client.namespace)
        defer { capture.stop() }
        guard case .v6(let target) = IPAddress("2001:db8::2")!, case .v6(let source) = IPAddress("2001:db8::20")! else {
            return []
        }
        try self.client.namespace.sendFrame(
            TestFrames.neighbourSolicitation(from: self.client.mac, source: source, for: target))
        usleep(1_000_000)  // scenario timing: a second for every proxy that would answer to do so
        var answerers: Set<MACAddress> = []
        for frame in capture.captured where frame.packetType != 4 {
            guard let ethernet = try? EthernetFrame(decoding: ByteBuffer(bytes: frame.bytes)),
                ethernet.etherType == .ipv6, let packet = try? IPv6Packet(decoding: ethernet.payload),
                let message = try? NeighborDiscoveryMessage(decoding: packet), message.kind == .advertisement,
                message.target == target
            else { continue }
            answerers.insert(message.targetLinkLayerAddress ?? ethernet.source)
        }
        return answerers
    }

    /// The second proxy as both tests start it: the fallback metrics, so the first advertises the better one.
    func startSecond(logName: String = "second") throws -> ManagedProcess {
        try Daemon.start(
            in: self.second, stateDirectory: self.secondState, logName: logName,
            extra: ["--metrics", "fallback", "--proxy-name", "second"])
    }

    /// Waits (at most 30 s) until one proxy answers for the sleeper and the other stands by; the two states, first
    /// proxy's first.
    func settledStates() -> (PresenceState?, PresenceState?) {
        var states: (PresenceState?, PresenceState?) = (nil, nil)
        waitUntil(timeout: 30, interval: 0.2) {
            states = (
                Daemon.hosts(proxy: self.first, stateDirectory: self.firstState)["sleeper.local."]?.state,
                Daemon.hosts(proxy: self.second, stateDirectory: self.secondState)["sleeper.local."]?.state
            )
            return states == (.asleep, .standby) || states == (.standby, .asleep)
        }
        return states
    }

    @Test func oneProxyAnswersTheOtherStandsByAndTakesOverWithoutAWake() throws {
        // The first advertises the better metric (20-40-10, the default); the second the fallback preset (80-40-60).
        let firstDaemon = try Daemon.start(in: self.first, stateDirectory: self.firstState, logName: "first")
        defer { firstDaemon.stop() }
        let secondDaemon = try self.startSecond()
        defer { secondDaemon.stop() }
        try self.register(with: "192.0.2.1")
        try self.register(with: "192.0.2.3")
        try self.sleeper.sleep()
        // Bounded wait for the two to settle: one asleep (answering), the other standing by.
        let states = self.settledStates()
        let firstIsActive = states == (.asleep, .standby)
        #expect(
            firstIsActive || states == (.standby, .asleep),
            "\(states)\n\(firstDaemon.output)\n\(secondDaemon.output)")
        let (active, standby) = firstIsActive ? (firstDaemon, secondDaemon) : (secondDaemon, firstDaemon)
        let (activeMAC, standbyMAC) =
            firstIsActive ? (ThreeHostLab.proxyMAC, Self.secondMAC) : (Self.secondMAC, ThreeHostLab.proxyMAC)
        let (standbyHost, standbyState) =
            firstIsActive ? (self.second, self.secondState) : (self.first, self.firstState)
        // Scenario timing: half a minute asleep, three of the standby's checks (every 10 s) on the wire. Five
        // minutes of them, thirty checks, run with explicit time in TakeoverPeersTests.
        usleep(30_000_000)
        #expect(self.sleeper.magicPackets.isEmpty, "the proxies woke the host: \(self.sleeper.magicPackets.count)")
        #expect(try self.arpAnswerers() == [activeMAC], "exactly the active proxy must answer ARP")
        #expect(try self.ndAnswerers() == [activeMAC], "exactly the active proxy must answer NS")
        // Each lists the other in its status, with the label it advertises and the MAC it answered with.
        let others = Daemon.status(proxy: self.first, stateDirectory: self.firstState)?.otherProxies ?? []
        #expect(
            others.contains {
                $0.label == "80-40-60-65.0 second" && $0.address == "192.0.2.3" && $0.mac == Self.secondMAC.description
            }, "\(others)")

        // The active proxy stops: its goodbye hands the host to the standby, with no wake.
        active.stop()
        #expect(
            Daemon.waitForHost(
                "sleeper.local.", in: .asleep, proxy: standbyHost, stateDirectory: standbyState, timeout: 10)
                == .asleep, "\(standby.output)")
        #expect(try self.arpAnswerers() == [standbyMAC])
        #expect(self.sleeper.magicPackets.isEmpty, "the hand-over woke the host")
        // A real connection now wakes the host through the proxy that took over.
        let connection = try self.client.spawn(
            ["/usr/bin/python3", "-c", TakeoverLabTests.connectScript, "192.0.2.2", "8080", "10"], logName: "connect")
        defer { connection.stop() }
        let packets = self.sleeper.waitForMagicPackets(1, timeout: 5)
        #expect(packets.first.map { Array($0.frame.bytes[6..<12]) } == standbyMAC.bytes, "woken by the standby")
        try self.sleeper.wake()
        #expect(connection.waitForOutput("connected", timeout: 10), "\(connection.output)")
    }

    /// Leaving for good (`release-all --transfer`): a host registered with one proxy only (as our client and
    /// awein's register) is handed to the other proxy with its own Owner option, dropped silently by the first,
    /// and taken over by the second with no wake.
    @Test func releaseAllTransfersTheHostsToTheOtherProxyWithoutAWake() throws {
        let leaving = try Daemon.start(in: self.first, stateDirectory: self.firstState, logName: "first")
        defer { leaving.stop() }
        let staying = try self.startSecond()
        defer { staying.stop() }
        // Registered in awein/SleepProxyClient's form (dnspython: a zone section, no cache-flush bits), with the
        // first proxy only, as that client does.
        let awein = try self.sleeper.host.run(["/usr/bin/python3", "-c", CoexistenceLabTests.aweinStyle])
        #expect(awein.stdout.contains("NOERROR"), "\(awein)")
        try self.sleeper.sleep()
        #expect(
            Daemon.waitForHost("sleeper.local.", in: .asleep, proxy: self.first, stateDirectory: self.firstState)
                == .asleep)
        // A client asks for the sleeper's address every 100 ms throughout, as one looking for it would.
        let asking = try self.client.spawn(
            [
                "/usr/bin/python3", "-c", Self.arpAsker, "eth0", self.client.mac.description, "192.0.2.20", "192.0.2.2",
                "15",
            ],
            logName: "arp-asker")
        defer { asking.stop() }
        #expect(asking.waitForOutput("asking", timeout: 5))
        let released = try self.leaveWithTransfer()
        #expect(
            released.stdout.contains("transferred sleeper.local. to 80-40-60-65.0 second"),
            "\(released)\n\(leaving.output)")
        #expect(
            Daemon.waitForHost(
                "sleeper.local.", in: .asleep, proxy: self.second, stateDirectory: self.secondState, timeout: 15)
                == .asleep, "\(staying.output)")
        // No gap over a second in which nobody answered ARP for the host (the asker's own view).
        #expect(asking.waitForOutput("longest-gap", timeout: 20), "\(asking.output)")
        let gap = asking.output.split(separator: " ").last.flatMap {
            Double($0.trimmingCharacters(in: .whitespacesAndNewlines))
        }
        print("transfer: ARP for the host unanswered for at most \(gap ?? -1) s")
        #expect((gap ?? 99) <= 1.0, "ARP went unanswered for \(gap ?? -1) s during the transfer: \(asking.output)")
        #expect(Daemon.status(proxy: self.first, stateDirectory: self.firstState)?.hosts == 0)
        #expect(try self.arpAnswerers() == [Self.secondMAC])
        #expect(self.sleeper.magicPackets.isEmpty, "the hand-over woke the host")
    }

    /// A Linux host whose avahi-daemon publishes a service registers through our client, with one proxy only (the
    /// best); that proxy leaves for good. The other takes the host over with no wake, and a python-zeroconf
    /// browser on another machine still finds and resolves the host's service, now answered by the second proxy.
    @Test(
        .enabled(
            if: FileManager.default.isExecutableFile(atPath: "/usr/sbin/avahi-daemon"),
            "needs avahi-daemon (scripts/test installs it)"))
    func anAvahiHostRegisteredByOurClientIsHandedOverAndStaysDiscoverable() throws {
        let leaving = try Daemon.start(
            in: self.first, stateDirectory: self.firstState, logName: "first", extra: ["--proxy-name", "First"])
        defer { leaving.stop() }
        let staying = try Daemon.start(
            in: self.second, stateDirectory: self.secondState, logName: "second",
            extra: ["--metrics", "fallback", "--proxy-name", "Second"])
        defer { staying.stop() }
        let avahi = try AvahiDaemon(in: self.sleeper.host, hostName: "sleeper", directory: self.lab.directory)
        defer { avahi.stop() }
        try avahi.publish(
            name: "Sleeper Files", type: "_http._tcp", port: 8080, txt: ["path=/files"], logName: "publish")
        let client = Daemon.sibling("sleepproxy-client")
        let common = [
            "--interface", "eth0", "--host-name", "sleeper", "--state-directory",
            self.lab.directory.appendingPathComponent("client-state").path,
        ]
        // Both proxies are announced a few seconds after they start: asked until both are listed (bounded).
        var proxies = try avahi.run([client, "proxies"] + common)
        for _ in 0..<6 where !(proxies.stdout.contains("First") && proxies.stdout.contains("Second")) {
            proxies = try avahi.run([client, "proxies"] + common)
        }
        let pre = try avahi.run([client, "hook", "pre", "suspend"] + common)
        #expect(pre.succeeded && pre.stdout.contains("with 20-40-10-65.0 First"), "the best proxy first: \(pre)")
        _ = try Command.run(["kill", "-STOP", "\(avahi.process.pid)"])
        try self.sleeper.sleep()
        #expect(
            Daemon.waitForHost("sleeper.local.", in: .asleep, proxy: self.first, stateDirectory: self.firstState)
                == .asleep)
        let released = try self.leaveWithTransfer()
        #expect(released.stdout.contains("transferred sleeper.local. to 80-40-60-65.0 Second"), "\(released)")
        #expect(
            Daemon.waitForHost(
                "sleeper.local.", in: .asleep, proxy: self.second, stateDirectory: self.secondState, timeout: 15)
                == .asleep, "\(staying.output)")
        leaving.stop()
        // What another machine sees: the service, resolved to the sleeper, answered by the proxy that stayed.
        let found = try Queriers.zeroconf(in: self.client, type: "_http._tcp.local.")
        let files = try #require(found.first { $0.name == "Sleeper Files" }, "not discoverable after the hand-over")
        #expect(files.port == 8080 && files.addresses.contains("192.0.2.2") && files.txt == ["path=/files"], "\(files)")
        #expect(self.sleeper.magicPackets.isEmpty, "the hand-over woke the host")
    }

    /// With no other proxy on the link, leaving for good wakes every host (they register elsewhere, or with this
    /// proxy again when it comes back), with magic packets that reach the sleeper before the command returns.
    @Test func leavingWithNoOtherProxyWakesEveryHost() throws {
        let alone = try Daemon.start(in: self.first, stateDirectory: self.firstState, logName: "alone")
        defer { alone.stop() }
        try self.register(with: "192.0.2.1")
        try self.sleeper.sleep()
        #expect(
            Daemon.waitForHost("sleeper.local.", in: .asleep, proxy: self.first, stateDirectory: self.firstState)
                == .asleep)
        let socket = self.firstState.appendingPathComponent("control.sock").path
        let released = try self.first.run(
            [Daemon.sibling("sleepproxyctl"), "release-all", "--transfer", "--yes", "--socket", socket],
            timeout: .seconds(30))
        #expect(released.stdout.contains("woke sleeper.local. (no other proxy took it)"), "\(released)")
        #expect(!self.sleeper.waitForMagicPackets(1, timeout: 5).isEmpty, "the host was not woken")
        #expect(Daemon.status(proxy: self.first, stateDirectory: self.firstState)?.hosts == 0)
    }

    /// A restart (or an upgrade) of either proxy wakes nobody: the one restarted comes back within seconds, while
    /// the other has taken the host over on its goodbye. Before, the restarted proxy resumed the host at once
    /// without knowing the other, the other no longer counted it (it had said goodbye), each took the other's claim
    /// for a conflict, and both woke the host (docs/several-proxies.md).
    @Test(arguments: [true, false])
    func restartingEitherProxyWakesNobody(restartActive: Bool) throws {
        var firstDaemon = try Daemon.start(in: self.first, stateDirectory: self.firstState, logName: "first")
        defer { firstDaemon.stop() }
        var secondDaemon = try self.startSecond()
        defer { secondDaemon.stop() }
        try self.register(with: "192.0.2.1")
        try self.register(with: "192.0.2.3")
        try self.sleeper.sleep()
        var states = self.settledStates()
        #expect(states == (.asleep, .standby) || states == (.standby, .asleep), "\(states)")
        let firstIsActive = states == (.asleep, .standby)
        let restartFirst = firstIsActive == restartActive
        // systemctl restart: a clean stop, and the same daemon again on the same state a moment later.
        if restartFirst {
            firstDaemon.stop()
            firstDaemon = try Daemon.start(in: self.first, stateDirectory: self.firstState, logName: "first-again")
        } else {
            secondDaemon.stop()
            secondDaemon = try self.startSecond(logName: "second-again")
        }
        states = self.settledStates()
        #expect(
            states == (.asleep, .standby) || states == (.standby, .asleep),
            "\(states)\n\(firstDaemon.output)\n\(secondDaemon.output)")
        // Scenario timing: the claims and counter-claims of a restart come within seconds; wait out three of the
        // standby's checks.
        usleep(20_000_000)
        #expect(
            self.sleeper.magicPackets.isEmpty,
            "the restart woke the host: \(self.sleeper.magicPackets.count) magic packets\n\(firstDaemon.output)\n\(secondDaemon.output)"
        )
        #expect(try self.arpAnswerers().count == 1, "exactly one proxy must answer ARP")
    }
}
