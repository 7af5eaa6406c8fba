import NIOCore
import SleepProxyWire

/// The Windows name protocols for adopted PCs (docs/windows.md): their names asked while they are awake, and
/// answered while they sleep; a client that resolved a PC that way vouches for its connection, as an mDNS
/// resolve does.
extension ProxyEngine {
    /// A client's NetBIOS, LLMNR or WS-Discovery question (the caller checked the port with
    /// `WindowsFrames.isNameService`). An adopted host's own frame teaches and shows it awake first, whatever it
    /// asks: a held PC's own question (its names checked at resume) hands it back and is never answered for it.
    /// Datagrams not answered here go the usual way.
    mutating func windowsFrame(_ bytes: [UInt8], context: InterfaceContext, now: Timestamp) -> [EngineAction] {
        var actions: [EngineAction] = []
        if self.adoption.isFromAdopted(bytes) { actions += self.adoptionFrame(bytes, context: context, now: now) }
        guard let frame = try? EthernetFrame(decoding: ByteBuffer(bytes: bytes)), frame.source != context.macAddress,
            let (source, destination, datagram) = WindowsFrames.udp(in: frame),
            let answer = self.windows.receive(
                datagram, source: source, destination: destination, sourceMAC: frame.source, context: context, now: now)
        else {
            return actions
                + self.withTakeover(now: now) {
                    $0.receive(frame: bytes, interfaceIndex: context.index, outgoing: false, now: now)
                }
        }
        if answer.resolves { self.takeover?.noteResolve(by: answer.asker, of: answer.host, now: now) }
        actions.append(.packet(.sendFrame(answer.frame, interfaceIndex: context.index)))
        if let name = answer.conflict, let registration = self.registrar.store[answer.host] {
            actions.append(Self.line(for: .netbiosConflict(asker: answer.asker, name: "\(name)"), registration))
            actions += self.withTakeover(now: now) {
                $0.wake(answer.host, trigger: .netbiosConflict(name: name, from: answer.asker), now: now)
            }
        }
        return actions
    }

