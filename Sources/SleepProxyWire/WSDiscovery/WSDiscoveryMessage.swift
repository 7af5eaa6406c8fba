/// A WS-Discovery message (OASIS 2005/04 as Windows uses it, SOAP 1.2 over UDP 3702; docs/windows.md §5): the
/// few header and body fields a stand-in for a sleeping PC reads and writes. The reader is a small tag scanner, not
/// an XML parser: it takes the five predefined entities and nothing else, refuses a DOCTYPE (so no entity can be
/// declared or expanded), and throws on anything it cannot scan, so hostile input costs one pass over at most
/// `maximumSize` bytes.
public struct WSDiscoveryMessage: Hashable, Sendable {
    /// A qualified name: its namespace URI and local part (`wsdp:Device` is devprof's `Device`).
    public struct QName: Hashable, Sendable, CustomStringConvertible {
        public var namespace: String
        public var local: String
        public init(namespace: String, local: String) {
            self.namespace = namespace
            self.local = local
        }
        public var description: String { "{\(self.namespace)}\(self.local)" }
    }

    public enum Kind: String, Hashable, Sendable, CaseIterable {
        case hello = "Hello", bye = "Bye", probe = "Probe", probeMatches = "ProbeMatches", resolve = "Resolve"
        case resolveMatches = "ResolveMatches"
    }

    /// SOAP-over-UDP's bound on an envelope (its §3.2: 32,767 octets); Windows' own are under 2 KB.
    public static let maximumSize = 32_767
    /// Types listed in one message at most: a PC lists two, a printer a handful.
    public static let maximumTypes = 16
    /// Elements in one message at most: a Windows Hello has about 15.
    public static let maximumElements = 256

    public static let discoveryNamespace = "http://schemas.xmlsoap.org/ws/2005/04/discovery"
    public static let addressingNamespace = "http://schemas.xmlsoap.org/ws/2004/08/addressing"
    public static let actionPrefix = discoveryNamespace + "/"

    public var kind: Kind
    public var messageID: String
    public var relatesTo: String?
    /// `AppSequence`'s InstanceId and MessageNumber.
    public var instanceID: String?
    public var messageNumber: String?
    /// The endpoint's address (`urn:uuid:…`), from a Hello, Bye, match or Resolve.
    public var endpoint: String?
    public var types: [QName] = []
    /// A Probe's Scopes, as sent (a stand-in that learned no scopes matches only a Probe without them).
    public var scopes: String?
    public var xaddrs: String?
    public var metadataVersion: String?

    public init(kind: Kind, messageID: String) {
        self.kind = kind
        self.messageID = messageID
    }

    // MARK: - Reading

    public init(decoding bytes: [UInt8]) throws(WireError) {
        guard bytes.count <= Self.maximumSize else {
            throw WireError(.tooLarge, at: 0, "WS-Discovery message of \(bytes.count) bytes")
        }
        var scanner = XMLScanner(bytes: bytes)
        var namespaces: [String: String] = [:]
        var path: [String] = []
        var action: String?
        var messageID: String?
        var found = Self(kind: .hello, messageID: "")
        var rawTypes: String?
        var elements = 0
        while let event = try scanner.next() {
            switch event {
            case .start(let name, let attributes, let selfClosing):
                elements += 1
                guard elements <= Self.maximumElements else {
                    throw WireError(.tooLarge, at: scanner.offset, "more than \(Self.maximumElements) elements")
                }
                for (key, value) in attributes where key.hasPrefix("xmlns:") {
                    namespaces[String(key.dropFirst(6))] = value
                }
                let local = Self.local(name)
                if local == "AppSequence" {
                    found.instanceID = attributes.first { $0.0 == "InstanceId" }?.1
                    found.messageNumber = attributes.first { $0.0 == "MessageNumber" }?.1
                }
                if !selfClosing { path.append(local) }
            case .end:
                guard !path.isEmpty else { throw WireError(.badHeader, at: scanner.offset, "an end tag too many") }
                path.removeLast()
            case .text(let text):
                guard let local = path.last else { continue }
                let parent = path.count >= 2 ? path[path.count - 2] : ""
                switch local {
                case "Action": action = text
                case "MessageID": messageID = text
                case "RelatesTo": found.relatesTo = text
                case "Address" where parent == "EndpointReference" && path.contains("Body"): found.endpoint = text
                case "Types" where path.contains("Body"): rawTypes = text
                case "Scopes" where path.contains("Body"): found.scopes = text
                case "XAddrs" where path.contains("Body"): found.xaddrs = text
                case "MetadataVersion" where path.contains("Body"): found.metadataVersion = text
                default: break
                }
            }
        }
        guard let action, action.hasPrefix(Self.actionPrefix),
            let kind = Kind(rawValue: String(action.dropFirst(Self.actionPrefix.count)))
        else { throw WireError(.unsupported, at: 0, "not a WS-Discovery action") }
        guard let messageID, !messageID.isEmpty else { throw WireError(.badHeader, at: 0, "no MessageID") }
        found.kind = kind
        found.messageID = messageID
        if let rawTypes {
            for word in rawTypes.split(whereSeparator: { $0 == " " || $0 == "\n" || $0 == "\t" || $0 == "\r" }) {
                guard found.types.count < Self.maximumTypes else { break }
                let parts = word.split(separator: ":", maxSplits: 1)
                guard parts.count == 2, let namespace = namespaces[String(parts[0])] else {
                    throw WireError(.badHeader, at: 0, "type \(word) has no declared prefix")
                }
                found.types.append(QName(namespace: namespace, local: String(parts[1])))
            }
        }
        self = found
    }

