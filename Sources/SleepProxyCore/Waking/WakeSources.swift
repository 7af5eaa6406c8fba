import SleepProxyWire

/// The user's source rules (docs/waking.md §5): sources that never wake anyone, sources that alone may wake a
/// host (or every host), and whether traffic routed in from another subnet may wake at all. Desomnia offers the
/// like; Apple's proxy has none (any source wakes).
public struct WakeSources: Hashable, Sendable {
    /// One source: an address, a subnet, or the MAC a packet arrives from (a router's MAC stands for everything
    /// it routes).
    public enum Matcher: Hashable, Sendable, CustomStringConvertible {
        case prefix(IPPrefix)
        case mac(MACAddress)

        public func matches(_ address: IPAddress, mac: MACAddress) -> Bool {
            switch self {
            case .prefix(let prefix): return prefix.contains(address)
            case .mac(let own): return own == mac
            }
        }

        public var description: String {
            switch self {
            case .prefix(let prefix): return prefix.description
            case .mac(let mac): return mac.description
            }
        }

        /// `192.0.2.7`, `192.0.2.0/24`, `2001:db8::/32`, `fe80::1` or `02:00:00:00:00:07`.
        public init?(_ text: Substring) {
            let trimmed = String(text)
            if let mac = MACAddress(trimmed) {
                self = .mac(mac)
            } else if let prefix = IPPrefix(trimmed) {
                // The prefix's host bits do not matter: 192.0.2.7/24 is the subnet 192.0.2.0/24.
                self = .prefix(prefix)
            } else {
                return nil
            }
        }
    }

    public var ignored: [Matcher] = []
    /// Sources that alone may wake every host (empty: any source may).
    public var onlyFrom: [Matcher] = []
    /// Sources that alone may wake one host (by its primary or wake MAC).
    public var onlyFromPerHost: [MACAddress: [Matcher]] = [:]
    /// Off-link sources (through a router) may wake. Off by default: a port forward or a VPN brings the
    /// internet's scanners too, and Desomnia ignores routed traffic by default for the same reason.
    public var allowRouted = false

    public init(
        ignored: [Matcher] = [], onlyFrom: [Matcher] = [], onlyFromPerHost: [MACAddress: [Matcher]] = [:],
        allowRouted: Bool = false
    ) {
        self.ignored = ignored
        self.onlyFrom = onlyFrom
        self.onlyFromPerHost = onlyFromPerHost
        self.allowRouted = allowRouted
    }

    /// The rule that declines `candidate`, or nil when its source may wake the host. A source that an only-from
    /// rule names explicitly may wake even when routed: naming a VPN's subnet is how routed traffic is allowed
    /// for one host without allowing it for all.
    func declines(_ candidate: WakeCandidate) -> WakeRule? {
        let source = candidate.source
        let mac = candidate.sourceMAC
        if self.ignored.contains(where: { $0.matches(source, mac: mac) }) { return .sourceIgnored }
        var named = false
        let perHost = candidate.hostMACs.compactMap { self.onlyFromPerHost[$0] }
        if !perHost.isEmpty {
            guard perHost.contains(where: { $0.contains { $0.matches(source, mac: mac) } }) else {
                return .sourceNotAllowed
            }
            named = true
        } else if !self.onlyFrom.isEmpty {
            guard self.onlyFrom.contains(where: { $0.matches(source, mac: mac) }) else { return .sourceNotAllowed }
            named = true
        }
        if !candidate.onLink, !self.allowRouted, !named { return .routed }
        return nil
    }

    public struct ParseError: Error, CustomStringConvertible, Equatable {
        public var description: String
    }

    /// `wake-ignore-source = SOURCE`.
    public mutating func addIgnored(_ text: String) throws(ParseError) {
        self.ignored.append(try Self.matcher(text.trimmingWhitespace, setting: "wake-ignore-source", whole: text))
    }

    /// `wake-only-from = [HOSTMAC@]SOURCE`: with a host's MAC, only such sources wake that host; without, only
    /// such sources wake any host that has no rule of its own.
    public mutating func addOnlyFrom(_ text: String) throws(ParseError) {
        let body = text.trimmingWhitespace
        if let at = body.firstIndex(of: "@") {
            guard let host = MACAddress(String(body[..<at])) else {
                throw ParseError(
                    description:
                        "wake-only-from \"\(text)\": \"\(body[..<at])\" is not a MAC address (write the host as 02:00:00:00:00:05@SOURCE)"
                )
            }
            let matcher = try Self.matcher(body[body.index(after: at)...], setting: "wake-only-from", whole: text)
            self.onlyFromPerHost[host, default: []].append(matcher)
        } else {
            self.onlyFrom.append(try Self.matcher(body, setting: "wake-only-from", whole: text))
        }
    }

    static func matcher(_ text: Substring, setting: String, whole: String) throws(ParseError) -> Matcher {
        guard let matcher = Matcher(text) else {
            throw ParseError(
                description:
                    "\(setting) \"\(whole)\": \"\(text)\" is not an address, a subnet (192.0.2.0/24, 2001:db8::/32) or a MAC address"
            )
        }
        return matcher
    }
}
