import Foundation
import SleepProxyControl
import SleepProxyCore
import SleepProxyTestSupport
import SleepProxyWire
import Testing

/// A sleeping minidlna server kept in a TV's list by sleepproxyd, end to end in the lab (docs/ssdp.md): minidlna
/// (Debian) on the sleeper, and on a third host the control points a TV embeds: gssdp-discover (GUPnP, which
/// Rhythmbox, Totem and GNOME use) and async-upnp-client (Home Assistant's), plus a plain M-SEARCH for timing.
@Suite("SSDP for a sleeping media server in the lab", .lab(.namespaces, .mediaServer, serialized: true))
final class SSDPLabTests: ThreeHostSuite {
    let setup: ThreeHostLab
    var tv: LabHost { self.setup.third }
    static let mediaServer = "urn:schemas-upnp-org:device:MediaServer:1"

    init() throws {
        self.setup = try ThreeHostLab(thirdName: "tv")
    }

    struct Response: Decodable {
        var t: Double
        var from: String
        var st: String?
        var usn: String?
        var location: String?
        var bootid: String?
    }

    /// One M-SEARCH from the TV through the group, and what answered it within `seconds`.
    func search(_ target: String, mx: Int = 1, seconds: Double = 2) throws -> [Response] {
        let result = try self.tv.run(
            ["/usr/bin/python3", "-c", SSDPControlPoint.searchScript, "192.0.2.20", target, "\(mx)", "\(seconds)"],
            timeout: .seconds(Int64(seconds) + 10))
        #expect(result.stdout.contains("done"), "the search script failed: \(result)")
        return result.stdout.split(separator: "\n").compactMap {
            try? JSONDecoder().decode(Response.self, from: Data($0.utf8))
        }
    }

    /// gssdp-discover's view: the USNs and locations it lists for `target`.
    func gssdpDiscover(_ target: String) throws -> (usns: Set<String>, locations: Set<String>, output: String) {
        let result = try self.tv.run(
            ["/usr/bin/gssdp-discover", "-i", "eth0", "-t", target, "-n", "3", "-m", "available"],
            timeout: .seconds(15))
        var usns: Set<String> = []
        var locations: Set<String> = []
        for line in result.stdout.split(separator: "\n") {
            let text = line.trimmingCharacters(in: .whitespaces)
            if text.hasPrefix("USN:") { usns.insert(text.dropFirst(4).trimmingCharacters(in: .whitespaces)) }
            if text.hasPrefix("Location:") { locations.insert(text.dropFirst(9).trimmingCharacters(in: .whitespaces)) }
        }
        return (usns, locations, result.stdout + result.stderr)
    }

    func hostDetail() throws -> HostDetail? {
        let socket = self.state.appendingPathComponent("control.sock").path
        let result = try self.proxy.run([
            Daemon.sibling("sleepproxyctl"), "host", "sleeper", "--socket", socket, "--json",
        ])
        guard let line = result.stdout.split(separator: "\n").first else { return nil }
        return try? ControlProtocol.decode(ControlResponse.self, from: Array(line.utf8)).host
    }

    func register() throws {
        // Like an avahi-based NAS: its web interface is registered, its media server is not (it is UPnP only).
        let message = SampleRegistration.message(
            id: 0x5200, mac: ThreeHostLab.sleeperMAC, host: "sleeper.local.",
            addresses: [IPAddress("192.0.2.2")!, IPAddress("2001:db8::2")!], services: [("NAS._http._tcp", 8080)])
        let replies = try UDPClient.exchange(
            in: self.sleeper.host, to: "192.0.2.1", port: 5599, from: "192.0.2.2",
            payloads: [message.encoded(options: .appleUpdate)])
        #expect(replies.first??.prefix(2) == [0x52, 0x00], "registration not accepted: \(String(describing: replies))")
    }

