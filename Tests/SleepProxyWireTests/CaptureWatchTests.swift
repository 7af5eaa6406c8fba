import NIOCore
import SleepProxyTestSupport
import Testing

@testable import SleepProxyWire

/// Which captured frames are a device's routine address resolution, left to wait for the engine's next wake-up:
/// only a broadcast ARP request or a neighbour solicitation naming nothing watched; never anything unsure.
@Suite("Capture watch: routine frames")
struct CaptureWatchTests {
    static let device = MACAddress("02:53:50:00:00:30")!
    static let adopted = MACAddress("02:53:50:00:00:40")!
    static let proxy = MACAddress("02:53:50:00:00:01")!
    static let watchedV4 = IPv4Address(192, 0, 2, 2)
    static let watchedV6 = IPv6Address("fe80::53:50ff:fe00:2")!
    static let watch = CaptureWatch(v4: [watchedV4], v6: [watchedV6], macs: [adopted])

    static func routine(_ frame: [UInt8], _ watch: CaptureWatch = Self.watch) -> Bool {
        frame.withUnsafeBytes { watch.isRoutine($0) }
    }

    static func arpRequest(
        sender: IPv4Address, target: IPv4Address, mac: MACAddress = Self.device, to destination: MACAddress = .broadcast
    ) -> [UInt8] {
        ARPPacket(operation: .request, senderMAC: mac, senderIP: sender, targetMAC: .zero, targetIP: target)
            .frame(destination: destination, source: mac).bytes
    }

    static func solicitation(
        source: IPv6Address, target: IPv6Address, mac: MACAddress = Self.device,
        kind: NeighborDiscoveryMessage.Kind = .solicitation
    ) -> [UInt8] {
        NeighborDiscoveryMessage(
            kind: kind, target: target, sourceLinkLayerAddress: source == .any || kind != .solicitation ? nil : mac
        ).frame(
            ethernetSource: mac, ethernetDestination: target.solicitedNodeMulticast.multicastMAC, source: source,
            destination: target.solicitedNodeMulticast
        ).bytes
    }

    @Test func anotherDevicesARPRequestIsRoutine() {
        let other = Self.arpRequest(sender: IPv4Address(192, 0, 2, 50), target: IPv4Address(192, 0, 2, 9))
        #expect(Self.routine(other))
        #expect(Self.routine(Self.arpRequest(sender: .any, target: IPv4Address(192, 0, 2, 9))), "a probe")
        #expect(
            Self.routine(Self.arpRequest(sender: IPv4Address(192, 0, 2, 9), target: IPv4Address(192, 0, 2, 9))),
            "an announcement")
        // Naming a watched address, either side, or sent by an adopted host: the engine must see it now.
        #expect(!Self.routine(Self.arpRequest(sender: IPv4Address(192, 0, 2, 50), target: Self.watchedV4)))
        #expect(!Self.routine(Self.arpRequest(sender: Self.watchedV4, target: IPv4Address(192, 0, 2, 1))))
        #expect(!Self.routine(Self.arpRequest(sender: .any, target: Self.watchedV4)), "a probe for a held address")
        #expect(
            !Self.routine(
                Self.arpRequest(
                    sender: IPv4Address(192, 0, 2, 50), target: IPv4Address(192, 0, 2, 9), mac: Self.adopted))
        )
        var spoofed = other
        spoofed.replaceSubrange(22..<28, with: Self.adopted.bytes)  // the ARP sender MAC alone is the adopted one
        #expect(!Self.routine(spoofed))
        // Not a broadcast request: a reply, or a unicast request (a reply to the proxy's own probe, a check).
        #expect(
            !Self.routine(
                Self.arpRequest(sender: IPv4Address(192, 0, 2, 50), target: IPv4Address(192, 0, 2, 9), to: Self.proxy)))
        var reply = other
        reply[21] = 2
        #expect(!Self.routine(reply))
        // The family passed whole (its addresses not listed): anything may concern a watched host.
        #expect(!Self.routine(other, CaptureWatch(v4: nil, v6: [], macs: [])))
        #expect(!Self.routine(other, .unknown))
    }

    @Test func anotherDevicesNeighbourSolicitationIsRoutine() {
        let other = IPv6Address("fe80::53:50ff:fe00:30")!
        let wanted = IPv6Address("fe80::53:50ff:fe00:9")!
        #expect(Self.routine(Self.solicitation(source: other, target: wanted)))
        #expect(Self.routine(Self.solicitation(source: .any, target: wanted)), "duplicate address detection")
        #expect(!Self.routine(Self.solicitation(source: other, target: Self.watchedV6)))
        #expect(!Self.routine(Self.solicitation(source: .any, target: Self.watchedV6)))
        #expect(!Self.routine(Self.solicitation(source: Self.watchedV6, target: wanted)))
        #expect(!Self.routine(Self.solicitation(source: other, target: wanted, mac: Self.adopted)))
        #expect(!Self.routine(Self.solicitation(source: other, target: wanted, kind: .advertisement)))
        #expect(
            !Self.routine(Self.solicitation(source: other, target: wanted), CaptureWatch(v4: [], v6: nil, macs: [])))
        // A router solicitation (type 133) and an IPv6 packet that is not ICMPv6 are not.
        var routerSolicitation = Self.solicitation(source: other, target: wanted)
        routerSolicitation[54] = 133
        #expect(!Self.routine(routerSolicitation))
        var udp = Self.solicitation(source: other, target: wanted)
        udp[20] = 17
        #expect(!Self.routine(udp))
    }

    /// Every frame shorter than what is read (N - 1 bytes) is not routine, and nothing past the end is read; at N
    /// (ARP: 14 + 28 bytes; NS: 14 + 40 + 24) it is.
    @Test func truncatedFramesAreNeverRoutine() {
        let arp = Self.arpRequest(sender: IPv4Address(192, 0, 2, 50), target: IPv4Address(192, 0, 2, 9))
        let ns = Self.solicitation(source: .any, target: IPv6Address("fe80::53:50ff:fe00:9")!)
        for (frame, needed) in [(arp, 42), (ns, 78)] {
            #expect(frame.count >= needed)
            for length in 0..<needed {
                #expect(!Self.routine(Array(frame.prefix(length))), "\(length) of \(needed) bytes")
            }
            #expect(Self.routine(Array(frame.prefix(needed))))
        }
    }

    /// Apple's own frames (mDNSResponder's core as a sleeping client): the host's broadcast request names its own
    /// address, watched while it sleeps; the unicast request and the replies are never routine.
    @Test func appleSleepCycleARP() throws {
        let frames = try PcapFile(try Fixtures.bytes("apple-posix-sleep-cycle.pcap")).records.map(\.data)
        let arp = frames.filter { $0.count >= 14 && $0[12] == 0x08 && $0[13] == 0x06 }
        #expect(arp.count == 4)
        let nothingWatched = CaptureWatch(v4: [], v6: [], macs: [])
        #expect(arp.map { Self.routine($0, nothingWatched) } == [true, false, false, false])
        #expect(arp.map { Self.routine($0) } == [false, false, false, false])
        for frame in frames where !arp.contains(frame) {
            #expect(!Self.routine(frame, nothingWatched), "only ARP requests and solicitations")
        }
    }
}
