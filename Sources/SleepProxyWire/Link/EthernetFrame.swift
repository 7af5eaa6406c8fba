import NIOCore

/// An Ethernet II EtherType (IEEE 802.3 type field ≥ 0x0600).
public struct EtherType: RawRepresentable, Hashable, Sendable, CustomStringConvertible {
    public let rawValue: UInt16
    public init(rawValue: UInt16) { self.rawValue = rawValue }

    public static let ipv4 = EtherType(rawValue: 0x0800)
    public static let arp = EtherType(rawValue: 0x0806)
    /// The EtherType Apple's proxy and ether-wake use for magic packets.
    public static let wakeOnLAN = EtherType(rawValue: 0x0842)
    /// IEEE 802.1Q customer VLAN tag.
    public static let vlan = EtherType(rawValue: 0x8100)
    public static let ipv6 = EtherType(rawValue: 0x86DD)
    /// IEEE 802.1ad service tag (QinQ outer tag); not decoded.
    public static let serviceVLAN = EtherType(rawValue: 0x88A8)

    public var description: String { "0x" + String(self.rawValue, radix: 16) }
}

/// An IEEE 802.1Q tag control field: priority (3 bits), drop eligible (1), VLAN ID (12).
public struct VLANTag: Hashable, Sendable {
    public var priority: UInt8
    public var dropEligible: Bool
    public var id: UInt16

    public init(id: UInt16, priority: UInt8 = 0, dropEligible: Bool = false) {
        self.id = id & 0x0FFF
        self.priority = priority & 0x07
        self.dropEligible = dropEligible
    }

    init(tci: UInt16) {
        self.priority = UInt8(tci >> 13)
        self.dropEligible = tci & 0x1000 != 0
        self.id = tci & 0x0FFF
    }

    var tci: UInt16 { UInt16(self.priority) << 13 | (self.dropEligible ? 0x1000 : 0) | self.id }
}

/// An Ethernet II frame (without preamble and FCS, as a packet socket hands it over), optionally 802.1Q tagged.
///
///     destination (6) | source (6) | [0x8100 | TCI (2)] | EtherType (2) | payload
public struct EthernetFrame: Hashable, Sendable {
    public static let headerLength = 14
    public static let vlanTagLength = 4
    /// IEEE 802.3: 64 bytes on the wire including the 4-byte FCS, so 60 as a packet socket sees it. Shorter
    /// frames are padded with zeros on send.
    public static let minimumLength = 60

    public var destination: MACAddress
    public var source: MACAddress
    public var vlan: VLANTag?
    public var etherType: EtherType
    /// The bytes after the header, padding included: the protocol inside decides how many it uses.
    public var payload: ByteBuffer

    public init(
        destination: MACAddress, source: MACAddress, vlan: VLANTag? = nil, etherType: EtherType, payload: ByteBuffer
    ) {
        self.destination = destination
        self.source = source
        self.vlan = vlan
        self.etherType = etherType
        self.payload = payload
    }

    public init(decoding buffer: ByteBuffer) throws(WireError) {
        let (destination, source, vlan, etherType, offset) = try buffer.decode {
            (reader: inout ByteReader) throws(WireError) in
            let destination = try reader.readMAC("destination MAC")
            let source = try reader.readMAC("source MAC")
            var type = try reader.readUInt16("EtherType")
            var vlan: VLANTag? = nil
            if type == EtherType.vlan.rawValue {
                vlan = VLANTag(tci: try reader.readUInt16("802.1Q TCI"))
                type = try reader.readUInt16("inner EtherType")
                if type == EtherType.vlan.rawValue || type == EtherType.serviceVLAN.rawValue {
                    throw WireError(.unsupported, at: reader.position - 2, "stacked VLAN tags are not decoded")
                }
            } else if type == EtherType.serviceVLAN.rawValue {
                throw WireError(.unsupported, at: reader.position - 2, "802.1ad service tags are not decoded")
            }
            guard type >= 0x0600 else {
                throw WireError(.unsupported, at: reader.position - 2, "802.3 length field \(type), not an EtherType")
            }
            return (destination, source, vlan, EtherType(rawValue: type), reader.position)
        }
        self.destination = destination
        self.source = source
        self.vlan = vlan
        self.etherType = etherType
        self.payload = buffer.slice(from: offset, length: buffer.readableBytes - offset)
    }

    /// Appends the frame, zero-padded to the 60-byte minimum.
    public func write(to buffer: inout ByteBuffer) {
        let start = buffer.writerIndex
        buffer.writeBytes(self.destination.bytes)
        buffer.writeBytes(self.source.bytes)
        if let vlan = self.vlan {
            buffer.writeInteger(EtherType.vlan.rawValue)
            buffer.writeInteger(vlan.tci)
        }
        buffer.writeInteger(self.etherType.rawValue)
        var payload = self.payload
        buffer.writeBuffer(&payload)
        let written = buffer.writerIndex - start
        if written < EthernetFrame.minimumLength {
            buffer.writeRepeatingByte(0, count: EthernetFrame.minimumLength - written)
        }
    }

    public var bytes: [UInt8] {
        var buffer = ByteBufferAllocator().buffer(capacity: EthernetFrame.headerLength + self.payload.readableBytes + 4)
        self.write(to: &buffer)
        return Array(buffer.readableBytesView)
    }
}
