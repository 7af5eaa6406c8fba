import NIOCore
import SleepProxyCore
import SleepProxyWire

/// Windows' name services in an engine program (docs/windows.md): a PC teaching its names while awake (its NetBIOS
/// registration, its answers to the proxy's node-status and LLMNR questions, its WS-Discovery Hello or match),
/// clients asking for it (a NetBIOS name query, node status, LLMNR, a WS-Discovery Probe or Resolve, a connection to
/// its metadata port), and raw bytes on those ports from a client or from the PC itself. Shared with the fuzz target
/// as EngineProgram.swift is (a symbolic link there).
extension EngineProgram {
    static let proxyV4 = IPv4Address(192, 0, 2, 1)
    static let strangerV4 = IPv4Address(192, 0, 2, 99)
    static let subnetBroadcast = IPv4Address(192, 0, 2, 255)
    static let llmnrGroupMAC = MACAddress("01:00:5e:00:00:fc")!
    static let computerType = WSDiscoveryMessage.QName(
        namespace: "http://schemas.microsoft.com/windows/pub/2005/07", local: "Computer")

    static func netbiosName(_ host: Int, suffix: UInt8) -> NetBIOSName { NetBIOSName("HOST\(host)", suffix: suffix)! }

    /// The PC's WS-Discovery endpoint: stable per machine, as Windows keeps it.
    static func endpoint(_ host: Int) -> String { "urn:uuid:6bd51d6a-0000-4000-8000-02535000000\(host)" }

    static func udpFrame(
        from mac: MACAddress, to destinationMAC: MACAddress, source: IPv4Address, destination: IPv4Address,
        ports: (UInt16, UInt16), payload: [UInt8]
    ) -> [UInt8] {
        var datagram = ByteBuffer()
        UDPDatagram(sourcePort: ports.0, destinationPort: ports.1, payload: ByteBuffer(bytes: payload)).write(
            to: &datagram)
        var packet = ByteBuffer()
        IPv4Packet(header: IPv4Header(source: source, destination: destination, proto: .udp), payload: datagram)
            .write(to: &packet)
        return EthernetFrame(destination: destinationMAC, source: mac, etherType: .ipv4, payload: packet).bytes
    }

    /// After a step of time, a Windows client may ask for a PC held asleep (unless the program's next byte says
    /// not): random bytes alone rarely named, within its sleep, the one host that had taught its names, and the
    /// answering went mostly untried. Nothing is read when no PC sleeps.
    mutating func windowsClientAsks() -> [EngineAction] {
        guard (0..<Self.hostCount).contains(where: self.isSleepingPC), let pick = self.byte(), pick & 3 == 0 else {
            return []
        }
        return self.windowsFrame(
            self.sleepingPC(preferring: Int(pick >> 2) % Self.hostCount), kind: 4 + Int(pick >> 2) % 5, pick: pick)
    }

    mutating func windowsFrame(_ host: Int) -> [EngineAction] {
        let pick = self.byte() ?? 0
        return self.windowsFrame(host, kind: Int(pick % 10), pick: pick)
    }

