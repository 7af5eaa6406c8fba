import Foundation
import NIOCore
import SleepProxyControl
import SleepProxyCore
import SleepProxyIO
import SleepProxyTestSupport
import SleepProxyWire
import Testing

/// While a host is being woken (docs/waking.md §6): the proxy keeps it reachable until the host itself speaks,
/// so a client's connect() waits for it instead of failing with "No route to host", and a host that kept an
/// address (its IPv6 link-local, as a NIC with ND offload does) gets its connection replayed once it is really up.
@Suite("Waking keeps the host reachable", .lab(.namespaces, serialized: true))
final class WakingLabTests: ThreeHostSuite {
    let setup: ThreeHostLab
    var client: LabHost { self.setup.third }
    /// A machine that never spoke to the sleeper: it must find the sleeper's addresses through the proxy.
    let phone: LabHost

    init() throws {
        let setup = try ThreeHostLab(thirdName: "client")
        self.setup = setup
        self.phone = try setup.lab.addHost(
            "phone", mac: MACAddress("02:53:50:00:00:40")!, ipv4: ["192.0.2.40/24"], ipv6: ["2001:db8::40/64"])
    }

    func register(addresses: [IPAddress]) throws {
        let message = SampleRegistration.message(
            id: 0x7200, mac: ThreeHostLab.sleeperMAC, host: "sleeper.local.", addresses: addresses,
            services: [("Web._http._tcp", 8080)])
        let replies = try UDPClient.exchange(
            in: self.sleeper.host, to: "192.0.2.1", port: 5599, from: "192.0.2.2",
            payloads: [message.encoded(options: .appleUpdate)])
        #expect(replies.first??.prefix(2) == [0x72, 0x00], "registration not accepted")
    }

    func connect(from host: LabHost, to address: String, timeout: Double) throws -> ManagedProcess {
        try host.spawn(
            ["/usr/bin/python3", "-c", TakeoverLabTests.connectScript, address, "8080", "\(timeout)"],
            logName: "connect-\(host.name)-\(address)")
    }

    /// A wake that brings nobody back yet: the proxy keeps answering neighbour discovery for the host, so a
    /// machine that first looks for the host during the wake gets the proxy's MAC, its SYN is captured, and its
    /// connect() completes once the host is up. Apple pointed IPv6 neighbours at the sleeping NIC when the wake
    /// began and stopped answering for it: that connect() failed with "No route to host".
    @Test func aWakeNobodyAnswersYetLeavesTheHostReachable() throws {
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        defer { daemon.stop() }
        try self.register(addresses: [IPAddress("192.0.2.2")!, IPAddress("2001:db8::2")!])
        try self.sleeper.sleep()
        #expect(
            Daemon.waitForHost("sleeper.local.", in: .asleep, proxy: self.proxy, stateDirectory: self.state) == .asleep)
        let first = try self.connect(from: self.client, to: "192.0.2.2", timeout: 40)
        defer { first.stop() }
        // Two bursts of magic packets: the wake is under way, and the sleeper does not answer them.
        #expect(self.sleeper.waitForMagicPackets(3, timeout: 10).count >= 3, "no wake: \(daemon.output)")
        #expect(
            Daemon.waitForHost(
                "sleeper.local.", in: .waking, proxy: self.proxy, stateDirectory: self.state, timeout: 2) == .waking)
        // The phone looks for the sleeper over IPv6 now; its neighbour solicitation is answered by the proxy.
        let late = try self.connect(from: self.phone, to: "2001:db8::2", timeout: 40)
        defer { late.stop() }
        // Bounded wait for the phone's neighbour entry: the proxy's MAC (it stays FAILED if nobody answers).
        var entry = ""
        try waitUntil(timeout: 8, interval: 0.2) {
            entry = try self.phone.run(["ip", "-6", "neigh", "show", "2001:db8::2"]).stdout.lowercased()
            return entry.contains(ThreeHostLab.proxyMAC.description.lowercased()) || entry.contains("failed")
        }
        #expect(entry.contains(ThreeHostLab.proxyMAC.description.lowercased()), "the phone's entry: \(entry)")
        #expect(!late.output.contains("failed"), "\(late.output)")
        // The sleeper wakes at last: both connections complete, the phone's through its replayed SYN.
        try self.sleeper.wake()
        #expect(first.waitForOutput("connected", timeout: 15), "\(first.output)")
        #expect(late.waitForOutput("connected", timeout: 15), "\(late.output)")
        #expect(late.output.contains("awake"), "\(late.output)")
    }

    /// A host that keeps its IPv6 link-local address while asleep (its kernel answers neighbour solicitations
    /// for it) and registered it: the proxy's re-probes of that address are answered by the sleeping host, which
    /// says nothing about the rest of it. The wake must go on until the host is really up, and the client's SYN
    /// must reach it then (Apple ended the wake on the answer and replayed the SYN into the sleeping host).
    @Test func aHostThatKeptItsLinkLocalGetsTheSYNWhenItIsReallyUp() throws {
        let daemon = try Daemon.start(in: self.proxy, stateDirectory: self.state)
        defer { daemon.stop() }
        try self.register(addresses: [
            IPAddress("192.0.2.2")!, IPAddress("2001:db8::2")!, .v6(self.sleeper.host.linkLocal),
        ])
        try self.sleeper.sleep(keepingLinkLocal: true)
        #expect(
            Daemon.waitForHost("sleeper.local.", in: .asleep, proxy: self.proxy, stateDirectory: self.state) == .asleep)
        let connection = try self.connect(from: self.client, to: "192.0.2.2", timeout: 20)
        defer { connection.stop() }
        #expect(!self.sleeper.waitForMagicPackets(1, timeout: 5).isEmpty, "no wake: \(daemon.output)")
        // The proxy re-probes the link-local address every 10 s while the host keeps it; let one such probe
        // and its answer fall inside the wake before the host resumes (bounded by the wake's 30 s).
        let answeredDuringWake = waitUntil(timeout: 12, interval: 0.2) {
            self.sleeper.capturedFrames.contains { frame in
                guard frame.packetType == 4,
                    let ethernet = try? EthernetFrame(decoding: ByteBuffer(bytes: frame.bytes)),
                    ethernet.etherType == .ipv6, let packet = try? IPv6Packet(decoding: ethernet.payload),
                    let message = try? NeighborDiscoveryMessage(decoding: packet)
                else { return false }
                return message.kind == .advertisement && frame.at > self.sleeper.magicPackets[0].frame.at
            }
        }
        #expect(answeredDuringWake, "the sleeping host never answered a re-probe during the wake")
        #expect(
            Daemon.waitForHost(
                "sleeper.local.", in: .waking, proxy: self.proxy, stateDirectory: self.state, timeout: 2) == .waking,
            "the answer for the kept address ended the wake")
        let wokeAt = Date()
        try self.sleeper.wake()
        #expect(connection.waitForOutput("connected", timeout: 10), "\(connection.output)")
        let replayedAfterWaking = self.sleeper.capturedFrames.contains { frame in
            guard frame.packetType != 4, frame.at >= wokeAt,
                let ethernet = try? EthernetFrame(decoding: ByteBuffer(bytes: frame.bytes)),
                ethernet.source == ThreeHostLab.proxyMAC, ethernet.etherType == .ipv4,
                let packet = try? IPv4Packet(decoding: ethernet.payload),
                let segment = try? TCPSegment(decoding: packet.payload)
            else { return false }
            return segment.isConnectionRequest && segment.destinationPort == 8080
        }
        #expect(replayedAfterWaking, "the client's SYN was not replayed to the host once it was up")
    }
}
