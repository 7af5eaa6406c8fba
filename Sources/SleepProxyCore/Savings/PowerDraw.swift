import SleepProxyWire

/// What a host draws awake and asleep, in watts, as a person gives it (`host-power = MAC@AWAKE_W[/ASLEEP_W]`,
/// `host-power-default = AWAKE_W[/ASLEEP_W]`; docs/savings.md, "Energy"). The saving of an hour asleep is the
/// difference.
public struct PowerDraw: Hashable, Sendable, CustomStringConvertible {
    /// Ours: more than any computer of a home draws idle (a workstation with two graphics cards idles under 300 W);
    /// a figure past it is a typo (milliwatts, or a kWh figure).
    public static let maximumWatts = 5_000.0
    /// What `host-power-default` is when not given: the most ENERGY STAR 4.0 (2007) allowed a basic desktop
    /// (category A) idle, and asleep (docs/savings.md, "Energy").
    public static let typicalDesktop = PowerDraw(awakeWatts: 50, asleepWatts: 4)

    public var awakeWatts: Double
    public var asleepWatts: Double

    public init(awakeWatts: Double, asleepWatts: Double) {
        self.awakeWatts = awakeWatts
        self.asleepWatts = asleepWatts
    }

    public enum ParseError: Error, Hashable, Sendable, CustomStringConvertible {
        case notAFigure(String)
        case outOfRange(String)
        case asleepAboveAwake(String)
        case notAMAC(String)

        public var description: String {
            switch self {
            case .notAFigure(let text):
                "\"\(text)\" is not a power figure: watts awake, then optionally / and watts asleep (50/4)"
            case .outOfRange(let text):
                "\"\(text)\": a draw is from 0 to \(Int(PowerDraw.maximumWatts)) W"
            case .asleepAboveAwake(let text): "\"\(text)\": the draw asleep is above the draw awake"
            case .notAMAC(let text):
                "\"\(text)\" does not start with a host's MAC address and @ (02:00:00:00:00:05@45/2)"
            }
        }
    }

    /// Energy saved by `milliseconds` asleep, in watt-hours; never negative.
    public func savedWattHours(asleepMilliseconds milliseconds: Int64) -> Double {
        max(0, self.awakeWatts - self.asleepWatts) * Double(milliseconds) / 3_600_000
    }

    /// `AWAKE[/ASLEEP]`; without the draw asleep, `asleepDefault`'s (a sleeping computer's few watts are not 0).
    public init(parsing text: String, asleepDefault: Double) throws(ParseError) {
        let parts = text.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == 1 || parts.count == 2 else { throw .notAFigure(text) }
        guard let awake = Self.watts(parts[0]) else { throw .notAFigure(text) }
        let asleep: Double
        if parts.count == 2 {
            guard let figure = Self.watts(parts[1]) else { throw .notAFigure(text) }
            asleep = figure
        } else {
            asleep = min(asleepDefault, awake)
        }
        guard awake <= Self.maximumWatts, asleep <= Self.maximumWatts else { throw .outOfRange(text) }
        guard asleep <= awake else { throw .asleepAboveAwake(text) }
        self.init(awakeWatts: awake, asleepWatts: asleep)
    }

    /// One draw in watts (the proxy's own box, `proxy-power`), within `maximumWatts`.
    public static func parseWatts(_ text: String) throws(ParseError) -> Double {
        guard let watts = Self.watts(Substring(text)) else { throw .notAFigure(text) }
        guard watts <= Self.maximumWatts else { throw .outOfRange(text) }
        return watts
    }

    /// `MAC@AWAKE[/ASLEEP]`, a host's figure.
    public static func parseHost(_ text: String, asleepDefault: Double) throws(ParseError) -> (MACAddress, PowerDraw) {
        guard let at = text.firstIndex(of: "@"), let mac = MACAddress(String(text[..<at])), mac != .zero,
            mac.bytes[0] & 1 == 0
        else { throw .notAMAC(text) }
        let figure = try PowerDraw(parsing: String(text[text.index(after: at)...]), asleepDefault: asleepDefault)
        return (mac, figure)
    }

    /// A plain decimal of watts: digits, at most one point, no sign, no exponent, not NaN.
    static func watts(_ text: Substring) -> Double? {
        let trimmed = text.filter { $0 != " " }
        guard !trimmed.isEmpty, trimmed.count <= 12,
            trimmed.allSatisfy({ $0.isASCII && ($0.isNumber || $0 == ".") }),
            trimmed.filter({ $0 == "." }).count <= 1, let value = Double(trimmed), value.isFinite
        else { return nil }
        return value
    }

    public var description: String {
        "\(Self.format(self.awakeWatts))/\(Self.format(self.asleepWatts))"
    }

    static func format(_ watts: Double) -> String {
        watts == watts.rounded() ? String(Int(watts)) : String(watts)
    }
}

/// The power figures a proxy runs with: per host, the default for the others, and the proxy's own box.
public struct PowerFigures: Hashable, Sendable {
    public var hosts: [MACAddress: PowerDraw]
    public var defaultDraw: PowerDraw
    /// The proxy's own box, in watts; nil when not given (then the net saving is the gross one, and says so).
    public var proxyWatts: Double?

    public init(
        hosts: [MACAddress: PowerDraw] = [:], defaultDraw: PowerDraw = .typicalDesktop, proxyWatts: Double? = nil
    ) {
        self.hosts = hosts
        self.defaultDraw = defaultDraw
        self.proxyWatts = proxyWatts
    }

    /// A host's figure (keyed as the ledger keys it, by its MAC's text), and whether it is the default.
    public func draw(forHost key: String) -> (draw: PowerDraw, isDefault: Bool) {
        if let mac = MACAddress(key), let draw = self.hosts[mac] { return (draw, false) }
        return (self.defaultDraw, true)
    }
}
