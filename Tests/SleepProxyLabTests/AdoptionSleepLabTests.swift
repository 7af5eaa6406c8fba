import Foundation
import SleepProxyControl
import SleepProxyTestSupport
import SleepProxyWire
import Testing

/// Adopted hosts as real ones go to sleep and come back (docs/adoption.md §3), asserted on what real clients see:
/// a Mac that sends exactly what macOS 15's mDNSResponder sends (its captured packets, sleep goodbyes last) stays
/// listed by python-zeroconf, avahi-browse and dig, and by a browser left open across its sleep; a service it
/// withdraws while awake is gone whole; a PC that resumes quietly is handed back before anyone is answered for it;
/// and a PC that answers only its name stays known across a restart of the proxy.
@Suite("Adopted hosts sleeping as real ones do", .lab(.namespaces, .avahi))
final class AdoptionSleepLabTests: ThreeHostSuite {
    let setup: ThreeHostLab
    var querier: LabHost { self.setup.third }
    static let mac = ThreeHostLab.sleeperMAC.description
    static let capture = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("SleepProxyCoreTests/Fixtures/macos15-sleep-goodbyes.pcap")

    init() throws {
        self.setup = try ThreeHostLab(thirdName: "querier")
    }

    func startMac() throws -> ScriptedResponder {
        try ScriptedResponder(in: self.sleeper.host, kind: .macOS15(capture: Self.capture))
    }

    /// The Mac falls asleep as macOS does: its goodbyes, then nothing (its addresses gone, the link up).
    func sleepMac(_ mac: ScriptedResponder) throws -> Date {
        try mac.sleep()
        let at = Date()
        try self.sleeper.sleep()
        return at
    }

    /// Whether dig, asking the proxy's own address, gets `name`'s address 192.0.2.2 (polled, bounded: the proxy
    /// speaks for a host from the moment it holds it, and announces it twice a second apart).
    func answered(_ name: String) throws -> Bool {
        try waitUntil(timeout: 5, interval: 0.3) {
            try Queriers.dig(in: self.querier, server: "192.0.2.1", name: name, type: "A").map(\.data) == ["192.0.2.2"]
        }
    }

