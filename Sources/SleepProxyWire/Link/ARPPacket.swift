import NIOCore

/// An ARP packet for IPv4 over Ethernet (RFC 826), the only kind a sleep proxy speaks.
///
///     htype 1 (2) | ptype 0x0800 (2) | hlen 6 (1) | plen 4 (1) | op (2) | sha (6) | spa (4) | tha (6) | tpa (4)
///
/// RFC 5227 §2.1.1 and §3 name the two special requests address takeover relies on: a probe (sender IP
/// 0.0.0.0) asks "is anyone using this address?", an announcement (sender IP = target IP) says "I am".
public struct ARPPacket: Hashable, Sendable {
    /// 28 bytes for Ethernet/IPv4; anything after it in a frame is padding.
    public static let length = 28

    public enum Operation: UInt16, Sendable {
        case request = 1
        case reply = 2
    }

    public var operation: Operation
    public var senderMAC: MACAddress
    public var senderIP: IPv4Address
    public var targetMAC: MACAddress
    public var targetIP: IPv4Address

    public init(
        operation: Operation, senderMAC: MACAddress, senderIP: IPv4Address, targetMAC: MACAddress, targetIP: IPv4Address
    ) {
        self.operation = operation
        self.senderMAC = senderMAC
        self.senderIP = senderIP
        self.targetMAC = targetMAC
        self.targetIP = targetIP
    }

    /// RFC 5227 §2.1.1: a request with sender IP 0.0.0.0 and the tested address as target.
    public var isProbe: Bool { self.operation == .request && self.senderIP == .any }
    /// RFC 5227 §3: a request (or, from some stacks, a reply) whose sender and target IP are both the claimed one.
    public var isAnnouncement: Bool { self.senderIP == self.targetIP && self.senderIP != .any }

    /// Probe for `address`, sent by `sender` (RFC 5227 §2.1.1: target MAC zero).
    public static func probe(from sender: MACAddress, for address: IPv4Address) -> ARPPacket {
        ARPPacket(operation: .request, senderMAC: sender, senderIP: .any, targetMAC: .zero, targetIP: address)
    }

    /// Gratuitous ARP announcing that `mac` now answers for `address` (RFC 5227 §3).
    public static func announcement(from mac: MACAddress, for address: IPv4Address) -> ARPPacket {
        ARPPacket(operation: .request, senderMAC: mac, senderIP: address, targetMAC: .zero, targetIP: address)
    }

    /// Reply to `request` saying that `mac` has the address it asked for.
    public static func reply(to request: ARPPacket, from mac: MACAddress) -> ARPPacket {
        ARPPacket(
            operation: .reply, senderMAC: mac, senderIP: request.targetIP, targetMAC: request.senderMAC,
            targetIP: request.senderIP)
    }

    public init(decoding buffer: ByteBuffer) throws(WireError) {
        self = try buffer.decode { (reader: inout ByteReader) throws(WireError) in
            let hardware = try reader.readUInt16("ARP hardware type")
            let proto = try reader.readUInt16("ARP protocol type")
            let hardwareLength = try reader.readUInt8("ARP hardware length")
            let protocolLength = try reader.readUInt8("ARP protocol length")
            guard hardware == 1, proto == EtherType.ipv4.rawValue, hardwareLength == 6, protocolLength == 4 else {
                throw WireError(.unsupported, at: 0, "ARP for hardware \(hardware), protocol \(proto)")
            }
            let rawOperation = try reader.readUInt16("ARP operation")
            guard let operation = Operation(rawValue: rawOperation) else {
                throw WireError(.unsupported, at: 6, "ARP operation \(rawOperation)")
            }
            return ARPPacket(
                operation: operation,
                senderMAC: try reader.readMAC("ARP sender MAC"),
                senderIP: try reader.readIPv4("ARP sender IP"),
                targetMAC: try reader.readMAC("ARP target MAC"),
                targetIP: try reader.readIPv4("ARP target IP")
            )
        }
    }

    public func write(to buffer: inout ByteBuffer) {
        buffer.writeInteger(UInt16(1))
        buffer.writeInteger(EtherType.ipv4.rawValue)
        buffer.writeInteger(UInt8(6))
        buffer.writeInteger(UInt8(4))
        buffer.writeInteger(self.operation.rawValue)
        buffer.writeBytes(self.senderMAC.bytes)
        buffer.writeInteger(self.senderIP.rawValue)
        buffer.writeBytes(self.targetMAC.bytes)
        buffer.writeInteger(self.targetIP.rawValue)
    }

    /// The whole Ethernet frame (padded to 60 bytes). `source` must be the sending interface's real MAC: Apple's
    /// code writes a broken source address that only BPF on macOS repairs (docs/protocol.md §4.3).
    public func frame(destination: MACAddress, source: MACAddress) -> EthernetFrame {
        var payload = ByteBufferAllocator().buffer(capacity: ARPPacket.length)
        self.write(to: &payload)
        return EthernetFrame(destination: destination, source: source, etherType: .arp, payload: payload)
    }
}
