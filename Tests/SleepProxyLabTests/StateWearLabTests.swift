import Foundation
import SleepProxyControl
import SleepProxyCore
import SleepProxyTestSupport
import SleepProxyWire
import Testing

/// What reaches the state directory, as an SD card would see it (docs/state.md, "SD-card wear"), on the real daemon:
/// the history waits in the runtime directory and only a settle (a stop, a start, `sleepproxyctl sync`) brings it to
/// the state directory; a hand-back waits for the next synced write instead of writing the journal at once; and a
/// `kill -9` in between loses no line of the history, read back by `sleepproxyctl history` after the restart, and
/// is followed by the same start as a clean stop.
@Suite("State on an SD card", .lab(.namespaces, serialized: true))
final class StateWearLabTests: ThreeHostSuite {
    let setup: ThreeHostLab

    init() throws {
        self.setup = try ThreeHostLab(thirdName: "client")
    }

    var runtime: URL { self.lab.directory.appendingPathComponent("run") }
    var socket: String { self.state.appendingPathComponent("control.sock").path }

    func text(_ url: URL) -> String { (try? String(contentsOf: url, encoding: .utf8)) ?? "" }

    func ctl(_ arguments: [String]) throws -> CommandResult {
        try self.proxy.run([Daemon.sibling("sleepproxyctl")] + arguments + ["--socket", self.socket])
    }

    func start(_ logName: String) throws -> ManagedProcess {
        try Daemon.start(
            in: self.proxy, stateDirectory: self.state, logName: logName,
            extra: ["--runtime-directory", self.runtime.path])
    }

    func register() throws {
        let registration = SleepRegistration(
            hostName: try DNSName(parsing: "sleeper.local."), addresses: [IPAddress("192.0.2.2")!],
            services: [
                SleepRegistration.Service(instance: try DNSName(parsing: "Web._http._tcp.local."), port: 8080)
            ],
            owner: OwnerOption(sequence: 0, primaryMAC: ThreeHostLab.sleeperMAC), lease: 7200)
        let replies = try UDPClient.exchange(
            in: self.sleeper.host, to: "192.0.2.1", port: 5599, from: "192.0.2.2",
            payloads: [registration.messages(id: 0x5300, maximumSize: .max)[0].encoded(options: .appleUpdate)])
        #expect(replies.first??.prefix(2) == [0x53, 0x00], "registration not accepted")
    }

    /// The host registers while awake, then sleeps (its addresses go), and the proxy holds it asleep.
    func registerAndSleep() throws {
        try self.register()
        try self.sleeper.sleep()
        #expect(
            Daemon.waitForHost("sleeper.local.", in: .asleep, proxy: self.proxy, stateDirectory: self.state) == .asleep)
    }

    /// A crash is followed by the same start as a clean stop: the live record in the runtime directory says whom the
    /// proxy spoke for, so the host is answered for at once instead of after three probes a second apart.
    @Test func afterACrashTheHostIsAnsweredForAtOnce() throws {
        var daemon = try self.start("sleepproxyd")
        defer { daemon.stop() }
        try self.registerAndSleep()
        let live = self.runtime.appendingPathComponent("spoken-for.json")
        #expect(waitUntil(timeout: 3) { self.text(live).contains(ThreeHostLab.sleeperMAC.description) })
        daemon.stop(signal: SIGKILL)
        daemon = try self.start("sleepproxyd-2")
        let query = DNSMessage(id: 3, questions: [DNSQuestion(name: "sleeper.local.", type: .a)])
        let answers = try RawMDNS.exchange(
            in: self.setup.third, packets: [query], to: .v4(.mdnsGroup), listen: .seconds(1))
        #expect(
            answers.contains { $0.message.answers.contains { $0.name.description == "sleeper.local." } },
            "not answered for within a second of the restart: \(daemon.output)")
        // dig on another machine, asking the sleeping host's own address as a person's tool would: the proxy answers
        // ARP for it and the name resolves.
        let dug = try Queriers.dig(in: self.setup.third, server: "192.0.2.2", name: "sleeper.local.", type: "A")
        #expect(dug.contains { $0.data == "192.0.2.2" }, "dig: \(dug)")
        #expect(Daemon.hosts(proxy: self.proxy, stateDirectory: self.state)["sleeper.local."]?.state == .asleep)
        #expect(self.sleeper.magicPackets.isEmpty, "a crash wakes nobody")
    }

    @Test func theHistoryWaitsInTheRuntimeDirectoryAndACrashLosesNone() throws {
        var daemon = try self.start("sleepproxyd")
        defer { daemon.stop() }
        try self.registerAndSleep()
        let recent = self.runtime.appendingPathComponent("history-recent.jsonl")
        let settled = self.state.appendingPathComponent("history.jsonl")
        #expect(waitUntil(timeout: 5) { self.text(recent).contains("\"state\":\"asleep\"") }, "\(self.text(recent))")
        #expect(!FileManager.default.fileExists(atPath: settled.path), "nothing settles before its time")

        // It wakes and hands back with its own announcement (a new Owner sequence): no reply waits on that, so the
        // journal is not written until something synced comes.
        let journal = self.state.appendingPathComponent("registrations.journal")
        let journalBefore = regularFileSize(journal)
        try self.sleeper.wake()
        let announcement = DNSMessage(
            flags: DNSHeaderFlags(response: true, authoritative: true),
            answers: [
                DNSResourceRecord(
                    name: try DNSName(parsing: "sleeper.local."), cacheFlush: true, ttl: 120,
                    rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 2))))
            ],
            additionals: [
                .opt(
                    EDNSHeader(udpPayloadSize: 1440),
                    options: [.owner(OwnerOption(sequence: 1, primaryMAC: ThreeHostLab.sleeperMAC))])
            ])
        _ = try RawMDNS.exchange(
            in: self.sleeper.host, packets: [announcement], to: .v4(.mdnsGroup), sourcePort: 5353,
            listen: .milliseconds(1))
        #expect(
            waitUntil(timeout: 10) { Daemon.hosts(proxy: self.proxy, stateDirectory: self.state).isEmpty },
            "the host was not handed back: \(daemon.output)")
        #expect(waitUntil(timeout: 5) { self.text(recent).contains("handed-back") })
        #expect(regularFileSize(journal) == journalBefore, "the hand-back waits for the next synced write")

        // A crash: the runtime directory keeps what had not settled, and the next start settles it.
        daemon.stop(signal: SIGKILL)
        daemon = try self.start("sleepproxyd-2")
        let day = try self.ctl(["history", ThreeHostLab.sleeperMAC.description])
        #expect(day.succeeded && day.stdout.contains("asleep: ") && day.stdout.contains("handed-back"), "\(day)")
        #expect(self.text(settled).contains("handed-back"), "the start settled the last run's lines")

        // `sync` writes what is held: the new run's lines, and a hand-back kept from the journal.
        let synced = try self.ctl(["sync"])
        #expect(synced.succeeded && synced.stdout.contains("up to date"), "\(synced)")
        #expect(!FileManager.default.fileExists(atPath: recent.path) || self.text(recent).isEmpty)
    }

    func regularFileSize(_ url: URL) -> Int {
        (try? FileManager.default.attributesOfItem(atPath: url.path)[.size]) as? Int ?? -1
    }
}
