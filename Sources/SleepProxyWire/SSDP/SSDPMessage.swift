/// One SSDP message (UPnP Device Architecture 1.1 §1, HTTP over UDP): a search (`M-SEARCH * HTTP/1.1`), a
/// search response (`HTTP/1.1 200 OK`) or an announcement (`NOTIFY * HTTP/1.1`, with `NTS` alive, byebye or
/// update). `SSDPProxy` (SleepProxyCore) speaks it on sleeping hosts' behalf (docs/ssdp.md).
///
/// Decoding is strict, as for everything from the network: the start line must be one of the three, every line
/// ends in CRLF, the header block ends in an empty line and nothing but an empty body follows, header names are
/// HTTP tokens, values are printable, and sizes and counts are bounded (`SSDPMessage.maximumSize` and the
/// others), each named with its reason. Header names compare case-insensitively (HTTP); the headers' order, names
/// and values are kept, so a device's response can be sent again as the device sent it (a space after the colon
/// is the only thing encoding may add).
public struct SSDPMessage: Hashable, Sendable {
    public enum Kind: Hashable, Sendable {
        case search
        case response
        case notify
    }

    public struct Header: Hashable, Sendable {
        public var name: String
        public var value: String

        public init(_ name: String, _ value: String) {
            self.name = name
            self.value = value
        }
    }

    public var kind: Kind
    public var headers: [Header]

    /// A UDP datagram carries one message; UDA 1.1 §1.1.2 keeps SSDP messages within one datagram and real
    /// devices stay well under 1 KB. Larger is not SSDP.
    public static let maximumSize = 4_096
    /// Headers per message at most: a NOTIFY has about ten (UDA 1.1 §1.2.2); vendor extensions add a few.
    public static let maximumHeaders = 32
    /// Bytes of one header line at most (a LOCATION URL is the longest value in practice).
    public static let maximumLineLength = 1_024

    public init(kind: Kind, headers: [Header]) {
        self.kind = kind
        self.headers = headers
    }

    /// The value of the first header named `name` (case-insensitively), trimmed of surrounding blanks.
    public subscript(name: String) -> String? {
        let wanted = Self.lowercased(name)
        return self.headers.first { Self.lowercased($0.name) == wanted }.map { Self.trimmed($0.value) }
    }

    // MARK: - Typed fields

    /// `ST` (search target) of a search or a response.
    public var searchTarget: String? { self["ST"] }
    /// `NT` (notification type) of a NOTIFY.
    public var notificationType: String? { self["NT"] }
    /// `NTS` of a NOTIFY: `ssdp:alive`, `ssdp:byebye` or `ssdp:update`.
    public var notificationSubtype: String? { self["NTS"] }
    public var uniqueServiceName: String? { self["USN"] }
    public var location: String? { self["LOCATION"] }
    public var server: String? { self["SERVER"] }
    public var bootID: UInt32? { self["BOOTID.UPNP.ORG"].flatMap { UInt32($0) } }
    public var configID: UInt32? { self["CONFIGID.UPNP.ORG"].flatMap { UInt32($0) } }

    /// `max-age` from `CACHE-CONTROL` (UDA 1.1 §1.2.2), in seconds.
    public var maxAge: Int? {
        guard let value = self["CACHE-CONTROL"] else { return nil }
        for directive in value.split(separator: ",") {
            let parts = directive.split(separator: "=", maxSplits: 1).map { Self.trimmed(String($0)) }
            if parts.count == 2, Self.lowercased(parts[0]) == "max-age", let seconds = Int(parts[1]), seconds >= 0 {
                return seconds
            }
        }
        return nil
    }

    /// `MX` of a search, the seconds a device may wait before answering (UDA 1.1 §1.3.2: at least 1; more than 5
    /// is taken as 5). Nil when absent or not a number (a unicast search carries none).
    public var maximumWait: Int? {
        guard let text = self["MX"], let seconds = Int(text), seconds >= 0 else { return nil }
        return min(seconds, 5)
    }

    /// `MAN: "ssdp:discover"`, which a search must carry (UDA 1.1 §1.3.2; the quotes are part of the value).
    public var isDiscover: Bool { self["MAN"] == "\"ssdp:discover\"" }

    // MARK: - Decoding

