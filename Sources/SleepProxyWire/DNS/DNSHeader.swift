/// The second 16 bits of a DNS header (RFC 1035 §4.1.1), kept raw so unknown bits survive a round trip.
///
///                                       1  1  1  1  1  1
///         0  1  2  3  4  5  6  7  8  9  0  1  2  3  4  5
///       +--+--+--+--+--+--+--+--+--+--+--+--+--+--+--+--+
///       |QR|   Opcode  |AA|TC|RD|RA| Z|AD|CD|   RCODE   |
///       +--+--+--+--+--+--+--+--+--+--+--+--+--+--+--+--+
public struct DNSHeaderFlags: Hashable, Sendable {
    public var rawValue: UInt16

    public init(rawValue: UInt16) { self.rawValue = rawValue }

    public init(
        response: Bool,
        opcode: DNSOpcode = .query,
        authoritative: Bool = false,
        truncated: Bool = false,
        responseCode: DNSResponseCode = .noError
    ) {
        self.rawValue = 0
        self.isResponse = response
        self.opcode = opcode
        self.isAuthoritative = authoritative
        self.isTruncated = truncated
        self.responseCode = responseCode
    }

    public var isResponse: Bool {
        get { self.rawValue & 0x8000 != 0 }
        set { self.set(0x8000, newValue) }
    }

    public var opcode: DNSOpcode {
        get { DNSOpcode(rawValue: UInt8((self.rawValue >> 11) & 0x0F)) }
        set { self.rawValue = self.rawValue & ~0x7800 | UInt16(newValue.rawValue) << 11 }
    }

    public var isAuthoritative: Bool {
        get { self.rawValue & 0x0400 != 0 }
        set { self.set(0x0400, newValue) }
    }

    /// In an mDNS query: more known answers follow in further packets (RFC 6762 §7.2, §18.5).
    public var isTruncated: Bool {
        get { self.rawValue & 0x0200 != 0 }
        set { self.set(0x0200, newValue) }
    }

    public var recursionDesired: Bool {
        get { self.rawValue & 0x0100 != 0 }
        set { self.set(0x0100, newValue) }
    }

    public var responseCode: DNSResponseCode {
        get { DNSResponseCode(rawValue: UInt8(self.rawValue & 0x0F)) }
        set { self.rawValue = self.rawValue & ~0x000F | UInt16(newValue.rawValue) }
    }

    private mutating func set(_ bit: UInt16, _ on: Bool) {
        if on { self.rawValue |= bit } else { self.rawValue &= ~bit }
    }
}
