/// What a link's capture filter watches (`CaptureFilter.program(v4:v6:macs:nameService:)`), kept beside it to tell
/// the link's routine address resolution from a frame that concerns a watched host (docs/busy-lan.md).
///
/// The filter passes every ARP frame and every neighbour solicitation, whoever they name: the takeover learns the
/// link's peers from them. On a LAN of hundreds of devices most of them name nobody the proxy holds, and nothing
/// about them is urgent, so the capture reader queues them without waking the engine (`Mailbox.post(_:prompt:)`);
/// they are handled, in their order, with the next event that does wake it, a fraction of a second later at most.
/// Anything this cannot read for certain counts as not routine.
///
/// It reads the few fields it needs at fixed offsets instead of through `EthernetFrame` and `ARPPacket`: it runs on
/// the capture reader for every frame, before the engine sees it, and the decoders copy the frame into buffers;
/// the engine still decodes and validates every frame it is handed, routine or not.
public struct CaptureWatch: Hashable, Sendable {
    /// The watched addresses of each family; nil when the filter passes the family whole (its addresses were not
    /// listed), so that every frame of that family may concern a watched host.
    public var v4: Set<IPv4Address>?
    public var v6: Set<IPv6Address>?
    /// Adopted hosts' MACs, whose every frame the filter passes.
    public var macs: Set<MACAddress>

    /// Before any watch is set: nothing is known, nothing counts as routine.
    public static let unknown = CaptureWatch(v4: nil, v6: nil, macs: [])

    public init(v4: Set<IPv4Address>?, v6: Set<IPv6Address>?, macs: Set<MACAddress>) {
        self.v4 = v4
        self.v6 = v6
        self.macs = macs
    }

    /// Whether `frame` (Ethernet, as the packet socket hands it) is another device's routine address resolution:
    /// an ARP request broadcast (RFC 826) or a neighbour solicitation (RFC 4861 §4.3), neither from an adopted MAC
    /// nor naming a watched address as sender, source or target. Replies, unicast requests (a reply to the
    /// proxy's own probe, a neighbour's reachability check), and every other frame are not.
    public func isRoutine(_ frame: UnsafeRawBufferPointer) -> Bool {
        guard frame.count >= Self.ethernetHeader,
            !self.macs.contains(Self.mac(frame, at: Self.ethernetSource))
        else { return false }
        switch Self.uint16(frame, at: Self.etherTypeOffset) {
        case Self.etherTypeARP: return self.isRoutineARP(frame)
        case Self.etherTypeIPv6: return self.isRoutineSolicitation(frame)
        default: return false
        }
    }

    /// An IPv4-over-Ethernet ARP request to the broadcast address whose sender and target are not watched.
    private func isRoutineARP(_ frame: UnsafeRawBufferPointer) -> Bool {
        let arp = Self.ethernetHeader
        guard let v4, frame.count >= arp + Self.arpLength,
            Self.mac(frame, at: 0) == .broadcast,
            Self.uint16(frame, at: arp) == 1,  // hardware: Ethernet
            Self.uint16(frame, at: arp + 2) == Self.etherTypeIPv4,  // protocol: IPv4
            frame[arp + 4] == 6, frame[arp + 5] == 4,
            Self.uint16(frame, at: arp + 6) == 1,  // a request
            !self.macs.contains(Self.mac(frame, at: arp + 8))
        else { return false }
        let sender = IPv4Address(rawValue: Self.uint32(frame, at: arp + 14))
        let target = IPv4Address(rawValue: Self.uint32(frame, at: arp + 24))
        return !v4.contains(sender) && !v4.contains(target)
    }

    /// An ICMPv6 neighbour solicitation right after the fixed IPv6 header whose source and target are not watched.
    private func isRoutineSolicitation(_ frame: UnsafeRawBufferPointer) -> Bool {
        let ip = Self.ethernetHeader
        let icmp = ip + Self.ipv6Header
        guard let v6, frame.count >= icmp + Self.solicitationLength,
            frame[ip] >> 4 == 6,
            frame[ip + 6] == Self.nextHeaderICMPv6,
            frame[icmp] == Self.neighbourSolicitation
        else { return false }
        let source = Self.ipv6(frame, at: ip + 8)
        let target = Self.ipv6(frame, at: icmp + 8)
        return !v6.contains(source) && !v6.contains(target)
    }

    // Offsets and lengths: IEEE 802.3 (a frame as the packet socket gives it, VLAN tags already taken off),
    // RFC 826, RFC 8200 §3, RFC 4861 §4.3.
    static let ethernetHeader = 14
    static let ethernetSource = 6
    static let etherTypeOffset = 12
    static let etherTypeIPv4: UInt16 = 0x0800
    static let etherTypeARP: UInt16 = 0x0806
    static let etherTypeIPv6: UInt16 = 0x86DD
    static let arpLength = 28
    static let ipv6Header = 40
    static let nextHeaderICMPv6: UInt8 = 58
    static let neighbourSolicitation: UInt8 = 135
    /// Type, code, checksum, reserved and the target.
    static let solicitationLength = 24

    private static func uint16(_ bytes: UnsafeRawBufferPointer, at offset: Int) -> UInt16 {
        UInt16(bytes[offset]) << 8 | UInt16(bytes[offset + 1])
    }

    private static func uint32(_ bytes: UnsafeRawBufferPointer, at offset: Int) -> UInt32 {
        UInt32(Self.uint16(bytes, at: offset)) << 16 | UInt32(Self.uint16(bytes, at: offset + 2))
    }

    private static func uint64(_ bytes: UnsafeRawBufferPointer, at offset: Int) -> UInt64 {
        UInt64(Self.uint32(bytes, at: offset)) << 32 | UInt64(Self.uint32(bytes, at: offset + 4))
    }

    private static func mac(_ bytes: UnsafeRawBufferPointer, at offset: Int) -> MACAddress {
        MACAddress(rawValue: UInt64(Self.uint16(bytes, at: offset)) << 32 | UInt64(Self.uint32(bytes, at: offset + 2)))
    }

    private static func ipv6(_ bytes: UnsafeRawBufferPointer, at offset: Int) -> IPv6Address {
        IPv6Address(high: Self.uint64(bytes, at: offset), low: Self.uint64(bytes, at: offset + 8))
    }
}