    static func local(_ name: Substring) -> String {
        String(name.split(separator: ":", maxSplits: 1).last ?? name)
    }

    // MARK: - Writing

    /// Prefixes the answers use for the namespaces a PC's types come from; others get `t0`, `t1`, ...
    static let knownPrefixes: [(String, String)] = [
        ("wsdp", "http://schemas.xmlsoap.org/ws/2006/02/devprof"),
        ("pub", "http://schemas.microsoft.com/windows/pub/2005/07"),
    ]

    /// The envelope, as Windows writes it (SOAP 1.2, WS-Addressing 2004/08), to the anonymous role for a match,
    /// to the discovery URN for a Probe or Resolve.
    public func encoded() -> [UInt8] {
        var prefixes: [String: String] = [:]
        var declarations = ""
        for (prefix, namespace) in Self.knownPrefixes {
            prefixes[namespace] = prefix
            declarations += " xmlns:\(prefix)=\"\(namespace)\""
        }
        for type in self.types where prefixes[type.namespace] == nil {
            let prefix = "t\(prefixes.count - Self.knownPrefixes.count)"
            prefixes[type.namespace] = prefix
            declarations += " xmlns:\(prefix)=\"\(Self.escaped(type.namespace))\""
        }
        let isMatch = self.kind == .probeMatches || self.kind == .resolveMatches
        let to =
            isMatch
            ? "http://schemas.xmlsoap.org/ws/2004/08/addressing/role/anonymous"
            : "urn:schemas-xmlsoap-org:ws:2005:04:discovery"
        var header =
            "<wsa:To>\(to)</wsa:To><wsa:Action>\(Self.actionPrefix)\(self.kind.rawValue)</wsa:Action>"
            + "<wsa:MessageID>\(Self.escaped(self.messageID))</wsa:MessageID>"
        if let relatesTo { header += "<wsa:RelatesTo>\(Self.escaped(relatesTo))</wsa:RelatesTo>" }
        if let instanceID {
            header +=
                "<wsd:AppSequence InstanceId=\"\(Self.escaped(instanceID))\" MessageNumber=\"\(Self.escaped(self.messageNumber ?? "1"))\"/>"
        }
        var inner = ""
        if let endpoint {
            inner +=
                "<wsa:EndpointReference><wsa:Address>\(Self.escaped(endpoint))</wsa:Address></wsa:EndpointReference>"
        }
        if !self.types.isEmpty {
            inner +=
                "<wsd:Types>"
                + self.types.map { "\(prefixes[$0.namespace]!):\(Self.escaped($0.local))" }.joined(separator: " ")
                + "</wsd:Types>"
        }
        if let scopes { inner += "<wsd:Scopes>\(Self.escaped(scopes))</wsd:Scopes>" }
        if let xaddrs { inner += "<wsd:XAddrs>\(Self.escaped(xaddrs))</wsd:XAddrs>" }
        if let metadataVersion {
            inner += "<wsd:MetadataVersion>\(Self.escaped(metadataVersion))</wsd:MetadataVersion>"
        }
        let body: String
        switch self.kind {
        case .probeMatches: body = "<wsd:ProbeMatches><wsd:ProbeMatch>\(inner)</wsd:ProbeMatch></wsd:ProbeMatches>"
        case .resolveMatches:
            body = "<wsd:ResolveMatches><wsd:ResolveMatch>\(inner)</wsd:ResolveMatch></wsd:ResolveMatches>"
        default: body = "<wsd:\(self.kind.rawValue)>\(inner)</wsd:\(self.kind.rawValue)>"
        }
        let text =
            "<?xml version=\"1.0\" encoding=\"utf-8\"?>"
            + "<soap:Envelope xmlns:soap=\"http://www.w3.org/2003/05/soap-envelope\""
            + " xmlns:wsa=\"\(Self.addressingNamespace)\" xmlns:wsd=\"\(Self.discoveryNamespace)\"\(declarations)>"
            + "<soap:Header>\(header)</soap:Header><soap:Body>\(body)</soap:Body></soap:Envelope>"
        return Array(text.utf8)
    }

    static func escaped(_ text: String) -> String {
        var result = ""
        for character in text {
            switch character {
            case "&": result += "&amp;"
            case "<": result += "&lt;"
            case ">": result += "&gt;"
            case "\"": result += "&quot;"
            default: result.append(character)
            }
        }
        return result
    }
}