    @Test func aSleepingMinidlnaServerStaysInTheTVsListAndOpeningItWakesIt() throws {
        // minidlna announces every 10 s here: frozen for longer, it announces the moment it resumes, as one that
        // slept past its interval does (its timer runs on the wall clock).
        let minidlna = try MiniDLNA(
            on: self.sleeper.host, address: "192.0.2.2", directory: self.lab.directory, notifyInterval: 10)
        defer { minidlna.stop() }
        let udn = try #require(minidlna.udn())
        let usn = "\(udn)::\(Self.mediaServer)"

        // Awake, the TV finds it directly.
        let direct = try self.gssdpDiscover(Self.mediaServer)
        #expect(direct.usns.contains(usn) && direct.locations.contains(minidlna.location), "\(direct.output)")

        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        defer { daemon.stop() }
        try self.register()
        // The proxy's search on registration taught it what the server advertises.
        var upnp: [HostDetail.UPnPEntry] = []
        try waitUntil(timeout: 10, interval: 0.2) {
            upnp = (try self.hostDetail())?.upnp ?? []
            return upnp.contains(where: { $0.type == Self.mediaServer })
        }
        #expect(upnp.first { $0.type == Self.mediaServer }?.location == minidlna.location, "\(upnp)")
        #expect(upnp.count == 6, "rootdevice, uuid, MediaServer and its three services: \(upnp.map(\.type))")

        // A control point that fetches a description whenever a device is new or changed (async-upnp-client's
        // tracker, as Home Assistant runs it) watches throughout, searching every 3 s.
        let pythonPath = SSDPControlPoint.asyncUPnPClientPath
        #expect(
            pythonPath != nil, "async-upnp-client is not installed (scripts/test installs it into .build/python-lab)")
        let watcher = try pythonPath.map { path in
            try self.tv.spawn(
                [
                    "env", "PYTHONPATH=\(path)", "/usr/bin/python3", "-c", SSDPControlPoint.listenScript, "192.0.2.20",
                    "90",
                ],
                logName: "watcher")
        }
        defer { watcher?.stop() }
        #expect(watcher?.waitForOutput(minidlna.location, timeout: 10) ?? true, "the watcher never saw the server")
        // And GUPnP's control point, which fetches the description before it calls a device available.
        #expect(SSDPControlPoint.hasGUPnP, "GUPnP's GObject bindings are missing (scripts/test installs them)")
        let gupnp =
            try SSDPControlPoint.hasGUPnP
            ? self.tv.spawn(
                ["/usr/bin/python3", "-c", SSDPControlPoint.gupnpScript, "eth0", Self.mediaServer, "90"],
                logName: "gupnp") : nil
        defer { gupnp?.stop() }
        #expect(gupnp?.waitForOutput("\"available\"", timeout: 10) ?? true, "GUPnP never saw the server awake")

