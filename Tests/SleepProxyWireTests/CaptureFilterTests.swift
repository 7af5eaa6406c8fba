import NIOCore
import SleepProxyTestSupport
import Testing

@testable import SleepProxyWire

/// The capture filter, run through a small classic-BPF interpreter with the kernel's rules for the opcodes it uses
/// (a load past the end of the frame drops it; a program must end in a return on every path).
@Suite("Capture filter (classic BPF)")
struct CaptureFilterTests {
    typealias F = CaptureFilter
    static let mac = MACAddress("02:53:50:00:00:20")!
    static let proxy = MACAddress("02:53:50:00:00:01")!

    /// The bytes the kernel would keep (0: dropped), or nil for a program that runs off its end or uses an opcode
    /// this interpreter does not know: both would be bugs.
    static func run(_ program: [F.Instruction], _ frame: [UInt8], outgoing: Bool = false) -> UInt32? {
        var accumulator: UInt32 = 0
        var index: UInt32 = 0
        var pc = 0
        while pc < program.count {
            let instruction = program[pc]
            let k = Int(instruction.k)
            switch instruction.code {
            case F.ld:
                if instruction.k == F.skfAncillaryPacketType {
                    accumulator = outgoing ? F.packetOutgoing : 0
                } else {
                    guard k + 4 <= frame.count else { return 0 }
                    accumulator = frame[k..<k + 4].reduce(0) { $0 << 8 | UInt32($1) }
                }
            case F.ldh:
                guard k + 2 <= frame.count else { return 0 }
                accumulator = UInt32(frame[k]) << 8 | UInt32(frame[k + 1])
            case F.ldb:
                guard k < frame.count else { return 0 }
                accumulator = UInt32(frame[k])
            case F.jeq:
                pc += 1 + Int(accumulator == instruction.k ? instruction.jt : instruction.jf)
                continue
            case F.ja:
                pc += 1 + k
                continue
            case F.jset:
                pc += 1 + Int(accumulator & instruction.k != 0 ? instruction.jt : instruction.jf)
                continue
            case F.ldxMSH:
                guard k < frame.count else { return 0 }
                index = UInt32(frame[k] & 0x0F) * 4
            case F.ldhIndirect:
                let at = Int(index) + k
                guard at + 2 <= frame.count else { return 0 }
                accumulator = UInt32(frame[at]) << 8 | UInt32(frame[at + 1])
            case F.ret:
                return instruction.k
            default:
                return nil
            }
            pc += 1
        }
        return nil
    }

    static func ip(_ destination: IPAddress, proto: IPProtocol = .tcp) -> [UInt8] {
        var payload = ByteBuffer()
        TCPSegment(sourcePort: 40000, destinationPort: 8080, sequenceNumber: 1, flags: .syn).write(to: &payload)
        var packet = ByteBuffer()
        switch destination {
        case .v4(let v4):
            IPv4Packet(
                header: IPv4Header(source: IPv4Address(192, 0, 2, 20), destination: v4, proto: proto), payload: payload
            ).write(to: &packet)
            return EthernetFrame(destination: proxy, source: mac, etherType: .ipv4, payload: packet).bytes
        case .v6(let v6):
            IPv6Packet(
                header: IPv6Header(source: IPv6Address("2001:db8::20")!, destination: v6, nextHeader: proto),
                payload: payload
            ).write(to: &packet)
            return EthernetFrame(destination: proxy, source: mac, etherType: .ipv6, payload: packet).bytes
        }
    }

    static func v4(_ n: Int) -> IPAddress { .v4(IPv4Address(rawValue: 0xC000_0200 &+ UInt32(n))) }
    static func v6(_ n: Int) -> IPAddress { .v6(IPv6Address(high: 0x2001_0DB8_0000_0000, low: 0x1_0000 + UInt64(n))) }