    @Test func aMacsSleepGoodbyesLeaveItInEveryBrowserAndAnOpenBrowserGetsItBack() throws {
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state, extra: ["--adopt", Self.mac])
        defer { daemon.stop() }
        let watcher = try AvahiDaemon(in: self.querier, hostName: "querier", directory: self.lab.directory)
        defer { watcher.stop() }
        let browser = try Queriers.zeroconfWatch(in: self.querier, type: "_smb._tcp.local.", seconds: 120)
        defer { browser.stop() }
        let mac = try self.startMac()
        defer { mac.stop() }
        let learned = try self.waitForAdopted("awake") { $0.services.count == 2 }
        #expect(learned?.services.count == 2, "\(String(describing: learned))\n\(daemon.output)")
        #expect(
            Queriers.zeroconfEvents(browser).contains { $0.event == "add" && $0.name.hasPrefix("Büro MacBook") },
            "the open browser never listed the awake Mac: \(browser.output)")

        let goodbyes = try self.sleepMac(mac)
        let asleep = try self.waitForAdopted("asleep", timeout: 10)
        #expect(asleep?.state == "asleep", "\(String(describing: asleep))\n\(daemon.output)")
        #expect(asleep?.services.count == 2, "held without its services: \(String(describing: asleep))")
        // The browser left open: it dropped the service at the goodbye (RFC 6762 §10.1) and lists it again once
        // the proxy announces it, within a second of the hold.
        var back: Date?
        _ = waitUntil(timeout: 10, interval: 0.1) {
            let events = Queriers.zeroconfEvents(browser).filter { $0.at >= goodbyes }
            back = events.last?.event == "add" ? events.last?.at : nil
            return back != nil
        }
        let reAdded = try #require(back, "the open browser lost the sleeping Mac: \(browser.output)\n\(daemon.output)")
        #expect(reAdded.timeIntervalSince(goodbyes) <= 6, "listed again \(reAdded.timeIntervalSince(goodbyes)) s after")
        // A fresh browse by each client lists and resolves it.
        let found = try Queriers.zeroconf(in: self.querier, type: "_smb._tcp.local.")
        #expect(
            found.contains { $0.name == "Büro MacBook" && $0.port == 445 && $0.addresses.contains("192.0.2.2") },
            "python-zeroconf: \(found)")
        let browsed = try Queriers.avahiBrowse(watcher, type: "_http._tcp") { $0.contains { $0.port == 8080 } }
        #expect(browsed.contains { $0.name == "Büro MacBook" && $0.port == 8080 }, "avahi-browse: \(browsed)")
        let dug = try Queriers.dig(in: self.querier, server: "192.0.2.2", name: "_smb._tcp.local", type: "PTR")
        #expect(dug.contains { $0.data.contains("MacBook._smb._tcp.local.") }, "dig: \(dug)")
        if ProcessInfo.processInfo.environment["SLEEPPROXY_LAB_VERBOSE"] != nil {
            print("sleep goodbyes to the open browser listing the Mac again: \(reAdded.timeIntervalSince(goodbyes)) s")
        }
    }

    @Test func aServiceWithdrawnWhileAwakeIsGoneWholeWhenTheMacSleeps() throws {
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state, extra: ["--adopt", Self.mac])
        defer { daemon.stop() }
        let mac = try self.startMac()
        defer { mac.stop() }
        try self.waitForAdopted("awake") { $0.services.count == 2 }
        try mac.removeSMB()
        let withdrawn = try self.waitForAdopted("awake") { $0.services.count == 1 }
        #expect(withdrawn?.services == ["Büro MacBook._http._tcp.local."], "\(String(describing: withdrawn))")
        _ = try self.sleepMac(mac)
        #expect(try self.waitForAdopted("asleep", timeout: 10)?.state == "asleep", "\(daemon.output)")
        // Nothing of the withdrawn service is answered: not its PTR, not its SRV; the other service is.
        #expect(try Queriers.zeroconf(in: self.querier, type: "_smb._tcp.local.", seconds: 3).isEmpty)
        let srv = try Queriers.dig(
            in: self.querier, server: "192.0.2.2", name: "B\\195\\188ro\\032MacBook._smb._tcp.local", type: "SRV")
        #expect(srv.isEmpty, "\(srv)")
        let types = try Queriers.dig(
            in: self.querier, server: "192.0.2.2", name: "_services._dns-sd._udp.local", type: "PTR")
        #expect(types.map(\.data) == ["_http._tcp.local."], "\(types)")
        #expect(!(try Queriers.zeroconf(in: self.querier, type: "_http._tcp.local.")).isEmpty)
    }

    @Test func aQuietResumeIsHandedBackBeforeAnyoneIsAnsweredForIt() throws {
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state, extra: ["--adopt", Self.mac])
        defer { daemon.stop() }
        let mac = try self.startMac()
        defer { mac.stop() }
        try self.waitForAdopted("awake") { $0.services.count == 2 }
        _ = try self.sleepMac(mac)
        #expect(try self.waitForAdopted("asleep", timeout: 10)?.state == "asleep", "\(daemon.output)")
        #expect(try self.answered("Bueros-MacBook.local"), "not answered for while asleep\n\(daemon.output)")
        // It resumes without a word of its own: its addresses back, no announcement, and its first packet an ARP
        // request for a neighbour (here one nobody has, so that nothing but ARP leaves it).
        try self.sleeper.wake(announcing: false)
        _ = try self.sleeper.host.run(["ping", "-c", "1", "-W", "1", "192.0.2.77"], timeout: .seconds(5))
        let back = try self.waitForAdopted("awake", timeout: 5)
        #expect(back?.state == "awake", "a quiet resume was not handed back: \(String(describing: back))")
        // Its responder is not running: a question for its name now goes unanswered, by the proxy too.
        let dug = try Queriers.dig(in: self.querier, server: "192.0.2.1", name: "Bueros-MacBook.local", type: "A")
        #expect(dug.isEmpty, "the proxy answered for an awake host: \(dug)\n\(daemon.output)")
        let found = try Queriers.zeroconf(in: self.querier, type: "_smb._tcp.local.", seconds: 3)
        #expect(found.isEmpty, "\(found)\n\(daemon.output)")
    }

    @Test func aPCAwakeAndQuietAcrossARestartIsHeldWithItsNameWhenItSleeps() throws {
        var daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state, extra: ["--adopt", Self.mac])
        defer { daemon.stop() }
        let pc = try ScriptedResponder(in: self.sleeper.host, kind: .windows(name: "winpc", address: "192.0.2.2"))
        defer { pc.stop() }
        // Someone resolves it by mDNS (Windows 11 does): the PC's multicast answer teaches the proxy its name.
        let watcher = try AvahiDaemon(in: self.querier, hostName: "querier", directory: self.lab.directory)
        defer { watcher.stop() }
        #expect(try Queriers.avahiResolve(watcher, name: "winpc.local") == "192.0.2.2")
        #expect(try self.waitForAdopted("awake") { $0.names == ["winpc.local."] }?.names == ["winpc.local."])
        // An upgrade restarts the proxy while the PC is awake and says nothing.
        daemon.stop()
        daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state, extra: ["--adopt", Self.mac])
        let restored = try self.adopted()
        #expect(restored?.names == ["winpc.local."], "forgotten at the restart: \(String(describing: restored))")
        // It is checked (its name asked at once), answers, and is left alone; then it sleeps without a word.
        let answered = try self.waitForAdopted("awake", timeout: 10) { $0.lastSignOfLifeSecondsAgo != nil }
        #expect(answered?.lastSignOfLifeSecondsAgo != nil, "never asked after the restart\n\(daemon.output)")
        pc.stop()
        try self.sleeper.sleep()
        let asleep = try self.waitForAdopted("asleep")
        #expect(asleep?.state == "asleep", "\(String(describing: asleep))\n\(daemon.output)")
        #expect(try self.answered("winpc.local"), "not answered for while asleep\n\(daemon.output)")
    }
}