    /// The questions that teach an awake PC's names (docs/windows.md §2), unicast to its MAC from the proxy's own
    /// IPv4 address on the port of each protocol (a responder answers to the port asked from).
    func windowsQuestions(_ heard: AdoptionHeard, context: InterfaceContext, now: Timestamp) -> [EngineAction] {
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
        var actions: [EngineAction] = questions.compactMap { address, port, payload in
            Takeover.datagramFrame(
                from: .v4(own), port: port, to: .v4(address), port: port, mac: heard.mac, payload: payload,
                context: context
            ).map { .packet(.sendFrame($0, interfaceIndex: context.index)) }
        }
        if let question = heard.askWSD {
            // SOAP-over-UDP: multicast to the group; every device's match comes back unicast, and only the PC's
            // (its MAC the source) is read.
            var message = WSDiscoveryMessage(
                kind: question == .probe ? .probe : .resolve,
                messageID: WindowsNames.uuid(heard.mac.rawValue, UInt64(bitPattern: now.nanoseconds)))
            if question == .probe {
                message.types = [WindowsNames.deviceType]
            } else if case .resolve(let endpoint) = question {
                message.endpoint = endpoint
            }
            if let frame = Takeover.datagramFrame(
                from: .v4(own), port: WindowsRules.wsdPort, to: .v4(WindowsRules.wsdGroupV4),
                port: WindowsRules.wsdPort,
                mac: WindowsRules.wsdGroupV4MAC, payload: message.encoded(), context: context)
            {
                actions.append(.packet(.sendFrame(frame, interfaceIndex: context.index)))
            }
        }
        return actions
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

extension ProxyEngine {
    /// A connection to a sleeping PC's WS-Discovery metadata port (docs/windows.md §5): refused at once with a reset
    /// from its address, so that Explorer's Get fails in a moment instead of waiting out its 10 s, and nothing
    /// wakes the PC (opening the Network view is nobody wanting the PC). Nil when the proxy does not hold such a PC
    /// at the address.
    mutating func refuseMetadata(_ bytes: [UInt8], context: InterfaceContext) -> [EngineAction]? {
        guard let frame = try? EthernetFrame(decoding: ByteBuffer(bytes: bytes)) else { return nil }
        let source: IPAddress
        let destination: IPAddress
        let payload: ByteBuffer
        switch frame.etherType {
        case .ipv4:
            guard let packet = try? IPv4Packet(decoding: frame.payload) else { return nil }
            (source, destination, payload) = (.v4(packet.header.source), .v4(packet.header.destination), packet.payload)
        case .ipv6:
            guard let packet = try? IPv6Packet(decoding: frame.payload) else { return nil }
            (source, destination, payload) = (.v6(packet.header.source), .v6(packet.header.destination), packet.payload)
        default:
            return nil
        }
        guard self.windows.hasEndpoint(at: destination, on: context.name),
            let syn = try? TCPSegment(decoding: payload)
        else { return nil }
        var reset = ByteBuffer()
        TCPSegment(
            sourcePort: syn.destinationPort, destinationPort: syn.sourcePort, sequenceNumber: 0,
            acknowledgementNumber: syn.sequenceNumber &+ 1, flags: [.rst, .ack], window: 0
        ).write(to: &reset)
        var packet = ByteBuffer()
        switch (destination, source) {
        case (.v4(let from), .v4(let to)):
            IPv4Packet(header: IPv4Header(source: from, destination: to, proto: .tcp), payload: reset).write(
                to: &packet)
        case (.v6(let from), .v6(let to)):
            IPv6Packet(header: IPv6Header(source: from, destination: to, nextHeader: .tcp), payload: reset).write(
                to: &packet)
        default:
            return nil
        }
        let out = EthernetFrame(
            destination: frame.source, source: context.macAddress, etherType: frame.etherType, payload: packet)
        self.windows.statistics.metadataRefused += 1
        return [
            .packet(
                .sendFrame(EthernetFrame.withTransportChecksumsRecomputed(out.bytes), interfaceIndex: context.index))
        ]
    }
}

/// Reading the frames the Windows side wants straight from their bytes: every frame of the link passes here.
public enum WindowsFrames {
    /// Whether the frame is UDP (IPv4 first fragment, or IPv6 without extension headers) to port 137, 5355 or 3702.
    public static func isNameService(_ bytes: [UInt8]) -> Bool { Self.nameServicePort(bytes, portOffset: 2) }

    /// Whether the frame is such UDP from one of those ports (an answer, or the proxy's own question).
    public static func isFromNameService(_ bytes: [UInt8]) -> Bool { Self.nameServicePort(bytes, portOffset: 0) }

    /// Read from the bytes before anything is decoded: every captured frame is asked. `portOffset`: 0 for the
    /// source port, 2 for the destination.
    private static func nameServicePort(_ bytes: [UInt8], portOffset: Int) -> Bool {
        guard bytes.count >= 14 else { return false }
        let etherType = UInt16(bytes[12]) << 8 | UInt16(bytes[13])
        let portAt: Int
        switch etherType {
        case 0x0800:
            guard bytes.count >= 34, bytes[23] == 17, bytes[20] & 0x1F == 0, bytes[21] == 0 else { return false }
            portAt = 14 + Int(bytes[14] & 0x0F) * 4 + portOffset
        case 0x86DD:
            guard bytes.count >= 62, bytes[20] == 17 else { return false }
            portAt = 14 + 40 + portOffset
        default:
            return false
        }
        guard bytes.count >= portAt + 2 else { return false }
        let port = UInt16(bytes[portAt]) << 8 | UInt16(bytes[portAt + 1])
        return port == WindowsRules.netbiosPort || port == WindowsRules.llmnrPort || port == WindowsRules.wsdPort
    }

    /// Whether the frame is a TCP connection request (SYN without ACK) to the WS-Discovery metadata port.
    public static func isMetadataConnection(_ bytes: [UInt8]) -> Bool {
        guard bytes.count >= 14 else { return false }
        let etherType = UInt16(bytes[12]) << 8 | UInt16(bytes[13])
        let tcpAt: Int
        switch etherType {
        case 0x0800:
            guard bytes.count >= 34, bytes[23] == 6, bytes[20] & 0x1F == 0, bytes[21] == 0 else { return false }
            tcpAt = 14 + Int(bytes[14] & 0x0F) * 4
        case 0x86DD:
            guard bytes.count >= 54, bytes[20] == 6 else { return false }
            tcpAt = 54
        default:
            return false
        }
        guard bytes.count >= tcpAt + 14 else { return false }
        let port = UInt16(bytes[tcpAt + 2]) << 8 | UInt16(bytes[tcpAt + 3])
        return port == WindowsRules.wsdMetadataPort && bytes[tcpAt + 13] & 0x12 == 0x02
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
