import SleepProxyControl

/// A JSON value written with its keys in the order given, so that the same state always gives the same bytes:
/// `RetainedTopics` compares payloads to know what changed, and a payload that only reordered its keys would be
/// published again for nothing.
enum JSONText: Hashable, Sendable, ExpressibleByStringLiteral, ExpressibleByIntegerLiteral,
    ExpressibleByBooleanLiteral
{
    case string(String)
    case number(Int)
    /// A number written with `digits` after the point, never in exponent form (a kWh total for Home Assistant).
    case decimal(Double, digits: Int)
    case bool(Bool)
    case null
    case array([JSONText])
    case object([(String, JSONText)])

    init(stringLiteral value: String) { self = .string(value) }
    init(integerLiteral value: Int) { self = .number(value) }
    init(booleanLiteral value: Bool) { self = .bool(value) }

    static func optional(_ value: String?) -> JSONText { value.map { .string($0) } ?? .null }

    var bytes: [UInt8] {
        var out: [UInt8] = []
        self.write(to: &out)
        return out
    }

    private func write(to out: inout [UInt8]) {
        switch self {
        case .string(let text): Self.quote(text, into: &out)
        case .number(let value): out += Array(String(value).utf8)
        case .decimal(let value, let digits): out += Array(DisplayText.fixed(value, digits: digits).utf8)
        case .bool(let value): out += Array((value ? "true" : "false").utf8)
        case .null: out += Array("null".utf8)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (index, item) in items.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                item.write(to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (index, (key, value)) in members.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                Self.quote(key, into: &out)
                out.append(UInt8(ascii: ":"))
                value.write(to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// RFC 8259 §7: quotation mark, reverse solidus and control characters escaped; the rest as UTF-8.
    private static func quote(_ text: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out += [UInt8(ascii: "\\"), UInt8(ascii: "\"")]
            case UInt8(ascii: "\\"): out += [UInt8(ascii: "\\"), UInt8(ascii: "\\")]
            case 0x0A: out += [UInt8(ascii: "\\"), UInt8(ascii: "n")]
            case 0..<0x20, 0x7F:
                let hex = Array("0123456789abcdef".utf8)
                out += Array("\\u00".utf8) + [hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]]
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    static func == (lhs: JSONText, rhs: JSONText) -> Bool { lhs.bytes == rhs.bytes }
    func hash(into hasher: inout Hasher) { hasher.combine(self.bytes) }
}
