/// The classic BPF program that passes what the packet side needs (docs/protocol.md §4.3, docs/linux.md §2): every ARP
/// frame, IPv6 ICMPv6 (neighbour discovery; validated in Swift), and IPv4/IPv6 packets addressed to a watched
/// address. IPv6 destinations are matched on their last 32 bits, as Apple's filter did, and checked exactly in
/// Swift. Past `TakeoverRules.maximumFilteredAddresses` addresses of a family, the family passes whole.
public enum CaptureFilter {
    public struct Instruction: Hashable, Sendable {
        public var code: UInt16
        public var jt: UInt8
        public var jf: UInt8
        public var k: UInt32

        public init(code: UInt16, jt: UInt8, jf: UInt8, k: UInt32) {
            self.code = code
            self.jt = jt
            self.jf = jf
            self.k = k
        }
    }

    /// Bytes of each accepted frame handed to us: all of it (a SYN is replayed whole).
    public static let snapLength: UInt32 = 0xFFFF
    /// Addresses of one family matched one by one at most: Apple's filter took 250 per interface
    /// (`MAX_BPF_ADDRS`, docs/protocol.md §4.3), and a jump offset is 8 bits. Past it the family passes whole and
    /// the takeover sorts it out.
    public static let maximumAddresses = 250

    private static func ins(_ code: UInt16, _ jt: UInt8, _ jf: UInt8, _ k: UInt32) -> Instruction {
        Instruction(code: code, jt: jt, jf: jf, k: k)
    }
    /// `SKF_AD_OFF + SKF_AD_PKTTYPE` (linux/filter.h): loads the packet type (`PACKET_OUTGOING` = 4).
    public static let skfAncillaryPacketType: UInt32 = 0xFFFF_F000 &+ 4
    public static let packetOutgoing: UInt32 = 4
    /// The classic BPF opcodes the program uses (linux/filter.h): absolute loads of a word, half-word and byte,
    /// jump-if-equal to a constant, return a constant.
    public static let ld: UInt16 = 0x20, ldh: UInt16 = 0x28, ldb: UInt16 = 0x30, jeq: UInt16 = 0x15, ret: UInt16 = 0x06
    /// Unconditional jump by `k` (`BPF_JMP | BPF_JA`).
    public static let ja: UInt16 = 0x05
    /// Jump if `A & k` is not zero (`BPF_JMP | BPF_JSET | BPF_K`); X = 4 × (byte at `k` & 0x0F), the IPv4 header
    /// length (`BPF_LDX | BPF_B | BPF_MSH`); a half-word at X + `k` (`BPF_LD | BPF_H | BPF_IND`).
    public static let jset: UInt16 = 0x45, ldxMSH: UInt16 = 0xB1, ldhIndirect: UInt16 = 0x48
    /// The UDP ports of the Windows name protocols a sleeping PC is asked on (docs/windows.md): NetBIOS name
    /// service (broadcast), LLMNR and WS-Discovery (multicast), which go to no watched address.
    public static let nameServicePorts: (netbios: UInt32, llmnr: UInt32, wsd: UInt32) = (137, 5355, 3702)
    /// LLMNR's groups (RFC 4795 §2: 224.0.0.252 and ff02::1:3) and WS-Discovery's (239.255.255.250 and ff02::c) as
    /// Ethernet multicast MACs (RFC 1112 §6.4, RFC 2464 §7), joined on the link with the name ports.
    public static let nameServiceGroups: [MACAddress] = [
        MACAddress(rawValue: 0x0100_5E00_00FC), MACAddress(rawValue: 0x3333_0001_0003),
        MACAddress(rawValue: 0x0100_5E7F_FFFA), MACAddress(rawValue: 0x3333_0000_000C),
    ]
    /// Source MACs passed whole at most: four instructions each, and the first one's jump to the accept past the
    /// others must fit the 8-bit offset (docs/adoption.md §2).
    public static let maximumMACs = 63

    public static func program(addresses: [IPAddress]) -> [Instruction] {
        let (v4, v6) = self.byFamily(addresses)
        return self.program(v4: v4, v6: v6)
    }

    /// The addresses of each family, in their order.
    public static func byFamily(_ addresses: [IPAddress]) -> (v4: [IPv4Address], v6: [IPv6Address]) {
        var v4: [IPv4Address] = []
        var v6: [IPv6Address] = []
        for address in addresses {
            switch address {
            case .v4(let a): v4.append(a)
            case .v6(let a): v6.append(a)
            }
        }
        return (v4, v6)
    }