        // It sleeps: minidlna stops where it is and the addresses go.
        let sleptAt = Date().timeIntervalSince1970
        minidlna.freeze()
        try self.sleeper.sleep()
        #expect(
            Daemon.waitForHost("sleeper.local.", in: .asleep, proxy: self.proxy, stateDirectory: self.state) == .asleep)

        // gssdp-discover still lists it, with the same USN and location.
        let proxied = try self.gssdpDiscover(Self.mediaServer)
        #expect(proxied.usns.contains(usn) && proxied.locations.contains(minidlna.location), "\(proxied.output)")
        // A plain search: the answers come from the proxy, within MX (1 s), as the server's own.
        let responses = try self.search(Self.mediaServer, mx: 1, seconds: 2)
        #expect(responses.count == 1, "\(responses)")
        #expect(responses.allSatisfy { $0.from == "192.0.2.1" && $0.usn == usn && $0.location == minidlna.location })
        #expect(responses.allSatisfy { $0.t <= 1.2 }, "answered after the MX delay: \(responses.map(\.t))")
        let all = try self.search("ssdp:all", mx: 1, seconds: 2).filter { $0.location == minidlna.location }
        #expect(Set(all.compactMap(\.st)).count == 6, "\(all.map(\.st))")
        let counts = Daemon.status(proxy: self.proxy, stateDirectory: self.state)?.upnp
        #expect(
            counts?.hosts == 1 && counts?.entries == 6 && (counts?.responses ?? 0) >= 7, "\(String(describing: counts))"
        )
        // Past the server's max-age (30 s, as it announces every 10 s here) with the proxy announcing for it: the
        // control points' caches must not lapse, or they would take the next announcement for a new server and
        // fetch its description, waking it (GUPnP did, before the proxy's first announcement came at once).
        let notifies = try self.tv.spawn(
            ["/usr/bin/python3", "-c", SSDPControlPoint.notifyScript, "192.0.2.20", "60"], logName: "notifies")
        defer { notifies.stop() }
        let pastMaxAge = Date(timeIntervalSince1970: sleptAt + 35)
        while Date() < pastMaxAge, daemon.isRunning { usleep(200_000) }
        let proxyAlive = notifies.output.split(separator: "\n").filter {
            $0.contains("\"192.0.2.1\"") && $0.contains("ssdp:alive") && $0.contains(usn)
        }
        #expect(!proxyAlive.isEmpty, "the proxy never announced the sleeping server")
        // Background discovery woke nothing.
        #expect(self.sleeper.magicPackets.isEmpty, "a search or an announcement woke the sleeper")

        // While it slept, nothing the proxy said looked new or changed to the watcher (its searches were answered:
        // `search_alive`, nothing else): it would have fetched nothing, so woken nothing.
        let openedAt = Date().timeIntervalSince1970
        if let watcher {
            let changes = SSDPControlPoint.lines(of: watcher.output, after: sleptAt, before: openedAt) {
                $0.contains(udn) && !$0.contains("\"search_alive\"")
            }
            #expect(changes.isEmpty, "the proxy's answers looked new or changed: \(changes)")
            let refreshes = SSDPControlPoint.lines(of: watcher.output, after: sleptAt + 6, before: openedAt) {
                $0.contains(udn) && $0.contains("\"search_alive\"")
            }
            #expect(!refreshes.isEmpty, "the watcher's searches went unanswered while the server slept")
        }
        if let gupnp {
            let events = SSDPControlPoint.lines(of: gupnp.output, after: sleptAt, before: openedAt)
            #expect(events.isEmpty, "GUPnP saw the sleeping server come or go: \(events)")
        }

        // A TV opens the server: async-upnp-client finds it and fetches its description, which wakes it.
        guard let pythonPath else { return }
        let open = try self.tv.spawn(
            [
                "env", "PYTHONPATH=\(pythonPath)", "/usr/bin/python3", "-c", SSDPControlPoint.openScript, "192.0.2.20",
                Self.mediaServer,
            ], logName: "open")
        defer { open.stop() }
        let packets = self.sleeper.waitForMagicPackets(1, timeout: 10)
        #expect(!packets.isEmpty, "opening the server sent no magic packet: \(open.output)")
        usleep(Scenario.resumeAfterMagicPacket)
        try self.sleeper.wake()
        minidlna.thaw()
        #expect(open.waitForOutput("opened", timeout: 20), "the description fetch did not complete: \(open.output)")
        #expect(open.output.contains("\"opened\": \"\(minidlna.friendlyName)\""), "\(open.output)")
        let wakes = try self.proxy.run([
            Daemon.sibling("sleepproxyctl"), "events", "--socket",
            self.state.appendingPathComponent("control.sock").path,
        ])
        #expect(wakes.stdout.contains("tcp/8200"), "the wake names the description port: \(wakes.stdout)")

        // Handed back: the proxy is silent and the server answers for itself.
        #expect(
            Daemon.waitForHosts(proxy: self.proxy, stateDirectory: self.state, timeout: 10) {
                $0["sleeper.local."] == nil
            }, "the sleeper was not handed back")
        let after = try self.search(Self.mediaServer, mx: 1, seconds: 2)
        #expect(after.contains { $0.from == "192.0.2.2" }, "minidlna answers itself: \(after)")
        #expect(!after.contains { $0.from == "192.0.2.1" }, "the proxy still answers for an awake host: \(after)")
    }

    @Test func floodsMalformedSSDPAndARestartLeaveTheProxyAnswering() throws {
        let minidlna = try MiniDLNA(on: self.sleeper.host, address: "192.0.2.2", directory: self.lab.directory)
        defer { minidlna.stop() }
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        defer { daemon.stop() }
        try self.register()
        // minidlna (started before the proxy, announcing every 895 s) hears only the proxy's group search: what
        // the proxy knows of it can only have come from that.
        try waitUntil(timeout: 10, interval: 0.2) { !((try self.hostDetail())?.upnp?.isEmpty ?? true) }
        #expect((try self.hostDetail())?.upnp?.count == 6, "the registration's search taught the proxy nothing")
        minidlna.freeze()
        try self.sleeper.sleep()
        #expect(
            Daemon.waitForHost("sleeper.local.", in: .asleep, proxy: self.proxy, stateDirectory: self.state) == .asleep)
        // Garbage, an oversized datagram, broken messages, and 3,000 searches as fast as Python sends them.
        let flood = try self.tv.run(
            ["/usr/bin/python3", "-c", Self.floodScript, "192.0.2.20"], timeout: .seconds(60))
        #expect(flood.stdout.contains("sent"), "\(flood)")
        #expect(daemon.isRunning)
        // Still answering, within MX.
        let responses = try self.search(Self.mediaServer, mx: 1, seconds: 2)
        #expect(
            responses.contains { $0.from == "192.0.2.1" }, "no answer after the flood: \(daemon.output.suffix(2000))")
        #expect(self.sleeper.magicPackets.isEmpty, "the flood woke the sleeper")

        // Restarted (an upgrade) while the server sleeps: it never announces, yet the proxy still answers for it,
        // from what it saved.
        daemon.stop()
        let restarted = try Daemon.start(in: self.proxy, stateDirectory: self.state, logName: "sleepproxyd-2")
        defer { restarted.stop() }
        #expect(
            Daemon.waitForHost("sleeper.local.", in: .asleep, proxy: self.proxy, stateDirectory: self.state) == .asleep)
        let again = try self.search(Self.mediaServer, mx: 1, seconds: 2)
        #expect(again.contains { $0.from == "192.0.2.1" && $0.location == minidlna.location }, "\(again)")
    }

    /// A registration over IPv6 whose only IPv4 address is the subnet's broadcast address (the registrar wants
    /// the address it comes from among the claims, and the proxy searches the lowest IPv4 one): the search the
    /// proxy sends to a new host is refused by the kernel (EACCES, no SO_BROADCAST). Handed to NIO, that error
    /// closed the SSDP socket the proxy searches from and hears answers on, for good: a media server registering
    /// after it was never learned. Now the search is dropped and counted (docs/linux.md §1.10), and the next
    /// server is learned and answered for as usual.
    @Test func aRegistrationNamingABroadcastAddressLeavesSSDPWorking() throws {
        let minidlna = try MiniDLNA(on: self.sleeper.host, address: "192.0.2.2", directory: self.lab.directory)
        defer { minidlna.stop() }
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        defer { daemon.stop() }

        let odd = SampleRegistration.message(
            id: 0x5201, mac: MACAddress("02:53:50:00:00:66")!, host: "odd.local.",
            addresses: [IPAddress("192.0.2.255")!, IPAddress("2001:db8::20")!], services: [("Odd._http._tcp", 8080)])
        let replies = try UDPClient.exchange(
            in: self.tv, to: "2001:db8::1", port: 5599, from: "2001:db8::20",
            payloads: [odd.encoded(options: .appleUpdate)])
        #expect(
            replies.first??.prefix(2) == [0x52, 0x01], "no reply to the registration: \(String(describing: replies))")
        // The search leaves with the registration's batch; the scrape may come first, so ask until it is counted.
        var metrics = ""
        try waitUntil(timeout: 5) {
            metrics = try self.proxy.run([
                "/usr/bin/python3", "-c",
                "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9580/metrics', timeout=5).read().decode())",
            ]).stdout
            return metrics.contains("sleepproxy_unicast_sends_failed_total 1")
        }
        #expect(metrics.contains("sleepproxy_unicast_sends_failed_total 1"), "\(metrics)")
        #expect(metrics.contains("sleepproxy_multicast_sockets_reopened_total 0"))

        try self.register()
        try waitUntil(timeout: 10, interval: 0.2) { !((try self.hostDetail())?.upnp?.isEmpty ?? true) }
        #expect(
            (try self.hostDetail())?.upnp?.count == 6,
            "the NAS registering after the odd host was not learned: \(daemon.output.suffix(2000))")
        minidlna.freeze()
        try self.sleeper.sleep()
        #expect(
            Daemon.waitForHost("sleeper.local.", in: .asleep, proxy: self.proxy, stateDirectory: self.state) == .asleep)
        let responses = try self.search(Self.mediaServer, mx: 1, seconds: 2)
        #expect(responses.contains { $0.from == "192.0.2.1" && $0.location == minidlna.location }, "\(responses)")
        #expect(daemon.isRunning)
    }

    /// Bounded: 3,000 searches and a handful of broken datagrams, from one socket.
    static let floodScript = """
        import socket, sys
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((sys.argv[1], 0))
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(sys.argv[1]))
        group = ('239.255.255.250', 1900)
        bad = [b'\\x00' * 40, b'M-SEARCH * HTTP/1.1\\r\\n' + b'X: y\\r\\n' * 100 + b'\\r\\n', b'A' * 5000,
               b'M-SEARCH * HTTP/1.1\\nST: ssdp:all\\n\\n', b'NOTIFY * HTTP/1.1\\r\\nNTS: ssdp:alive\\r\\n\\r\\n',
               b'HTTP/1.1 200 OK\\r\\nST: upnp:rootdevice\\r\\nUSN: uuid:x\\r\\nLOCATION: ftp://x\\r\\n\\r\\n']
        for payload in bad:
            s.sendto(payload, group)
        search = (b'M-SEARCH * HTTP/1.1\\r\\nHOST: 239.255.255.250:1900\\r\\nMAN: "ssdp:discover"\\r\\n'
                  b'MX: 5\\r\\nST: ssdp:all\\r\\n\\r\\n')
        for _ in range(3000):
            s.sendto(search, group)
        print('sent', flush=True)
        """
}

