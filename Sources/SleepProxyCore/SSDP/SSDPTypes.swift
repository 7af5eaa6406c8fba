import SleepProxyWire

/// One SSDP datagram the proxy wants on the wire: to the SSDP group of one interface and family, or to one
/// address and port (a search response, the search sent to a registering host).
public struct SSDPTransmission: Hashable, Sendable {
    /// `.multicast` means 239.255.255.250 or FF02::C port 1900 here.
    public typealias Destination = MDNSTransmission.Destination

    public var destination: Destination
    public var bytes: [UInt8]

    public init(destination: Destination, bytes: [UInt8]) {
        self.destination = destination
        self.bytes = bytes
    }
}

/// Where on IPv6 a host said something: from its link-local address (its announcements on FF02::C, its answers to
/// searchers at link-local addresses) or from a global one (its answers to searchers at global addresses). A host
/// gives each its own LOCATION (GUPnP runs one client per address), and a control point that meets another
/// LOCATION for a device it knows takes it for a new one and fetches its description, which wakes a sleeping
/// server: the proxy gives each scope exactly what the host gave it (docs/ssdp.md). IPv4 has one scope, `link`.
public enum SSDPScope: String, Hashable, Sendable, Codable {
    case link
    case global

    /// The scope of what `source` sent.
    public init(of source: IPAddress) {
        switch source {
        case .v4: self = .link
        case .v6(let address): self = address.isLinkLocal ? .link : .global
        }
    }
}

/// One thing a host advertises over SSDP: a root device, a device or a service, as one NT (or ST) and its USN,
/// learned from its `ssdp:alive` announcements and its search responses (docs/ssdp.md).
public struct SSDPEntry: Hashable, Sendable {
    /// Learned over IPv4 or IPv6: a host's LOCATION differs by family, and each is answered on its own.
    public var family: IPFamily
    /// Learned from the host's link-local or global address (`SSDPScope`): only `link` entries are announced on
    /// the group, and a search is answered with the entries of the searcher's own scope.
    public var scope: SSDPScope
    /// `upnp:rootdevice`, `uuid:…`, or a `urn:…:device:…` / `urn:…:service:…` type with its version.
    public var notificationType: String
    public var uniqueServiceName: String
    public var location: String
    public var server: String?
    /// Seconds, clamped to `SSDPRules.maximumAgeRange`.
    public var maximumAge: Int
    public var bootID: UInt32?
    public var configID: UInt32?
    /// When the host itself last announced or answered it.
    public var refreshedAt: Timestamp
    /// The host's own interval between two announcements of it, once seen (`SSDPRules.minimumObservedInterval`).
    public var interval: Duration?

    public init(
        family: IPFamily, scope: SSDPScope = .link, notificationType: String, uniqueServiceName: String,
        location: String, server: String?, maximumAge: Int, bootID: UInt32?, configID: UInt32?, refreshedAt: Timestamp,
        interval: Duration? = nil
    ) {
        self.family = family
        self.scope = family == .v4 ? .link : scope
        self.notificationType = notificationType
        self.uniqueServiceName = uniqueServiceName
        self.location = location
        self.server = server
        self.maximumAge = maximumAge
        self.bootID = bootID
        self.configID = configID
        self.refreshedAt = refreshedAt
        self.interval = interval
    }

    var key: SSDPEntryKey {
        SSDPEntryKey(family: self.family, scope: self.scope, uniqueServiceName: self.uniqueServiceName)
    }

    /// What the entry costs against `SSDPRules.maximumBytesPerHost`.
    var byteCount: Int {
        self.notificationType.utf8.count + self.uniqueServiceName.utf8.count + self.location.utf8.count
            + (self.server?.utf8.count ?? 0) + 64
    }

    /// The TCP port of the LOCATION URL, when its host is `address` (the port a control point connects to for the
    /// description: a wake port).
    func locationPort(on addresses: [IPAddress]) -> UInt16? {
        guard let url = SSDPLocation(self.location), let host = url.address, addresses.contains(host) else {
            return nil
        }
        return url.port
    }
}

struct SSDPEntryKey: Hashable, Sendable {
    var family: IPFamily
    var scope: SSDPScope
    var uniqueServiceName: String
}

/// The parts of an `http://host:port/path` LOCATION the proxy needs: the host (an address literal, or a name it
/// does not resolve) and the port (80 when none is given).
public struct SSDPLocation: Hashable, Sendable {
    public var host: String
    public var port: UInt16

    public init?(_ text: String) {
        let scheme = "http://"
        guard text.utf8.count > scheme.utf8.count,
            text.prefix(scheme.count).lowercased() == scheme
        else { return nil }
        let rest = text.dropFirst(scheme.count)
        let authority = rest.prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        var host: Substring
        var portText: Substring? = nil
        if authority.first == "[" {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            host = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if !after.isEmpty {
                guard after.first == ":" else { return nil }
                portText = after.dropFirst()
            }
            // A zone (`%eth0`, or `%25eth0` as RFC 6874 writes it in a URL) names the interface, not the address.
            if let percent = host.firstIndex(of: "%") { host = host[..<percent] }
        } else {
            if let colon = authority.lastIndex(of: ":") {
                host = authority[..<colon]
                portText = authority[authority.index(after: colon)...]
            } else {
                host = authority
            }
        }
        guard !host.isEmpty else { return nil }
        if let portText {
            guard let port = UInt16(portText), port != 0 else { return nil }
            self.port = port
        } else {
            self.port = 80
        }
        self.host = String(host)
    }

    /// The host as an address, when it is an address literal.
    public var address: IPAddress? { IPAddress(self.host) }

    /// Whether a control point could fetch anything there: not 0.0.0.0, a loopback or a group address. minidlna
    /// announces `http://0.0.0.0:8200/…` for a moment after its interface lost and regained its address (a
    /// resume does that); kept, such an entry would replace the good one and send every TV nowhere.
    public var isUsable: Bool {
        switch self.address {
        case nil: return true
        case .v4(let address):
            return address.rawValue != 0 && address.rawValue >> 24 != 127 && !address.isMulticast
                && address != .broadcast
        case .v6(let address):
            return !(address.high == 0 && address.low <= 1) && !address.isMulticast
        }
    }
}

public struct SSDPStatistics: Hashable, Sendable {
    public var received = 0
    /// Not SSDP, or SSDP that breaks UDA's rules (no MAN, no ST, a multicast search without MX…).
    public var malformed = 0
    /// From outside the interface's subnets, or the proxy's own.
    public var ignored = 0
    public var searches = 0
    /// Multicast searches repeated by the same searcher within their MX delay: already being answered.
    public var repeatedSearches = 0
    public var responsesSent = 0
    public var notifiesSent = 0
    public var byebyesSent = 0
    /// Entries or responses refused by a bound (`SSDPRules`).
    public var overLimit = 0
    public var hostSearchesSent = 0

    public init() {}
}