    /// The program for the addresses of each family; nil passes the whole family (more addresses than the
    /// filter holds, known without listing them).
    /// `nameService`: also pass UDP to the Windows name ports (`nameServicePorts`), for a proxy answering for a
    /// sleeping PC.
    public static func program(
        v4 v4Addresses: [IPv4Address]?, v6 v6Addresses: [IPv6Address]?, macs: [MACAddress] = [],
        nameService: Bool = false
    ) -> [Instruction] {
        let v4 = v4Addresses.map { Array(Set($0.map(\.rawValue))).sorted() }
        let v6 = v6Addresses.map { Array(Set($0.map { UInt32(truncatingIfNeeded: $0.low) })).sorted() }
        // Each block: match its addresses, ending in "reject, accept".
        func block(load: [Instruction], values: [UInt32]?) -> [Instruction] {
            guard let values, values.count <= maximumAddresses else { return [ins(ret, 0, 0, snapLength)] }
            var result = load
            for (i, value) in values.enumerated() {
                // Jump to the final "accept": skip the remaining compares and the reject.
                result.append(ins(jeq, UInt8(values.count - i), 0, value))
            }
            result.append(ins(ret, 0, 0, 0))
            result.append(ins(ret, 0, 0, snapLength))
            return result
        }
        let v4Block = block(load: [ins(ld, 0, 0, 30)], values: v4)
        // ICMPv6 (next header 58 right after the fixed header) passes; the accept is at the end of the block.
        var v6Block: [Instruction] = [ins(ret, 0, 0, snapLength)]
        if let v6, v6.count <= maximumAddresses {
            // ldb [20]; jeq 58 → the block's final accept (past the load, the compares and the reject).
            v6Block =
                [ins(ldb, 0, 0, 20), ins(jeq, UInt8(v6.count + 2), 0, 58)]
                + block(load: [ins(ld, 0, 0, 50)], values: v6)
        }
        // Frames this machine sends come back to a packet socket as PACKET_OUTGOING. The proxy's own ARP and
        // neighbour discovery are dropped here (a takeover of many hosts would otherwise feed every announcement
        // back to the engine); its kernel's IP to a sleeping host passes (that SYN must wake it).
        var program = [
            ins(ld, 0, 0, skfAncillaryPacketType),
            ins(jeq, 0, 6, packetOutgoing),
            ins(ldh, 0, 0, 12),
            ins(jeq, 3, 0, 0x0806),
            ins(jeq, 0, 3, 0x86DD),
            ins(ldb, 0, 0, 20),
            ins(jeq, 0, 1, 58),
            ins(ret, 0, 0, 0),
        ]
        // Every frame an adopted host sends (its MAC the Ethernet source: docs/adoption.md): its mDNS, its
        // addresses, its signs of life. The MAC's first four bytes at offset 6, its last two at 10.
        let sources = Array(Set(macs.map(\.rawValue))).sorted().prefix(maximumMACs)
        if !sources.isEmpty {
            for (i, mac) in sources.enumerated() {
                let remaining = sources.count - 1 - i
                program.append(ins(ld, 0, 0, 6))
                program.append(ins(jeq, 0, 2, UInt32(truncatingIfNeeded: mac >> 16)))
                program.append(ins(ldh, 0, 0, 10))
                program.append(ins(jeq, UInt8(remaining * 4 + 1), 0, UInt32(mac & 0xFFFF)))
            }
            program.append(ins(ja, 0, 0, 1))
            program.append(ins(ret, 0, 0, snapLength))
        }
        if nameService { program += self.nameServiceBlock }
        program.append(ins(ldh, 0, 0, 12))
        program.append(ins(jeq, 0, 1, 0x0806))
        program.append(ins(ret, 0, 0, snapLength))
        program.append(ins(jeq, 0, UInt8(v4Block.count), 0x0800))
        program += v4Block
        program.append(ins(jeq, 0, UInt8(v6Block.count), 0x86DD))
        program += v6Block
        program.append(ins(ret, 0, 0, 0))
        return program
    }

    /// UDP to port 137, 5355 or 3702 over IPv4 (a first fragment: only it has the ports), or to 5355 or 3702 over
    /// IPv6 (no extension header, as LLMNR and WS-Discovery are sent): accepted; anything else goes on to the blocks
    /// after it. Eighteen instructions; the jumps count from the instruction after each.
    static let nameServiceBlock: [Instruction] = [
        ins(ldh, 0, 0, 12),
        ins(jeq, 0, 9, 0x0800),  // IPv6 → 11
        ins(ldb, 0, 0, 23),
        ins(jeq, 0, 14, 17),  // not UDP → 18
        ins(ldh, 0, 0, 20),
        ins(jset, 12, 0, 0x1FFF),  // a later fragment → 18
        ins(ldxMSH, 0, 0, 14),
        ins(ldhIndirect, 0, 0, 16),  // the destination port: 14 + header + 2
        ins(jeq, 8, 0, nameServicePorts.netbios),  // → 17
        ins(jeq, 7, 0, nameServicePorts.llmnr),  // → 17
        ins(jeq, 6, 7, nameServicePorts.wsd),  // → 17, else 18
        ins(jeq, 0, 6, 0x86DD),  // → 18
        ins(ldb, 0, 0, 20),
        ins(jeq, 0, 4, 17),  // → 18
        ins(ldh, 0, 0, 56),
        ins(jeq, 1, 0, nameServicePorts.llmnr),  // → 17
        ins(jeq, 0, 1, nameServicePorts.wsd),  // → 18
        ins(ret, 0, 0, snapLength),
    ]
}
