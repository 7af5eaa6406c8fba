/// Where the broker is: `mqtt://HOST[:PORT]` or `mqtts://HOST[:PORT]` (TLS), as the `mqtt` setting names it.
public struct MQTTBroker: Hashable, Sendable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var tls: Bool

    /// IANA's ports for MQTT and MQTT over TLS.
    public static let plainPort = 1883
    public static let tlsPort = 8883

    public struct ParseError: Error, CustomStringConvertible {
        public var description: String
    }

    public init(url text: String) throws(ParseError) {
        func fail(_ why: String) -> ParseError {
            ParseError(description: "mqtt: \"\(text)\" \(why); write it as mqtt://HOST[:PORT] or mqtts://HOST[:PORT]")
        }
        let rest: Substring
        if text.lowercased().hasPrefix("mqtt://") {
            self.tls = false
            rest = text.dropFirst("mqtt://".count)
        } else if text.lowercased().hasPrefix("mqtts://") {
            self.tls = true
            rest = text.dropFirst("mqtts://".count)
        } else {
            throw fail("is not an MQTT URL")
        }
        guard !rest.contains("@") else {
            throw ParseError(
                description:
                    "mqtt: give the user name with mqtt-user and the password in the file mqtt-password-file names, not in the URL (a command line and a configuration file are readable by others)"
            )
        }
        var authority = rest
        if authority.hasSuffix("/") { authority = authority.dropLast() }
        guard !authority.contains("/"), !authority.contains("?"), !authority.contains("#") else {
            throw fail("has a path")
        }
        var portText: Substring? = nil
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { throw fail("has an unclosed [") }
            self.host = String(authority[authority.index(after: authority.startIndex)..<close])
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { throw fail("has text after ]") }
                portText = after.dropFirst()
            }
            guard self.host.contains(":") else { throw fail("has a non-IPv6 address in brackets") }
        } else {
            let parts = authority.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count <= 2 else { throw fail("has an IPv6 address without brackets") }
            self.host = String(parts[0])
            portText = parts.count == 2 ? parts[1] : nil
        }
        guard !self.host.isEmpty,
            self.host.allSatisfy({ $0.isLetter || $0.isNumber || $0 == "." || $0 == "-" || $0 == ":" || $0 == "%" })
        else { throw fail("has no host name") }
        if let portText {
            guard let port = Int(portText), (1...65535).contains(port) else { throw fail("has a bad port") }
            self.port = port
        } else {
            self.port = self.tls ? Self.tlsPort : Self.plainPort
        }
    }

    public var description: String {
        "\(self.tls ? "mqtts" : "mqtt")://\(self.host.contains(":") ? "[\(self.host)]" : self.host):\(self.port)"
    }
}