    /// `kind`: what is sent (0-3 the PC teaching, 4-8 a client asking, 9 raw bytes); `pick` its variant.
    mutating func windowsFrame(_ host: Int, kind: Int, pick: UInt8) -> [EngineAction] {
        let mac = Self.mac(host)
        let address = IPv4Address(192, 0, 2, UInt8(2 + host))
        // Its file-server name or its workstation name; a Hello or a match; an A or an AAAA question.
        let either = pick & 0x10 == 0
        let name = Self.netbiosName(host, suffix: either ? 0x20 : 0x00)
        let bytes: [UInt8]
        switch kind {
        case 0:
            // The PC registers a name, broadcast (at its start and after each resume): flags 0x2910, the name's
            // NB_FLAGS and address in the additional record (RFC 1002 §4.2.2).
            var message = NetBIOSMessage(id: UInt16(pick), flags: 0x2910)
            message.questions = [.init(name: name, type: NetBIOSMessage.typeNB)]
            message.additionals = [
                .init(name: name, type: NetBIOSMessage.typeNB, ttl: 300_000, rdata: [0, 0] + Self.octets(address))
            ]
            bytes = Self.udpFrame(
                from: mac, to: .broadcast, source: address, destination: Self.subnetBroadcast, ports: (137, 137),
                payload: message.encoded())
        case 1:
            // Its answer to the proxy's node-status question: its names, a group, its MAC as the unit ID.
            let names = [
                NetBIOSMessage.NodeStatusEntry(
                    name: Self.netbiosName(host, suffix: 0), flags: NetBIOSMessage.activeBit),
                NetBIOSMessage.NodeStatusEntry(
                    name: Self.netbiosName(host, suffix: 0x20), flags: NetBIOSMessage.activeBit),
                NetBIOSMessage.NodeStatusEntry(
                    name: NetBIOSName("WORKGROUP", suffix: 0)!,
                    flags: NetBIOSMessage.groupBit | NetBIOSMessage.activeBit),
            ]
            let unit = (0..<6).map { UInt8(truncatingIfNeeded: mac.rawValue >> (40 - 8 * $0)) }
            let statistics = unit + [UInt8](repeating: 0, count: NetBIOSMessage.statisticsLength - unit.count)
            let query = NetBIOSMessage.nodeStatusQuery(id: UInt16(truncatingIfNeeded: mac.rawValue))
            bytes = Self.udpFrame(
                from: mac, to: Self.interface.macAddress, source: address, destination: Self.proxyV4,
                ports: (137, 137),
                payload: NetBIOSMessage.nodeStatusResponse(to: query, names: names, statistics: statistics).encoded())
        case 2:
            // Its LLMNR answer to the proxy: flags 0x8000, the bare name, TTL 30 (RFC 4795 §2.1.1).
            let asked = try! DNSName(labels: ["HOST\(host)"])
            let message = DNSMessage(
                id: UInt16(pick), flags: .init(response: true), questions: [DNSQuestion(name: asked, type: .a)],
                answers: [DNSResourceRecord(name: asked, ttl: 30, rdata: .a(.init(address: address)))])
            bytes = Self.udpFrame(
                from: mac, to: Self.interface.macAddress, source: address, destination: Self.proxyV4,
                ports: (5355, 5355), payload: message.encoded())
        case 3:
            // Its Hello (its WS-Discovery service starting, multicast) or its match to the proxy's Probe.
            var message = WSDiscoveryMessage(
                kind: either ? .hello : .probeMatches, messageID: WindowsNames.uuid(UInt64(host), UInt64(pick)))
            message.endpoint = Self.endpoint(host)
            message.types = [WindowsNames.deviceType, Self.computerType]
            message.xaddrs = "http://192.0.2.\(2 + host):5357/6bd51d6a-0000-4000-8000-02535000000\(host)"
            message.metadataVersion = "1"
            message.instanceID = "1795825739"
            message.messageNumber = "\(pick)"
            bytes =
                either
                ? Self.udpFrame(
                    from: mac, to: WindowsRules.wsdGroupV4MAC, source: address, destination: WindowsRules.wsdGroupV4,
                    ports: (45558, 3702), payload: message.encoded())
                : Self.udpFrame(
                    from: mac, to: Self.interface.macAddress, source: address, destination: Self.proxyV4,
                    ports: (3702, 3702), payload: message.encoded())
        case 4:
            // A client's name query, broadcast (Windows, smbclient, nmblookup): flags 0x0110.
            var message = NetBIOSMessage(id: 0x0100 | UInt16(pick), flags: 0x0110)
            message.questions = [.init(name: name, type: NetBIOSMessage.typeNB)]
            bytes = Self.udpFrame(
                from: Self.strangerMAC, to: .broadcast, source: Self.strangerV4, destination: Self.subnetBroadcast,
                ports: (55849, 137), payload: message.encoded())
        case 5:
            // Node status, unicast to the PC's address (`nmblookup -A`), which the proxy may have claimed.
            bytes = Self.udpFrame(
                from: Self.strangerMAC, to: Self.interface.macAddress, source: Self.strangerV4, destination: address,
                ports: (55850, 137), payload: NetBIOSMessage.nodeStatusQuery(id: UInt16(pick)).encoded())
        case 6:
            // LLMNR for its bare name, in either case (RFC 4795 compares names without it).
            let asked = try! DNSName(labels: [pick & 0x20 == 0 ? "HOST\(host)" : "host\(host)"])
            let message = DNSMessage(id: UInt16(pick), questions: [DNSQuestion(name: asked, type: either ? .a : .aaaa)])
            bytes = Self.udpFrame(
                from: Self.strangerMAC, to: Self.llmnrGroupMAC, source: Self.strangerV4,
                destination: WindowsRules.llmnrGroupV4, ports: (50000, 5355), payload: message.encoded())
        case 7:
            // Explorer's Probe for devices, or its Resolve of the PC's endpoint, multicast.
            var message = WSDiscoveryMessage(
                kind: either ? .probe : .resolve, messageID: WindowsNames.uuid(99, UInt64(pick)))
            if either { message.types = [WindowsNames.deviceType] } else { message.endpoint = Self.endpoint(host) }
            bytes = Self.udpFrame(
                from: Self.strangerMAC, to: WindowsRules.wsdGroupV4MAC, source: Self.strangerV4,
                destination: WindowsRules.wsdGroupV4, ports: (35977, 3702), payload: message.encoded())
        case 8:
            // Explorer's metadata Get: a connection to port 5357 on the PC's address.
            var segment = ByteBuffer()
            TCPSegment(
                sourcePort: 47918, destinationPort: WindowsRules.wsdMetadataPort, sequenceNumber: UInt32(pick),
                flags: .syn, window: 64240
            ).write(to: &segment)
            var packet = ByteBuffer()
            IPv4Packet(header: IPv4Header(source: Self.strangerV4, destination: address, proto: .tcp), payload: segment)
                .write(to: &packet)
            bytes =
                EthernetFrame(
                    destination: Self.interface.macAddress, source: Self.strangerMAC, etherType: .ipv4, payload: packet
                ).bytes
        default:
            // Anything at all on a name-service port, from a client or from the PC itself (what it teaches is read
            // from such frames).
            let length = Int(self.byte() ?? 0) % Self.rawLength
            let payload = self.bytes(length)
            let port: UInt16 = [137, 5355, 3702][Int(pick >> 5) % 3]
            let fromPC = pick & 0x10 != 0
            bytes = Self.udpFrame(
                from: fromPC ? mac : Self.strangerMAC, to: .broadcast, source: fromPC ? address : Self.strangerV4,
                destination: Self.subnetBroadcast, ports: (port, port), payload: payload)
        }
        return self.engine.receiveFrame(bytes, interfaceIndex: Self.interface.index, outgoing: false, now: self.now)
    }

