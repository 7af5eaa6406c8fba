/// What the proxy saved over a month (`sleepproxyctl savings`, `/api/v1/savings`, the status page;
/// docs/savings.md): per host the hours asleep and awake under the proxy's watch, the energy not used by the power
/// figures given, and the wakes sent and declined; the proxy's own draw for the net saving; and every host's sum for
/// each of the last 30 days, for the page's chart.
public struct SavingsReport: Codable, Hashable, Sendable {
    /// `YYYY-MM`.
    public var month: String
    /// The first and last day counted (`YYYY-MM-DD`, the box's time zone): the month, up to today in the current
    /// one.
    public var from: String
    public var to: String
    /// The hosts with any time in the month, the most saved first.
    public var hosts: [Host]
    /// All hosts together.
    public var total: Figures
    /// The proxy's own box over the same days.
    public var proxy: Proxy
    /// The saving after the proxy's own use (the gross saving when its draw is not given).
    public var netWattHours: Double
    /// The figure for hosts without their own (`host-power-default`), `AWAKE/ASLEEP` in watts.
    public var defaultPower: String
    /// The last `SavingsReport.chartDays` days up to today, oldest first, every host together.
    public var days: [Day]

    /// Days in the chart: a month at a glance.
    public static let chartDays = 30

    public struct Figures: Codable, Hashable, Sendable {
        public var asleepSeconds: Double
        public var awakeSeconds: Double
        public var savedWattHours: Double
        public var wakes: Int
        public var declinedWakes: Int

        public init(
            asleepSeconds: Double = 0, awakeSeconds: Double = 0, savedWattHours: Double = 0, wakes: Int = 0,
            declinedWakes: Int = 0
        ) {
            self.asleepSeconds = asleepSeconds
            self.awakeSeconds = awakeSeconds
            self.savedWattHours = savedWattHours
            self.wakes = wakes
            self.declinedWakes = declinedWakes
        }
    }

    public struct Host: Codable, Hashable, Sendable {
        public var mac: String
        public var name: String?
        public var figures: Figures
        /// The figure used, `AWAKE/ASLEEP` in watts, and whether it is the default.
        public var power: String
        public var powerIsDefault: Bool

        public init(mac: String, name: String?, figures: Figures, power: String, powerIsDefault: Bool) {
            self.mac = mac
            self.name = name
            self.figures = figures
            self.power = power
            self.powerIsDefault = powerIsDefault
        }
    }

    public struct Proxy: Codable, Hashable, Sendable {
        /// Its draw in watts (`proxy-power`); nil when not given.
        public var watts: Double?
        public var runningSeconds: Double
        /// What it used over the days counted; nil when its draw is not given.
        public var usedWattHours: Double?

        public init(watts: Double?, runningSeconds: Double, usedWattHours: Double?) {
            self.watts = watts
            self.runningSeconds = runningSeconds
            self.usedWattHours = usedWattHours
        }
    }

    public struct Day: Codable, Hashable, Sendable {
        /// `YYYY-MM-DD`.
        public var date: String
        public var asleepSeconds: Double
        public var savedWattHours: Double

        public init(date: String, asleepSeconds: Double, savedWattHours: Double) {
            self.date = date
            self.asleepSeconds = asleepSeconds
            self.savedWattHours = savedWattHours
        }
    }

    public init(
        month: String, from: String, to: String, hosts: [Host], total: Figures, proxy: Proxy, netWattHours: Double,
        defaultPower: String, days: [Day]
    ) {
        self.month = month
        self.from = from
        self.to = to
        self.hosts = hosts
        self.total = total
        self.proxy = proxy
        self.netWattHours = netWattHours
        self.defaultPower = defaultPower
        self.days = days
    }
}

/// Running totals since the daemon started, for counters (Prometheus) and Home Assistant's energy sensors: they
/// only grow while it runs (a power figure changed by a reload changes what is added from then on, never what
/// was counted), and start again from zero with the daemon, as counters do.
public struct SavingsCounters: Codable, Hashable, Sendable {
    public struct Host: Codable, Hashable, Sendable {
        public var mac: String
        public var name: String?
        public var asleepSeconds: Double
        public var savedWattHours: Double

        public init(mac: String, name: String?, asleepSeconds: Double, savedWattHours: Double) {
            self.mac = mac
            self.name = name
            self.asleepSeconds = asleepSeconds
            self.savedWattHours = savedWattHours
        }
    }

    /// By MAC order.
    public var hosts: [Host]
    /// Every host together, including hosts no longer listed.
    public var savedWattHours: Double
    /// The proxy's own use since it started; nil when its draw is not given.
    public var proxyUsedWattHours: Double?

    public init(hosts: [Host], savedWattHours: Double, proxyUsedWattHours: Double?) {
        self.hosts = hosts
        self.savedWattHours = savedWattHours
        self.proxyUsedWattHours = proxyUsedWattHours
    }
}
