import NIOCore

/// An ICMPv6 Neighbor Solicitation (type 135) or Advertisement (type 136), RFC 4861 §4.3 and §4.4.
///
///     type (1) | code 0 (1) | checksum (2) | flags R S O + reserved (4) | target address (16) | options...
///
/// Options are type (1), length in units of 8 bytes (1), data; only the Ethernet source and target link-layer
/// address options (types 1 and 2, length 1) are read, others are skipped.
public struct NeighborDiscoveryMessage: Hashable, Sendable {
    /// RFC 4861 §7.1.1, §7.1.2: a node must drop ND packets whose IP hop limit is not 255, so they cannot have
    /// crossed a router.
    public static let requiredHopLimit: UInt8 = 255
    /// type, code, checksum, flags/reserved, target.
    public static let minimumLength = 24

    public enum Kind: UInt8, Hashable, Sendable {
        case solicitation = 135
        case advertisement = 136
    }

    /// RFC 4861 §4.4 NA flags.
    public struct Flags: OptionSet, Hashable, Sendable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        public static let router = Flags(rawValue: 0x80)
        public static let solicited = Flags(rawValue: 0x40)
        public static let override = Flags(rawValue: 0x20)
    }

    public var kind: Kind
    /// Zero for a solicitation.
    public var flags: Flags
    public var target: IPv6Address
    public var sourceLinkLayerAddress: MACAddress?
    public var targetLinkLayerAddress: MACAddress?

    public init(
        kind: Kind, flags: Flags = [], target: IPv6Address, sourceLinkLayerAddress: MACAddress? = nil,
        targetLinkLayerAddress: MACAddress? = nil
    ) {
        self.kind = kind
        self.flags = kind == .solicitation ? [] : flags
        self.target = target
        self.sourceLinkLayerAddress = sourceLinkLayerAddress
        self.targetLinkLayerAddress = targetLinkLayerAddress
    }

    /// Decodes and validates per RFC 4861 §7.1.1 (NS) and §7.1.2 (NA): hop limit 255, correct checksum, code 0,
    /// at least 24 bytes, a unicast target, no zero-length option; an NS from the unspecified address (a DAD
    /// probe) carries no source link-layer address option; an NA to a multicast address does not claim to be
    /// solicited.
    public init(decoding packet: IPv6Packet) throws(WireError) {
        guard packet.upperLayerProtocol == .icmpv6 else {
            throw WireError(.unsupported, at: 0, "\(packet.upperLayerProtocol), not ICMPv6")
        }
        let header = packet.header
        guard header.hopLimit == NeighborDiscoveryMessage.requiredHopLimit else {
            throw WireError(.badHeader, at: 0, "ND hop limit \(header.hopLimit), must be 255")
        }
        let bytes = Array(packet.payload.readableBytesView)
        guard bytes.count >= NeighborDiscoveryMessage.minimumLength else {
            throw WireError(.truncated, at: bytes.count, "ND message of \(bytes.count) bytes")
        }
        guard let kind = Kind(rawValue: bytes[0]) else {
            throw WireError(.unsupported, at: 0, "ICMPv6 type \(bytes[0])")
        }
        guard bytes[1] == 0 else { throw WireError(.badHeader, at: 1, "ND code \(bytes[1]) must be 0") }
        guard
            InternetChecksum.ipv6(
                source: header.source, destination: header.destination, nextHeader: IPProtocol.icmpv6.rawValue,
                payload: bytes) == 0
        else {
            throw WireError(.badChecksum, at: 2, "ICMPv6 checksum does not verify")
        }
        self = try bytes.withByteReader { (reader: inout ByteReader) throws(WireError) in
            try reader.skip(4, "ICMPv6 header")
            let flags = Flags(rawValue: try reader.readUInt8("ND flags") & 0xE0)
            try reader.skip(3, "ND reserved")
            let target = try reader.readIPv6("ND target")
            guard !target.isMulticast else {
                throw WireError(.badHeader, at: 8, "ND target \(target) is multicast")
            }
            var message = NeighborDiscoveryMessage(kind: kind, flags: flags, target: target)
            while reader.remaining > 0 {
                let at = reader.position
                let type = try reader.readUInt8("ND option type")
                let units = Int(try reader.readUInt8("ND option length"))
                // RFC 4861 §4.6: "Nodes MUST silently discard an ND packet that contains an option with length zero."
                guard units > 0 else { throw WireError(.badOption, at: at, "ND option \(type) has length 0") }
                let data = try reader.readBytes(units * 8 - 2, "ND option data")
                if units == 1, type == 1 { message.sourceLinkLayerAddress = MACAddress(bytes: data) }
                if units == 1, type == 2 { message.targetLinkLayerAddress = MACAddress(bytes: data) }
            }
            return message
        }
        if kind == .solicitation, header.source.isUnspecified, self.sourceLinkLayerAddress != nil {
            throw WireError(.badOption, at: 24, "NS from :: must not carry a source link-layer address")
        }
        if kind == .advertisement, header.destination.isMulticast, self.flags.contains(.solicited) {
            throw WireError(.badHeader, at: 4, "NA to a multicast address with the Solicited flag")
        }
    }

    /// The ICMPv6 bytes with a correct checksum for the given IPv6 source and destination.
    public func icmpBytes(source: IPv6Address, destination: IPv6Address) -> [UInt8] {
        var bytes: [UInt8] = [
            self.kind.rawValue, 0, 0, 0, self.kind == .advertisement ? self.flags.rawValue : 0, 0, 0, 0,
        ]
        bytes += self.target.bytes
        if let mac = self.sourceLinkLayerAddress { bytes += [1, 1] + mac.bytes }
        if let mac = self.targetLinkLayerAddress { bytes += [2, 1] + mac.bytes }
        let checksum = InternetChecksum.ipv6(
            source: source, destination: destination, nextHeader: IPProtocol.icmpv6.rawValue, payload: bytes)
        bytes[2] = UInt8(checksum >> 8)
        bytes[3] = UInt8(truncatingIfNeeded: checksum)
        return bytes
    }

    /// The IPv6 packet (hop limit 255) that carries this message.
    public func packet(source: IPv6Address, destination: IPv6Address) -> IPv6Packet {
        let header = IPv6Header(
            source: source, destination: destination, nextHeader: .icmpv6,
            hopLimit: NeighborDiscoveryMessage.requiredHopLimit)
        return IPv6Packet(
            header: header, payload: ByteBuffer(bytes: self.icmpBytes(source: source, destination: destination)))
    }

    /// The whole Ethernet frame.
    public func frame(
        ethernetSource: MACAddress, ethernetDestination: MACAddress, source: IPv6Address, destination: IPv6Address
    ) -> EthernetFrame {
        var payload = ByteBuffer()
        self.packet(source: source, destination: destination).write(to: &payload)
        return EthernetFrame(
            destination: ethernetDestination, source: ethernetSource, etherType: .ipv6, payload: payload)
    }
}