/// Start tags (name, attributes), end tags and text, in document order; the XML declaration and comments are
/// skipped; a DOCTYPE, CDATA or processing instruction other than the declaration throws.
struct XMLScanner {
    enum Event {
        case start(Substring, [(String, String)], selfClosing: Bool)
        case end
        case text(String)
    }

    let text: Substring
    var index: Substring.Index
    var offset: Int { self.text.distance(from: self.text.startIndex, to: self.index) }

    init(bytes: [UInt8]) {
        self.text = Substring(String(decoding: bytes, as: UTF8.self))
        self.index = self.text.startIndex
    }

    mutating func next() throws(WireError) -> Event? {
        while self.index < self.text.endIndex {
            if self.text[self.index] != "<" {
                let end = self.text[self.index...].firstIndex(of: "<") ?? self.text.endIndex
                let raw = self.text[self.index..<end]
                self.index = end
                let trimmed = raw.trimmingXMLSpace
                if trimmed.isEmpty { continue }
                return .text(try Self.unescaped(trimmed, at: self.offset))
            }
            let rest = self.text[self.index...]
            if rest.hasPrefix("<?xml ") || rest.hasPrefix("<?xml?") {
                guard let close = rest.firstRange(of: "?>") else { throw self.error("an unclosed declaration") }
                self.index = close.upperBound
                continue
            }
            if rest.hasPrefix("<!--") {
                guard let close = rest.firstRange(of: "-->") else { throw self.error("an unclosed comment") }
                self.index = close.upperBound
                continue
            }
            if rest.hasPrefix("<!") || rest.hasPrefix("<?") { throw self.error("a DOCTYPE, CDATA or instruction") }
            guard let close = rest.firstIndex(of: ">") else { throw self.error("an unclosed tag") }
            var inside = rest[rest.index(after: rest.startIndex)..<close]
            self.index = self.text.index(after: close)
            if inside.first == "/" { return .end }
            let selfClosing = inside.last == "/"
            if selfClosing { inside = inside.dropLast() }
            let nameEnd =
                inside.firstIndex(where: { $0 == " " || $0 == "\n" || $0 == "\t" || $0 == "\r" }) ?? inside.endIndex
            let name = inside[..<nameEnd]
            guard !name.isEmpty else { throw self.error("a tag without a name") }
            return .start(name, try self.attributes(inside[nameEnd...]), selfClosing: selfClosing)
        }
        return nil
    }

    func attributes(_ text: Substring) throws(WireError) -> [(String, String)] {
        var result: [(String, String)] = []
        var rest = text.trimmingXMLSpace
        while !rest.isEmpty {
            guard let equals = rest.firstIndex(of: "=") else { throw self.error("an attribute without a value") }
            let key = rest[..<equals].trimmingXMLSpace
            var after = rest[rest.index(after: equals)...].trimmingXMLSpace
            guard let quote = after.first, quote == "\"" || quote == "'" else { throw self.error("an unquoted value") }
            after = after.dropFirst()
            guard let end = after.firstIndex(of: quote) else { throw self.error("an unclosed value") }
            result.append((String(key), try Self.unescaped(after[..<end], at: self.offset)))
            rest = after[after.index(after: end)...].trimmingXMLSpace
        }
        return result
    }

    /// The five predefined entities (XML 1.0 §4.6) and numeric references; any other is an error.
    static func unescaped(_ text: Substring, at offset: Int) throws(WireError) -> String {
        guard text.contains("&") else { return String(text) }
        var result = ""
        var rest = text
        while let amp = rest.firstIndex(of: "&") {
            result += rest[..<amp]
            guard let semicolon = rest[amp...].firstIndex(of: ";") else {
                throw WireError(.badHeader, at: offset, "an unterminated entity")
            }
            let name = rest[rest.index(after: amp)..<semicolon]
            switch name {
            case "amp": result += "&"
            case "lt": result += "<"
            case "gt": result += ">"
            case "quot": result += "\""
            case "apos": result += "'"
            default:
                let number =
                    name.hasPrefix("#x")
                    ? UInt32(name.dropFirst(2), radix: 16)
                    : name.hasPrefix("#") ? UInt32(name.dropFirst(), radix: 10) : nil
                guard let number, let scalar = Unicode.Scalar(number) else {
                    throw WireError(.badHeader, at: offset, "an entity XML does not predefine")
                }
                result.unicodeScalars.append(scalar)
            }
            rest = rest[rest.index(after: semicolon)...]
        }
        return result + rest
    }

    func error(_ what: String) -> WireError { WireError(.badHeader, at: self.offset, "WS-Discovery XML: \(what)") }
}

extension Substring {
    var trimmingXMLSpace: Substring {
        var text = self
        while let first = text.first, first == " " || first == "\n" || first == "\t" || first == "\r" {
            text = text.dropFirst()
        }
        while let last = text.last, last == " " || last == "\n" || last == "\t" || last == "\r" {
            text = text.dropLast()
        }
        return text
    }
}