    public init(decoding bytes: [UInt8]) throws(WireError) {
        guard bytes.count <= Self.maximumSize else {
            throw WireError(.tooLarge, at: Self.maximumSize, "an SSDP message is at most \(Self.maximumSize) bytes")
        }
        var lines: [(start: Int, bytes: ArraySlice<UInt8>)] = []
        var start = 0
        var index = 0
        var ended = false
        while index < bytes.count {
            if bytes[index] == 0x0D {
                guard index + 1 < bytes.count, bytes[index + 1] == 0x0A else {
                    throw WireError(.badHeader, at: index, "a CR not followed by LF")
                }
                let line = bytes[start..<index]
                guard line.count <= Self.maximumLineLength else {
                    throw WireError(.tooLarge, at: start, "a line longer than \(Self.maximumLineLength) bytes")
                }
                index += 2
                if line.isEmpty {
                    ended = true
                    break
                }
                lines.append((start, line))
                guard lines.count <= Self.maximumHeaders + 1 else {
                    throw WireError(.badCount, at: start, "more than \(Self.maximumHeaders) headers")
                }
                start = index
            } else if bytes[index] == 0x0A {
                throw WireError(.badHeader, at: index, "a line ending in LF alone")
            } else {
                index += 1
            }
        }
        guard ended else { throw WireError(.truncated, at: bytes.count, "no empty line ends the headers") }
        guard index == bytes.count else {
            throw WireError(.trailingBytes, at: index, "SSDP messages have no body")
        }
        guard let first = lines.first else { throw WireError(.badHeader, at: 0, "no start line") }
        switch Array(first.bytes) {
        case Array("M-SEARCH * HTTP/1.1".utf8): self.kind = .search
        case Array("NOTIFY * HTTP/1.1".utf8): self.kind = .notify
        case Array("HTTP/1.1 200 OK".utf8): self.kind = .response
        default: throw WireError(.unsupported, at: 0, "not an SSDP start line")
        }
        var headers: [Header] = []
        for (offset, line) in lines.dropFirst() {
            guard let colon = line.firstIndex(of: 0x3A) else {
                throw WireError(.badHeader, at: offset, "a header line without a colon")
            }
            let name = line[line.startIndex..<colon]
            guard !name.isEmpty, name.allSatisfy(Self.isTokenByte) else {
                throw WireError(.badHeader, at: offset, "a header name that is not an HTTP token")
            }
            let value = line[(colon + 1)...]
            // Printable ASCII, tab, and UTF-8 (a SERVER or a vendor header may carry it); no control bytes.
            guard value.allSatisfy({ $0 == 0x09 || ($0 >= 0x20 && $0 != 0x7F) }),
                let text = String(validating: value, as: UTF8.self)
            else {
                throw WireError(.badHeader, at: offset, "a header value with control bytes or invalid UTF-8")
            }
            headers.append(Header(String(decoding: name, as: UTF8.self), text))
        }
        self.headers = headers
    }

    // MARK: - Encoding

    /// The message as sent: start line, headers in their order, an empty line.
    public func encoded() -> [UInt8] {
        var text: String
        switch self.kind {
        case .search: text = "M-SEARCH * HTTP/1.1\r\n"
        case .notify: text = "NOTIFY * HTTP/1.1\r\n"
        case .response: text = "HTTP/1.1 200 OK\r\n"
        }
        for header in self.headers {
            let blank = header.value.utf8.first.map { $0 == 0x20 || $0 == 0x09 } ?? false
            text += "\(header.name):\(blank ? "" : " ")\(header.value)\r\n"
        }
        text += "\r\n"
        return Array(text.utf8)
    }

    // MARK: - Helpers

    /// RFC 9110 §5.6.2 token characters.
    static func isTokenByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return Array("!#$%&'*+-.^_`|~".utf8).contains(byte)
        }
    }

    /// ASCII lower case, as HTTP compares header names and SSDP its targets.
    public static func lowercased(_ text: String) -> String {
        String(decoding: text.utf8.map { (0x41...0x5A).contains($0) ? $0 | 0x20 : $0 }, as: UTF8.self)
    }

    /// Without the blanks (SP, HTAB) around it, byte by byte: as Characters, a space followed by a combining mark
    /// is one grapheme and would not be trimmed (the SSDP fuzzer found a value that changed on a round trip).
    static func trimmed(_ text: String) -> String {
        let bytes = Array(text.utf8)
        var start = 0
        var end = bytes.count
        while start < end, bytes[start] == 0x20 || bytes[start] == 0x09 { start += 1 }
        while end > start, bytes[end - 1] == 0x20 || bytes[end - 1] == 0x09 { end -= 1 }
        return String(decoding: bytes[start..<end], as: UTF8.self)
    }
}
