import Foundation
import SleepProxyControl
import SleepProxyTestSupport
import SleepProxyWire
import Testing

/// A Raspberry Pi has no clock of its own while off: NTP steps its wall clock by minutes, days or years after it
/// starts, and an administrator may set it by hand. Stepped forward and back by an hour, a day and ten years
/// while a host sleeps, the daemon (its wall clock alone set, docs/time.md) must wake nobody, keep the host's
/// lease to the second, keep answering for it, and keep its uptime and the host's day readable. Read from
/// outside: the magic packets the sleeper's interface received, dig's answers from another machine,
/// `sleepproxyctl`, and the SVG the status page draws.
@Suite("Wall clock steps in the lab", .lab(.namespaces, serialized: true))
final class ClockStepLabTests: ThreeHostSuite {
    let setup: ThreeHostLab
    var phone: LabHost { self.setup.third }

    init() throws { self.setup = try ThreeHostLab(thirdName: "phone") }

    static let hour: Int64 = 3_600
    static let day: Int64 = 86_400
    static let tenYears: Int64 = 315_576_000

    @Test func steppingTheWallClockWakesNobodyAndChangesNoLease() throws {
        let clock = try WallClockStep(directory: self.lab.directory)
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state, environment: clock.environment)
        defer { daemon.stop() }
        let message = SampleRegistration.message(
            id: 0x7400, mac: ThreeHostLab.sleeperMAC, host: "sleeper.local.",
            addresses: [IPAddress("192.0.2.2")!, IPAddress("2001:db8::2")!],
            services: [("Web._http._tcp", 8080), ("Shell._ssh._tcp", 22)])
        let replies = try UDPClient.exchange(
            in: self.sleeper.host, to: "192.0.2.1", port: 5599, from: "192.0.2.2",
            payloads: [message.encoded(options: .appleUpdate)])
        #expect(replies.first??.prefix(2) == [0x74, 0x00], "registration not accepted")
        try self.sleeper.sleep()
        #expect(
            Daemon.waitForHost("sleeper.local.", in: .asleep, proxy: self.proxy, stateDirectory: self.state) == .asleep)

        let start = ContinuousClock.now
        let leaseAtStart = try #require(try self.lease())
        var uptime = try #require(Daemon.status(proxy: self.proxy, stateDirectory: self.state)?.uptimeSeconds)
        for step in [Self.hour, -Self.hour, Self.day, -Self.day, Self.tenYears, -Self.tenYears, 0] {
            try clock.set(seconds: step)
            let status = try #require(Daemon.status(proxy: self.proxy, stateDirectory: self.state))
            #expect(status.uptimeSeconds >= uptime && status.uptimeSeconds < uptime + 30, "uptime after \(step) s")
            uptime = status.uptimeSeconds
            // The lease runs on: what is left is what was left, less the time that really passed.
            let elapsed = Double((ContinuousClock.now - start).components.seconds)
            let lease = try #require(try self.lease())
            #expect(abs(lease - (leaseAtStart - elapsed)) <= 2, "lease \(lease) s after a step of \(step) s")
            #expect(Daemon.hosts(proxy: self.proxy, stateDirectory: self.state)["sleeper.local."]?.state == .asleep)
            // Still answered for, from another machine.
            let answers = try Queriers.dig(in: self.phone, server: "192.0.2.2", name: "sleeper.local.", type: "A")
            #expect(answers.contains { $0.data == "192.0.2.2" }, "no answer after a step of \(step) s")
            // The host's day as the status page draws it: every band of non-negative width, none overlapping.
            try self.expectTheDayDrawnOnce(after: step)
        }
        #expect(self.sleeper.magicPackets.isEmpty, "a step woke the sleeper")
        // Told, with its direction. The daemon looks once a second: whichever of the steps above it saw apart, it
        // left zero and came back to it, so once it has looked again it has told one step each way.
        #expect(daemon.waitForOutput("the wall clock was set forward by", timeout: 5), "no step forward told")
        #expect(daemon.waitForOutput("the wall clock was set back by", timeout: 5), "no step back told")
    }

    /// What `sleepproxyctl hosts` says is left of the sleeper's lease.
    func lease() throws -> Double? {
        Daemon.hosts(proxy: self.proxy, stateDirectory: self.state)["sleeper.local."]?.leaseSeconds
    }

    func expectTheDayDrawnOnce(after step: Int64, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let mac = ThreeHostLab.sleeperMAC.description.replacingOccurrences(of: ":", with: "%3A")
        let page = try self.proxy.run([
            "/usr/bin/python3", "-c",
            "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:9580/host/\(mac)', timeout=5).read().decode())",
        ]).stdout
        let timelines = page.components(separatedBy: "<svg class=\"timeline\"").dropFirst()
        #expect(!timelines.isEmpty, "no day drawn after a step of \(step) s", sourceLocation: sourceLocation)
        for timeline in timelines {
            let bands = Self.bands(in: timeline)
            #expect(!bands.isEmpty, "a timeline without bands after \(step) s", sourceLocation: sourceLocation)
            for (earlier, later) in zip(bands, bands.dropFirst()) {
                #expect(
                    later.x >= earlier.x + earlier.width - 0.6, "bands overlap: \(bands)",
                    sourceLocation: sourceLocation)
            }
        }
    }

    /// The state bands of one timeline: `<rect class="band …" x=… width=…>`, in the order drawn (their width is
    /// never under half a unit, so only their order and overlap tell).
    static func bands(in page: String) -> [(x: Double, width: Double)] {
        page.components(separatedBy: "<rect class=\"band").dropFirst().compactMap { tail in
            func number(_ attribute: String) -> Double? {
                guard let start = tail.range(of: "\(attribute)=\"") else { return nil }
                return Double(tail[start.upperBound...].prefix { $0 != "\"" })
            }
            guard let x = number(" x"), let width = number("width") else { return nil }
            return (x, width)
        }
    }
}