    /// A host held asleep that showed Windows names.
    func isSleepingPC(_ host: Int) -> Bool {
        let key = OwnerKey(interface: Self.interface.name, primaryMAC: Self.mac(host))
        return self.engine.state(of: key) == .asleep && self.engine.registration(key)?.windows?.isEmpty == false
    }

    /// `host` if it is a PC held asleep, else the first of the program's hosts that is, else `host`.
    func sleepingPC(preferring host: Int) -> Int {
        self.isSleepingPC(host) ? host : (0..<Self.hostCount).first(where: self.isSleepingPC) ?? host
    }

    static func octets(_ address: IPv4Address) -> [UInt8] {
        [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: address.rawValue >> $0) }
    }

    /// A frame from one of the program's hosts' IPv4 addresses and a name-service port: the proxy answering for a
    /// sleeping PC (its own questions go from its own address).
    static func isWindowsAnswer(_ action: EngineAction) -> Bool {
        guard case .packet(.sendFrame(let bytes, _)) = action, bytes.count >= 42, bytes[12] == 0x08, bytes[13] == 0,
            bytes[23] == 17, bytes[26] == 192, bytes[27] == 0, bytes[28] == 2,
            (2..<2 + hostCount).contains(Int(bytes[29]))
        else { return false }
        let portAt = 14 + Int(bytes[14] & 0x0F) * 4
        guard bytes.count >= portAt + 2 else { return false }
        let port = UInt16(bytes[portAt]) << 8 | UInt16(bytes[portAt + 1])
        return port == WindowsRules.netbiosPort || port == WindowsRules.llmnrPort || port == WindowsRules.wsdPort
    }
}