    @Test(arguments: [0, 1, F.maximumAddresses, F.maximumAddresses + 1])
    func everyPathEndsInAReturnWithinTheProgram(count: Int) {
        let program = F.program(addresses: (0..<count).map(Self.v4) + (0..<count).map(Self.v6))
        for (index, instruction) in program.enumerated() where instruction.code == F.jeq {
            #expect(
                index + 1 + Int(max(instruction.jt, instruction.jf)) < program.count,
                "jump at \(index) leaves the program")
        }
        #expect(program.last?.code == F.ret)
        #expect(program.count <= 4096, "BPF_MAXINSNS")
    }

    @Test func atTheLimitOnlyWatchedAddressesPassAndOneMoreLetsTheFamilyThrough() {
        let n = F.maximumAddresses
        let atLimit = F.program(addresses: (0..<n).map(Self.v4) + (0..<n).map(Self.v6))
        for i in [0, n / 2, n - 1] {
            #expect(Self.run(atLimit, Self.ip(Self.v4(i))) == F.snapLength, "IPv4 watched #\(i)")
            #expect(Self.run(atLimit, Self.ip(Self.v6(i))) == F.snapLength, "IPv6 watched #\(i)")
        }
        #expect(Self.run(atLimit, Self.ip(Self.v4(n))) == 0, "an IPv4 address past the watched ones")
        #expect(Self.run(atLimit, Self.ip(Self.v6(n))) == 0, "an IPv6 address past the watched ones")
        let pastLimit = F.program(addresses: (0...n).map(Self.v4) + (0...n).map(Self.v6))
        #expect(
            Self.run(pastLimit, Self.ip(Self.v4(n + 500))) == F.snapLength,
            "N+1 IPv4 addresses: the family passes whole")
        #expect(
            Self.run(pastLimit, Self.ip(Self.v6(n + 500))) == F.snapLength,
            "N+1 IPv6 addresses: the family passes whole")
    }

    /// Adopted hosts (docs/adoption.md): every frame whose Ethernet source is one of their MACs passes, up to
    /// `maximumMACs`; other sources' frames to unwatched addresses still do not.
    @Test(arguments: [1, F.maximumMACs])
    func everyFrameFromAnAdoptedMACPasses(count: Int) {
        let macs = (0..<UInt64(count)).map { MACAddress(rawValue: 0x0253_5001_0000 + $0) }
        let program = F.program(v4: [IPv4Address(192, 0, 2, 2)], v6: [], macs: macs)
        #expect(program.count < 4_096)
        func frame(from mac: MACAddress) -> [UInt8] {
            var bytes = Self.ip(IPAddress("192.0.2.99")!, proto: .udp)
            bytes.replaceSubrange(6..<12, with: mac.bytes)
            return bytes
        }
        for mac in macs { #expect(Self.run(program, frame(from: mac)) == F.snapLength) }
        // Same first four bytes, other last two; and another MAC altogether.
        #expect(Self.run(program, frame(from: MACAddress(rawValue: 0x0253_5001_0000 + UInt64(count)))) == 0)
        #expect(Self.run(program, frame(from: Self.mac)) == 0)
        #expect(Self.run(program, Self.ip(IPAddress("192.0.2.2")!)) == F.snapLength)
        // One more than the filter holds: the extra MAC is left out, the program still well formed.
        let tooMany = macs + (0...UInt64(F.maximumMACs - count)).map { MACAddress(rawValue: 0x0253_5002_0000 + $0) }
        let capped = F.program(v4: [], v6: [], macs: tooMany)
        #expect(Self.run(capped, frame(from: macs[0])) == F.snapLength)
        #expect(tooMany.count == F.maximumMACs + 1)
    }

    @Test func whatMustPassAndWhatMustNot() {
        let watched: [IPAddress] = [IPAddress("192.0.2.2")!, IPAddress("2001:db8::2")!]
        let program = F.program(addresses: watched)
        let arp = ARPPacket.probe(from: Self.mac, for: IPv4Address(192, 0, 2, 9)).frame(
            destination: .broadcast, source: Self.mac
        ).bytes
        let ns = NeighborDiscoveryMessage(kind: .solicitation, target: IPv6Address("2001:db8::9")!)
            .frame(
                ethernetSource: Self.mac,
                ethernetDestination: IPv6Address("2001:db8::9")!.solicitedNodeMulticast.multicastMAC, source: .any,
                destination: IPv6Address("2001:db8::9")!.solicitedNodeMulticast
            ).bytes
        // Every ARP and neighbour discovery from others, and IP to a watched address, whoever sends it.
        #expect(Self.run(program, arp) == F.snapLength)
        #expect(Self.run(program, ns) == F.snapLength)
        #expect(Self.run(program, Self.ip(watched[0])) == F.snapLength)
        #expect(Self.run(program, Self.ip(watched[1])) == F.snapLength)
        #expect(
            Self.run(program, Self.ip(watched[0]), outgoing: true) == F.snapLength,
            "the proxy machine's own SYN to a sleeping host wakes it")
        #expect(Self.run(program, Self.ip(watched[1], proto: .udp)) == F.snapLength)
        // Not: the proxy's own ARP and ND, IP to anyone else, other EtherTypes, runts.
        #expect(Self.run(program, arp, outgoing: true) == 0)
        #expect(Self.run(program, ns, outgoing: true) == 0)
        #expect(Self.run(program, Self.ip(IPAddress("192.0.2.3")!)) == 0)
        #expect(Self.run(program, Self.ip(IPAddress("2001:db8::3")!, proto: .udp)) == 0)
        #expect(Self.run(program, Self.ip(IPAddress("192.0.2.3")!), outgoing: true) == 0)
        var lldp = arp
        lldp[12] = 0x88
        lldp[13] = 0xCC
        #expect(Self.run(program, lldp) == 0)
        for length in [0, 10, 13, 14, 20] {
            #expect(Self.run(program, Array(Self.ip(watched[0]).prefix(length))) == 0, "a \(length)-byte runt")
        }
    }

    /// "The whole family" (nil), as the takeover says it past the limit without listing the addresses, is the
    /// program that one address too many makes.
    @Test func aWholeFamilyIsTheProgramOfOneAddressTooMany() {
        let many = (0...F.maximumAddresses).map { IPv4Address(rawValue: 0xC633_6400 + UInt32($0)) }
        let few = [IPv6Address(high: 0x2001_0DB8_0000_0000, low: 2)]
        #expect(F.program(v4: nil, v6: few) == F.program(addresses: many.map(IPAddress.v4) + few.map(IPAddress.v6)))
        #expect(
            F.program(v4: [], v6: nil)
                == F.program(
                    addresses: (0...F.maximumAddresses).map {
                        IPAddress.v6(IPv6Address(high: 0xFE80_0000_0000_0000, low: UInt64($0)))
                    }))
    }

    @Test func nameServiceQueriesPassOnlyWhenAskedFor() {
        func udp(_ destination: IPAddress, port: UInt16, optionsWords: Int = 0) -> [UInt8] {
            let source: IPAddress
            if case .v4 = destination { source = IPAddress("192.0.2.20")! } else { source = IPAddress("fe80::20")! }
            var bytes = TestFrames.udp(
                from: Self.mac, to: .broadcast, source: source, destination: destination, sourcePort: 40000, port: port)
            if optionsWords > 0 {
                // IPv4 options (a router alert, say) move the UDP header.
                bytes.insert(contentsOf: [UInt8](repeating: 1, count: optionsWords * 4), at: 34)
                bytes[14] = 0x45 + UInt8(optionsWords)
            }
            return bytes
        }
        let broadcast = IPAddress("192.0.2.255")!
        let llmnr4 = IPAddress("224.0.0.252")!
        let llmnr6 = IPAddress("ff02::1:3")!
        let plain = F.program(v4: [], v6: [])
        let windows = F.program(v4: [], v6: [], nameService: true)
        let wsd4 = IPAddress("239.255.255.250")!
        let wsd6 = IPAddress("ff02::c")!
        for frame in [
            udp(broadcast, port: 137), udp(llmnr4, port: 5355), udp(llmnr6, port: 5355), udp(wsd4, port: 3702),
            udp(wsd6, port: 3702),
        ] {
            #expect(Self.run(plain, frame) == 0)
            #expect(Self.run(windows, frame) == F.snapLength)
        }
        #expect(Self.run(windows, udp(broadcast, port: 137, optionsWords: 1)) == F.snapLength)
        // Other ports, SSDP's included, other protocols, later fragments and IPv6 to 137: not passed.
        #expect(Self.run(windows, udp(broadcast, port: 138)) == 0)
        #expect(Self.run(windows, udp(wsd4, port: 1900)) == 0)
        #expect(Self.run(windows, udp(wsd6, port: 1900)) == 0)
        #expect(Self.run(windows, udp(llmnr6, port: 137)) == 0)
        var fragment = udp(broadcast, port: 137)
        fragment[21] = 0x10
        #expect(Self.run(windows, fragment) == 0)
        var tcp = udp(broadcast, port: 137)
        tcp[23] = 6
        #expect(Self.run(windows, tcp) == 0)
        // What passed before still does.
        let arp = ARPPacket.probe(from: Self.mac, for: IPv4Address(192, 0, 2, 9)).frame(
            destination: .broadcast, source: Self.mac
        ).bytes
        #expect(Self.run(windows, arp) == F.snapLength)
        for length in [0, 14, 30, 35] {
            #expect(Self.run(windows, Array(udp(broadcast, port: 137).prefix(length))) == 0, "a \(length)-byte runt")
        }
    }
}