extension SSDPLabTests {
    /// `--no-ssdp`: no SSDP socket, nothing learned, nothing answered, and the description port wakes nothing.
    @Test func withNoSSDPTheProxyStaysOutOfUPnP() throws {
        let minidlna = try MiniDLNA(on: self.sleeper.host, address: "192.0.2.2", directory: self.lab.directory)
        defer { minidlna.stop() }
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state, extra: ["--no-ssdp"])
        defer { daemon.stop() }
        let sockets = try self.proxy.run(["ss", "-uln"]).stdout
        #expect(!sockets.contains(":1900"), "an SSDP socket is open: \(sockets)")
        try self.register()
        #expect(
            Daemon.waitForHost("sleeper.local.", in: .starting, proxy: self.proxy, stateDirectory: self.state)
                == .starting)
        #expect(try self.hostDetail()?.upnp == nil, "the host detail lists UPnP entries with --no-ssdp")
        minidlna.freeze()
        try self.sleeper.sleep()
        #expect(
            Daemon.waitForHost("sleeper.local.", in: .asleep, proxy: self.proxy, stateDirectory: self.state) == .asleep)
        #expect(try self.search(Self.mediaServer).isEmpty, "something answered for the sleeping server")
        // A TV opening the server it remembers: not a registered service, so not a wake.
        let open = try self.tv.run(
            ["/usr/bin/python3", "-c", MiniDLNA.fetchScript, minidlna.location], timeout: .seconds(10))
        #expect(!open.succeeded)
        #expect(self.sleeper.magicPackets.isEmpty, "the description port woke the sleeper with --no-ssdp")
    }
}

