/// The one error every decoder in this module throws.
///
/// Anything that arrives from the network can be hostile, so no decoder traps: each malformed input ends in a
/// `WireError` that names what was wrong (`code`), where (`offset`, counted from the first byte of the unit
/// being decoded: the DNS message, or the frame), and a short human-readable `detail` for logs.
/// Two errors compare equal when their codes are equal, so tests and counters can match on the code alone.
public struct WireError: Error, Hashable, Sendable, CustomStringConvertible {
    public enum Code: String, Hashable, Sendable, CaseIterable {
        /// The input ended before a field it announced.
        case truncated
        /// Bytes were left over after the last field that the header or a length announced.
        case trailingBytes
        /// The whole unit is larger than the protocol allows.
        case tooLarge
        /// A label is longer than 63 bytes or uses a reserved label type.
        case badLabel
        /// A name is longer than 255 bytes in wire form.
        case nameTooLong
        /// A compression pointer points forwards, at itself, out of the message, or chains too often.
        case badPointer
        /// A record's RDATA does not have the length or structure its type requires.
        case badRData
        /// An EDNS(0) option is malformed, or the options do not exactly fill the OPT RDATA.
        case badOption
        /// A section count promises more entries than the message could possibly hold.
        case badCount
        /// A header field holds a value this codec does not accept (version, header length, hardware type...).
        case badHeader
        /// A checksum did not verify.
        case badChecksum
        /// The frame is of a kind this codec does not decode (another EtherType, protocol or ICMPv6 type).
        case unsupported
        /// A value given to an encoder or initialiser is out of range.
        case invalidArgument
    }

    public var code: Code
    public var offset: Int
    public var detail: String

    public init(_ code: Code, at offset: Int, _ detail: String) {
        self.code = code
        self.offset = offset
        self.detail = detail
    }

    public var description: String { "\(self.code.rawValue) at byte \(self.offset): \(self.detail)" }

    public static func == (lhs: WireError, rhs: WireError) -> Bool { lhs.code == rhs.code }
    public func hash(into hasher: inout Hasher) { hasher.combine(self.code) }
}
