import Foundation
import NIOCore
import SleepProxyWire

/// A lab host that behaves like a machine going to sleep and waking up.
///
/// It owns its MAC and addresses and runs a TCP listener on a service port. Asleep, it has no addresses (so it
/// answers neither ARP nor neighbour discovery, and its kernel ignores traffic for them) while its link stays up,
/// as a suspended NIC with Wake-on-LAN armed does. Every magic packet that reaches it, as an EtherType 0x0842
/// frame or as UDP to port 9, is recorded with its bytes. Waking restores the addresses and announces them with a
/// gratuitous ARP and an unsolicited neighbour advertisement, as an OS does on resume.
public final class SleepingHost: @unchecked Sendable {
    // @unchecked: state changes happen on the test's thread; the capture is itself thread-safe.
    public let host: LabHost
    public let ipv4: [String]
    public let ipv6: [String]
    public let servicePort: Int
    private let capture: FrameCapture
    private var listener: ManagedProcess?
    public private(set) var isAsleep = false

    /// A one-line TCP service: answers every connection with "awake".
    static let listenerScript = """
        import socket, sys
        port = int(sys.argv[1])
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(('::', port)); s.listen(16)
        print('listening', flush=True)
        while True:
            c, _ = s.accept(); c.sendall(b'awake\\n'); c.close()
        """

    /// `ipv4` and `ipv6` in CIDR form; the IPv6 link-local address comes from the MAC.
    public init(
        lab: LabNetwork, name: String, mac: MACAddress, ipv4: [String], ipv6: [String] = [], servicePort: Int = 8080
    ) throws {
        self.host = try lab.addHost(name, mac: mac, ipv4: ipv4, ipv6: ipv6)
        self.ipv4 = ipv4
        self.ipv6 = ipv6
        self.servicePort = servicePort
        self.capture = try FrameCapture(in: self.host.namespace)
        let listener = try self.host.spawn(
            ["/usr/bin/python3", "-c", SleepingHost.listenerScript, "\(servicePort)"], logName: "listener")
        guard listener.waitForOutput("listening", timeout: 10) else {
            throw CommandError("the service listener did not start: \(listener.output)")
        }
        self.listener = listener
    }

    public var linkLocalCIDR: String { "\(self.host.linkLocal)/64" }

    /// Drops every address (link-local included, unless `keepingLinkLocal`: a host whose NIC answers neighbour
    /// solicitations in sleep, or that keeps its IPv6 link-local address); the link stays up and frames still
    /// arrive.
    public func sleep(keepingLinkLocal: Bool = false) throws {
        self.removed = self.ipv4 + self.ipv6 + (keepingLinkLocal ? [] : [self.linkLocalCIDR])
        // Secondaries first: removing the first address of a subnet takes the others of that subnet with it.
        for address in self.removed.reversed() { try self.host.removeAddress(address) }
        self.isAsleep = true
    }

    /// The addresses the last `sleep` removed.
    private var removed: [String] = []

    /// Restores the addresses and announces them; `announcing: false` is a quiet resume (a PC that sends no
    /// broadcast of its own when it wakes: only what its traffic needs, such as ARP requests).
    public func wake(announcing: Bool = true) throws {
        for address in self.removed { try self.host.addAddress(address) }
        self.removed = []
        self.isAsleep = false
        guard announcing else { return }
        for cidr in self.ipv4 {
            guard let address = IPv4Address(String(cidr.split(separator: "/")[0])) else { continue }
            let announcement = ARPPacket.announcement(from: self.host.mac, for: address).frame(
                destination: .broadcast, source: self.host.mac)
            try self.host.namespace.sendFrame(announcement.bytes)
        }
        let unsolicited = NeighborDiscoveryMessage(
            kind: .advertisement, flags: [.override], target: self.host.linkLocal, targetLinkLayerAddress: self.host.mac
        )
        let frame = unsolicited.frame(
            ethernetSource: self.host.mac, ethernetDestination: IPv6Address.allNodes.multicastMAC,
            source: self.host.linkLocal, destination: .allNodes)
        try self.host.namespace.sendFrame(frame.bytes)
    }

    /// Every frame the host's interface saw or sent so far.
    public var capturedFrames: [CapturedFrame] { self.capture.captured }

    /// Magic packets received so far (EtherType 0x0842, or UDP to port 9 over IPv4 or IPv6), with their payloads.
    public var magicPackets: [(frame: CapturedFrame, packet: MagicPacket)] {
        self.capture.captured.compactMap { frame in
            guard frame.packetType != 4, let payload = SleepingHost.magicPayload(frame.bytes),
                let packet = try? MagicPacket(payload: payload)
            else { return nil }
            return (frame, packet)
        }
    }

    /// Waits (bounded) for `count` magic packets.
    @discardableResult
    public func waitForMagicPackets(_ count: Int = 1, timeout: TimeInterval) -> [(
        frame: CapturedFrame, packet: MagicPacket
    )] {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while self.magicPackets.count < count, Date() < deadline { usleep(10_000) }
        return self.magicPackets
    }

    public static func magicPayload(_ bytes: [UInt8]) -> [UInt8]? {
        guard let frame = try? EthernetFrame(decoding: ByteBuffer(bytes: bytes)) else { return nil }
        switch frame.etherType {
        case .wakeOnLAN:
            return Array(frame.payload.readableBytesView)
        case .ipv4:
            guard let packet = try? IPv4Packet(decoding: frame.payload), packet.header.proto == .udp,
                let udp = try? UDPDatagram(decoding: packet.payload), udp.destinationPort == MagicPacket.udpPort
            else { return nil }
            return Array(udp.payload.readableBytesView)
        case .ipv6:
            guard let packet = try? IPv6Packet(decoding: frame.payload), packet.upperLayerProtocol == .udp,
                let udp = try? UDPDatagram(decoding: packet.payload), udp.destinationPort == MagicPacket.udpPort
            else { return nil }
            return Array(udp.payload.readableBytesView)
        default:
            return nil
        }
    }

    public func close() {
        self.capture.stop()
        self.listener?.stop(signal: SIGKILL)
    }
}
