import NIOCore

/// TCP control bits (RFC 9293 §3.1).
public struct TCPFlags: OptionSet, Hashable, Sendable {
    public let rawValue: UInt8
    public init(rawValue: UInt8) { self.rawValue = rawValue }

    public static let fin = TCPFlags(rawValue: 0x01)
    public static let syn = TCPFlags(rawValue: 0x02)
    public static let rst = TCPFlags(rawValue: 0x04)
    public static let psh = TCPFlags(rawValue: 0x08)
    public static let ack = TCPFlags(rawValue: 0x10)
    public static let urg = TCPFlags(rawValue: 0x20)
    public static let ece = TCPFlags(rawValue: 0x40)
    public static let cwr = TCPFlags(rawValue: 0x80)
}

/// A TCP header (RFC 9293 §3.1) and its payload. Options are skipped.
///
///     src port (2) | dst port (2) | seq (4) | ack (4) | data offset/flags (2) | window (2) | checksum (2) | urgent (2)
public struct TCPSegment: Hashable, Sendable {
    public static let minimumHeaderLength = 20

    public var sourcePort: UInt16
    public var destinationPort: UInt16
    public var sequenceNumber: UInt32
    public var acknowledgementNumber: UInt32
    public var flags: TCPFlags
    public var window: UInt16
    public var checksum: UInt16
    public var payload: ByteBuffer
    /// The kinds of the options in the header, in order, NOPs left out (2 MSS, 3 window scale, 4 SACK permitted,
    /// 8 timestamps): a SYN's shape tells a raw scanner's probe from an operating system's connect()
    /// (docs/waking.md). Empty for a segment built here; `write(to:)` writes no options.
    public var optionKinds: [UInt8] = []

    public init(
        sourcePort: UInt16, destinationPort: UInt16, sequenceNumber: UInt32 = 0, acknowledgementNumber: UInt32 = 0,
        flags: TCPFlags, window: UInt16 = 65535, checksum: UInt16 = 0, payload: ByteBuffer = ByteBuffer()
    ) {
        self.sourcePort = sourcePort
        self.destinationPort = destinationPort
        self.sequenceNumber = sequenceNumber
        self.acknowledgementNumber = acknowledgementNumber
        self.flags = flags
        self.window = window
        self.checksum = checksum
        self.payload = payload
    }

    /// An opening SYN: SYN set, ACK clear (a SYN-ACK answers a connection, it does not start one).
    public var isConnectionRequest: Bool { self.flags.contains(.syn) && !self.flags.contains(.ack) }

    public init(decoding buffer: ByteBuffer) throws(WireError) {
        let (segment, offset) = try buffer.decode { (reader: inout ByteReader) throws(WireError) in
            let sourcePort = try reader.readUInt16("TCP source port")
            let destinationPort = try reader.readUInt16("TCP destination port")
            let sequence = try reader.readUInt32("TCP sequence")
            let ack = try reader.readUInt32("TCP acknowledgement")
            let offsetAndFlags = try reader.readUInt16("TCP data offset/flags")
            let window = try reader.readUInt16("TCP window")
            let checksum = try reader.readUInt16("TCP checksum")
            _ = try reader.readUInt16("TCP urgent pointer")
            let headerLength = Int(offsetAndFlags >> 12) * 4
            guard headerLength >= TCPSegment.minimumHeaderLength else {
                throw WireError(.badHeader, at: 12, "TCP data offset \(headerLength) < 20")
            }
            let options = try reader.readBytes(headerLength - TCPSegment.minimumHeaderLength, "TCP options")
            var segment = TCPSegment(
                sourcePort: sourcePort, destinationPort: destinationPort, sequenceNumber: sequence,
                acknowledgementNumber: ack, flags: TCPFlags(rawValue: UInt8(truncatingIfNeeded: offsetAndFlags)),
                window: window, checksum: checksum
            )
            segment.optionKinds = Self.optionKinds(options)
            return (segment, headerLength)
        }
        self = segment
        self.payload = buffer.slice(from: offset, length: buffer.readableBytes - offset)
    }

    /// RFC 9293 §3.1: kind 0 ends the list, kind 1 is one byte of padding, every other option is kind, length
    /// (counting both), data. A length that does not fit ends the walk: what came before it is kept.
    static func optionKinds(_ bytes: [UInt8]) -> [UInt8] {
        var kinds: [UInt8] = []
        var index = 0
        while index < bytes.count {
            let kind = bytes[index]
            if kind == 0 { break }
            if kind == 1 {
                index += 1
                continue
            }
            guard index + 1 < bytes.count, bytes[index + 1] >= 2, index + Int(bytes[index + 1]) <= bytes.count else {
                break
            }
            kinds.append(kind)
            index += Int(bytes[index + 1])
        }
        return kinds
    }

    /// Appends a 20-byte header (checksum as stored in `checksum`) and the payload.
    public func write(to buffer: inout ByteBuffer) {
        buffer.writeInteger(self.sourcePort)
        buffer.writeInteger(self.destinationPort)
        buffer.writeInteger(self.sequenceNumber)
        buffer.writeInteger(self.acknowledgementNumber)
        buffer.writeInteger(UInt16(5) << 12 | UInt16(self.flags.rawValue))
        buffer.writeInteger(self.window)
        buffer.writeInteger(self.checksum)
        buffer.writeInteger(UInt16(0))
        var payload = self.payload
        buffer.writeBuffer(&payload)
    }
}
