import SleepProxyWire

/// Which traffic wakes a host beyond the services it registered (docs/waking.md §5): ports added or removed for every
/// host, or for one host by MAC. A host-specific rule beats a global one; a removal beats an addition.
public struct WakePolicy: Hashable, Sendable {
    public struct Port: Hashable, Sendable, Comparable, CustomStringConvertible {
        public var transport: WakeTrigger.Transport
        public var port: UInt16

        public init(_ transport: WakeTrigger.Transport, _ port: UInt16) {
            self.transport = transport
            self.port = port
        }

        public var description: String { "\(self.transport.rawValue)/\(self.port)" }
        public static func < (lhs: Port, rhs: Port) -> Bool {
            (lhs.transport.rawValue, lhs.port) < (rhs.transport.rawValue, rhs.port)
        }
    }

    public struct Rules: Hashable, Sendable {
        public var added: Set<Port> = []
        public var removed: Set<Port> = []
        public init(added: Set<Port> = [], removed: Set<Port> = []) {
            self.added = added
            self.removed = removed
        }
    }

    public var global = Rules()
    public var perHost: [MACAddress: Rules] = [:]

    public init(global: Rules = Rules(), perHost: [MACAddress: Rules] = [:]) {
        self.global = global
        self.perHost = perHost
    }

    /// Whether traffic to `port` wakes the host with primary or wake MAC `macs`, which registered `registered`.
    public func wakes(_ port: Port, macs: [MACAddress], registered: Set<Port>) -> Bool {
        for mac in macs {
            if let rules = self.perHost[mac] {
                if rules.removed.contains(port) { return false }
                if rules.added.contains(port) { return true }
            }
        }
        if self.global.removed.contains(port) { return false }
        if self.global.added.contains(port) || registered.contains(port) { return true }
        // SMB clients (smbclient, Explorer) open 139 together with 445, and either may reach the proxy first: 139
        // wakes a host that 445 wakes, unless a rule removes it (docs/windows.md §5).
        if port == Self.netbiosSession { return self.wakes(Self.smb, macs: macs, registered: registered) }
        return false
    }

    /// NetBIOS session service (RFC 1002 §4.3) and SMB over TCP.
    public static let netbiosSession = Port(.tcp, 139)
    public static let smb = Port(.tcp, 445)

    public struct ParseError: Error, CustomStringConvertible, Equatable {
        public var description: String
    }

    /// Adds one rule written as `[+|-][MAC@]tcp|udp/PORT`: `tcp/445` wakes every host on TCP 445, `-udp/137`
    /// never wakes on UDP 137, `02:00:00:00:00:05@tcp/22` wakes that host on TCP 22.
    public mutating func add(rule text: String) throws(ParseError) {
        var body = Substring(text.trimmingWhitespace)
        var removing = false
        if body.first == "-" || body.first == "+" {
            removing = body.first == "-"
            body = body.dropFirst()
        }
        var mac: MACAddress? = nil
        if let at = body.firstIndex(of: "@") {
            guard let parsed = MACAddress(String(body[..<at])) else {
                throw ParseError(
                    description:
                        "wake rule \"\(text)\": \"\(body[..<at])\" is not a MAC address (write it as 02:00:00:00:00:05)"
                )
            }
            mac = parsed
            body = body[body.index(after: at)...]
        }
        let parts = body.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 2, let transport = WakeTrigger.Transport(rawValue: parts[0].lowercased()) else {
            throw ParseError(
                description:
                    "wake rule \"\(text)\": expected tcp/PORT or udp/PORT, optionally after MAC@ and a leading - to remove"
            )
        }
        guard let number = UInt16(parts[1]), number > 0 else {
            throw ParseError(description: "wake rule \"\(text)\": the port must be a number from 1 to 65535")
        }
        let port = Port(transport, number)
        if let mac {
            var rules = self.perHost[mac] ?? Rules()
            if removing { rules.removed.insert(port) } else { rules.added.insert(port) }
            self.perHost[mac] = rules
        } else if removing {
            self.global.removed.insert(port)
        } else {
            self.global.added.insert(port)
        }
    }
}

extension String {
    var trimmingWhitespace: Substring {
        var text = Substring(self)
        while let first = text.first, first.isWhitespace { text = text.dropFirst() }
        while let last = text.last, last.isWhitespace { text = text.dropLast() }
        return text
    }
}