extension SSDPLabTests {
    /// The NAS that runs the proxy often runs minidlna too: both bind port 1900, the proxy's SSDP sockets open
    /// beside minidlna's, TVs still find that minidlna, and the proxy neither learns nor answers for its own box.
    @Test func aProxyOnABoxRunningMinidlnaLeavesThatMinidlnaAlone() throws {
        let local = try MiniDLNA(
            on: self.proxy, address: "192.0.2.1", directory: self.lab.directory, friendlyName: "ProxyBox")
        defer { local.stop() }
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        defer { daemon.stop() }
        let sockets = try self.proxy.run(["ss", "-ulnp"]).stdout.split(separator: "\n").filter {
            $0.contains(":1900 ")
        }
        #expect(
            sockets.contains { $0.contains("minidlna") } && sockets.contains { $0.contains("sleepproxyd") },
            "\(sockets)")
        let found = try self.search(Self.mediaServer)
        #expect(found.contains { $0.from == "192.0.2.1" && $0.location == local.location }, "\(found)")
        #expect(found.count == 1, "one answer, minidlna's own: \(found)")
        let upnp = Daemon.status(proxy: self.proxy, stateDirectory: self.state)?.upnp
        #expect(upnp?.entries == 0 && upnp?.responses == 0, "\(String(describing: upnp))")
    }
}
