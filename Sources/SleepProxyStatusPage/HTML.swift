/// Markup built so that text cannot become markup: a `String` interpolated into `HTML` is always escaped, and
/// only another `HTML` value (built the same way) or a literal written here goes in as it is. Every name, TXT
/// string and address on the status page came from the network (docs/status-page.md, "Safe by construction").
public struct HTML: Sendable, Hashable, ExpressibleByStringInterpolation, CustomStringConvertible {
    public private(set) var text: String

    public init(stringLiteral value: String) { self.text = value }

    public init(stringInterpolation: StringInterpolation) { self.text = stringInterpolation.text }

    private init(raw: String) { self.text = raw }

    public var description: String { self.text }

    public static let empty = HTML(raw: "")

    public static func + (lhs: HTML, rhs: HTML) -> HTML { HTML(raw: lhs.text + rhs.text) }

    public static func += (lhs: inout HTML, rhs: HTML) { lhs.text += rhs.text }

    public struct StringInterpolation: StringInterpolationProtocol {
        var text = ""

        public init(literalCapacity: Int, interpolationCount: Int) {
            self.text.reserveCapacity(literalCapacity + 16 * interpolationCount)
        }

        public mutating func appendLiteral(_ literal: String) { self.text += literal }

        /// Text: escaped, in element content and in quoted attribute values alike.
        public mutating func appendInterpolation(_ value: String) { HTML.escape(value, into: &self.text) }

        public mutating func appendInterpolation(_ value: Substring) { HTML.escape(String(value), into: &self.text) }

        public mutating func appendInterpolation(_ value: HTML) { self.text += value.text }

        public mutating func appendInterpolation(_ values: [HTML]) { for value in values { self.text += value.text } }

        public mutating func appendInterpolation(_ value: Int) { self.text += String(value) }

        /// A path segment or query value: percent-encoded (then nothing in it needs escaping).
        public mutating func appendInterpolation(component value: String) {
            self.text += HTML.percentEncoded(value)
        }
    }

    /// The five characters that can end text or an attribute value, as character references.
    static func escape(_ value: String, into text: inout String) {
        // Most text (addresses, MACs, times, names) needs nothing: one pass over its bytes, then one append.
        let plain = value.utf8.allSatisfy { byte in
            byte >= 0x20 && byte != 0x7F && byte != UInt8(ascii: "&") && byte != UInt8(ascii: "<")
                && byte != UInt8(ascii: ">") && byte != UInt8(ascii: "\"") && byte != UInt8(ascii: "'")
        }
        if plain {
            text += value
            return
        }
        for scalar in value.unicodeScalars {
            switch scalar {
            case "&": text += "&amp;"
            case "<": text += "&lt;"
            case ">": text += "&gt;"
            case "\"": text += "&quot;"
            case "'": text += "&#39;"
            // Control characters other than tab and newline have no business in a page; shown as U+FFFD.
            case _ where scalar.value < 0x20 && scalar != "\t" && scalar != "\n": text += "\u{FFFD}"
            case "\u{7F}": text += "\u{FFFD}"
            default: text.unicodeScalars.append(scalar)
            }
        }
    }

    public static func escaped(_ value: String) -> String {
        var text = ""
        Self.escape(value, into: &text)
        return text
    }

    /// Everything but unreserved characters (RFC 3986 §2.3) as %XX of its UTF-8 bytes.
    public static func percentEncoded(_ value: String) -> String {
        var text = ""
        for byte in value.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"),
                UInt8(ascii: "~"):
                text.unicodeScalars.append(Unicode.Scalar(byte))
            default:
                let digits = Array("0123456789ABCDEF".unicodeScalars)
                text += "%"
                text.unicodeScalars.append(digits[Int(byte >> 4)])
                text.unicodeScalars.append(digits[Int(byte & 0x0F)])
            }
        }
        return text
    }

    /// `%XX` and `+` (a form's space) decoded; nil for a malformed escape or bytes that are not UTF-8.
    public static func percentDecoded(_ value: Substring) -> String? {
        var bytes: [UInt8] = []
        var index = value.utf8.startIndex
        let utf8 = value.utf8
        while index != utf8.endIndex {
            let byte = utf8[index]
            if byte == UInt8(ascii: "%") {
                let first = utf8.index(after: index)
                guard first != utf8.endIndex else { return nil }
                let second = utf8.index(after: first)
                guard second != utf8.endIndex, let high = hexValue(utf8[first]), let low = hexValue(utf8[second])
                else { return nil }
                bytes.append(high << 4 | low)
                index = utf8.index(after: second)
                continue
            }
            bytes.append(byte == UInt8(ascii: "+") ? UInt8(ascii: " ") : byte)
            index = utf8.index(after: index)
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
