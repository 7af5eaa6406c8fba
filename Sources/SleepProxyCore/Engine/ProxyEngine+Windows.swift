import NIOCore
import SleepProxyWire

/// The Windows name protocols for adopted PCs (docs/windows.md): their names asked while they are awake, and
/// answered while they sleep; a client that resolved a PC that way vouches for its connection, as an mDNS
/// resolve does.
extension ProxyEngine {
    /// A client's NetBIOS or LLMNR question (the caller checked the port with `WindowsFrames.isNameService`).
    /// Other datagrams to those ports, including a held host's own, go the usual way.
    mutating func windowsFrame(_ bytes: [UInt8], context: InterfaceContext, now: Timestamp) -> [EngineAction] {
        guard let frame = try? EthernetFrame(decoding: ByteBuffer(bytes: bytes)), frame.source != context.macAddress,
            let (source, destination, datagram) = WindowsFrames.udp(in: frame)
        else { return self.afterWindows(bytes, context: context, now: now) }
        guard
            let answer = self.windows.receive(
                datagram, source: source, destination: destination, sourceMAC: frame.source, context: context)
        else { return self.afterWindows(bytes, context: context, now: now) }
        if answer.resolves { self.takeover?.noteResolve(by: answer.asker, of: answer.host, now: now) }
        return [.packet(.sendFrame(answer.frame, interfaceIndex: context.index))]
    }

    /// A frame the Windows side did not answer: what the engine does with any frame.
    private mutating func afterWindows(_ bytes: [UInt8], context: InterfaceContext, now: Timestamp) -> [EngineAction] {
        var actions: [EngineAction] = []
        if self.adoption.isFromAdopted(bytes) { actions += self.adoptionFrame(bytes, context: context, now: now) }
        return actions
            + self.withTakeover(now: now) {
                $0.receive(frame: bytes, interfaceIndex: context.index, outgoing: false, now: now)
            }
    }

    /// The questions that teach an awake PC's names (docs/windows.md §2), unicast to its MAC from the proxy's own
    /// IPv4 address on the port of each protocol (a responder answers to the port asked from).
    func windowsQuestions(_ heard: AdoptionHeard, context: InterfaceContext) -> [EngineAction] {
        guard let own = context.prefixes.lazy.compactMap({ if case .v4(let a) = $0.address { a } else { nil } }).first
        else { return [] }
        var questions: [(IPv4Address, UInt16, [UInt8])] = []
        if let address = heard.askNodeStatus {
            questions.append(
                (
                    address, WindowsRules.netbiosPort,
                    NetBIOSMessage.nodeStatusQuery(id: Self.questionID(heard.mac)).encoded()
                ))
        }
        if let (name, address) = heard.askLLMNR, let asked = try? DNSName(labels: [name]) {
            let query = DNSMessage(id: Self.questionID(heard.mac), questions: [DNSQuestion(name: asked, type: .a)])
            questions.append((address, WindowsRules.llmnrPort, query.encoded()))
        }
        return questions.compactMap { address, port, payload in
            Takeover.datagramFrame(
                from: .v4(own), port: port, to: .v4(address), port: port, mac: heard.mac, payload: payload,
                context: context
            ).map { .packet(.sendFrame($0, interfaceIndex: context.index)) }
        }
    }

    /// A check of a PC that publishes nothing over mDNS but has NetBIOS names (docs/windows.md §4): a node-status
    /// query unicast to it, which its sleeping NIC cannot answer as it answers ARP. Node status, not a name query:
    /// Windows and Samba's nmbd both answer it unicast, where nmbd leaves a unicast name query to a WINS server.
    func windowsCheck(_ mac: MACAddress, address: IPv4Address, context: InterfaceContext) -> [EngineAction] {
        guard let own = context.prefixes.lazy.compactMap({ if case .v4(let a) = $0.address { a } else { nil } }).first,
            let frame = Takeover.datagramFrame(
                from: .v4(own), port: WindowsRules.netbiosPort, to: .v4(address), port: WindowsRules.netbiosPort,
                mac: mac, payload: NetBIOSMessage.nodeStatusQuery(id: Self.questionID(mac)).encoded(), context: context)
        else { return [] }
        return [.packet(.sendFrame(frame, interfaceIndex: context.index))]
    }

    /// The transaction ID of the proxy's questions to a host: any value does (only the host's answer is read, by
    /// its MAC); one per host keeps two hosts' answers apart in a capture.
    static func questionID(_ mac: MACAddress) -> UInt16 { UInt16(truncatingIfNeeded: mac.rawValue) }
}

/// Reading the frames the Windows side wants straight from their bytes: every frame of the link passes here.
public enum WindowsFrames {
    /// Whether the frame is UDP (IPv4 first fragment, or IPv6 without extension headers) to port 137 or 5355.
    public static func isNameService(_ bytes: [UInt8]) -> Bool {
        guard bytes.count >= 14 else { return false }
        let etherType = UInt16(bytes[12]) << 8 | UInt16(bytes[13])
        let portAt: Int
        switch etherType {
        case 0x0800:
            guard bytes.count >= 34, bytes[23] == 17, bytes[20] & 0x1F == 0, bytes[21] == 0 else { return false }
            portAt = 14 + Int(bytes[14] & 0x0F) * 4 + 2
        case 0x86DD:
            guard bytes.count >= 62, bytes[20] == 17 else { return false }
            portAt = 14 + 40 + 2
        default:
            return false
        }
        guard bytes.count >= portAt + 2 else { return false }
        let port = UInt16(bytes[portAt]) << 8 | UInt16(bytes[portAt + 1])
        return port == WindowsRules.netbiosPort || port == WindowsRules.llmnrPort
    }

    /// The UDP datagram a frame carries, with its addresses; nil when it does not decode.
    static func udp(in frame: EthernetFrame) -> (IPAddress, IPAddress, UDPDatagram)? {
        switch frame.etherType {
        case .ipv4:
            guard let packet = try? IPv4Packet(decoding: frame.payload), packet.header.proto == .udp,
                let datagram = try? UDPDatagram(decoding: packet.payload)
            else { return nil }
            return (.v4(packet.header.source), .v4(packet.header.destination), datagram)
        case .ipv6:
            guard let packet = try? IPv6Packet(decoding: frame.payload), packet.upperLayerProtocol == .udp,
                let datagram = try? UDPDatagram(decoding: packet.payload)
            else { return nil }
            return (.v6(packet.header.source), .v6(packet.header.destination), datagram)
        default:
            return nil
        }
    }
}
