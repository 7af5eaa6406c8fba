/// The numbers behind `WakeGate`, each with its source (docs/waking.md has the measurements behind them).
public enum WakeRules {
    /// A first SYN from a source that did not resolve the host is held this long before it wakes. nmap in Home
    /// Assistant's profile sends 10 distinct ports within 50 ms, its connect scan likewise, its default timing 10
    /// at once (docs/waking.md §2); a host takes seconds to resume, so the hold costs a person little, and 300 ms
    /// plus a 0.5 s resume keeps a bare connect() within 1 s.
    public static let holdDelay: Duration = .milliseconds(300)
    /// Touches (distinct host and port) are counted over this window. nmap's first tries come within 2 s, its
    /// retries within 300 ms of them; Juniper counts over 5 ms, Snort over 60 s. Ten seconds catches every nmap
    /// timing from T3 up and still forgets a person's earlier connections quickly.
    public static let scanWindow: Duration = .seconds(10)
    /// Distinct ports of one sleeping host that make a scanner. People touch at most two at once (Windows
    /// Explorer opens 445 and 139 together, Finder 445 and 548); three is a scan.
    public static let scanPortsPerHost = 3
    /// Distinct sleeping hosts that make a sweeper. Snort's portscan counts 5 targets; a Mac reconnecting its
    /// shares after waking may touch a few sleeping hosts at once, so fewer would catch people.
    public static let scanHosts = 5
    /// A scanner wakes nobody for this long after its last packet. Home Assistant scans every 120 s, so its
    /// quarantine never lapses while it keeps scanning; a laptop that ran nmap once is forgiven ten minutes on.
    public static let scannerQuarantine: Duration = .seconds(600)
    /// How long a resolve through the proxy vouches for its source: the TTL of the SRV and address records
    /// (RFC 6762 §10, 120 s), since a client may connect without asking again while its cache holds them.
    /// The issue asked for a minute; the TTL is the time a real client can act on its answer.
    public static let resolveWindow: Duration = .seconds(120)
    /// The identical SYN seen again after at least this long is an operating system's retransmission (every
    /// stack measured waits a second or more, docs/waking.md §3); sooner is a duplicate on the wire.
    public static let retransmissionMinimumGap: Duration = .milliseconds(500)
    /// How long a SYN that must prove itself waits for its retransmission: Windows 7 and earlier retransmit
    /// after 3 s, everything newer after 1 s.
    public static let retransmissionWait: Duration = .milliseconds(3500)
    /// Connection attempts remembered for recognising retransmissions: Windows' third try comes at 7 s.
    public static let connectionMemory: Duration = .seconds(20)
    /// The default of `wake-monitor-holdoff`: a source that woke a host without resolving it wakes that host no
    /// more for this long, unless it resolves it (docs/waking.md §6). An hour is longer than the idle time after
    /// which a Mac or a NAS sleeps again, so a dashboard polling every minute wakes it at most once an hour.
    public static let defaultMonitorHoldoff: Duration = .seconds(3600)
    /// The longest `wake-monitor-holdoff` accepted: a week. Longer is a typo, or a wish for a source rule.
    public static let maximumMonitorHoldoffSeconds = 7 * 24 * 3600
    /// Declines of one kind (source, host, rule) are logged once, then counted and logged again with their count
    /// at most this often: a scan of 200 packets is one line, Home Assistant's round every two minutes is one
    /// line in ten minutes.
    public static let declineLogInterval: Duration = .seconds(600)

    /// How often the tables are swept of what has expired (a resolve past its window, a quarantine over, a
    /// connection too old to be retransmitted). Without it they were cleaned only as they reached their bounds, so
    /// a proxy running for weeks held days of stale entries (a month's run of the engine showed them grow,
    /// docs/long-running.md); a minute keeps them at what the last minutes saw, for one pass over them a minute.
    public static let sweepInterval: Duration = .seconds(60)

    // Bounds: every table the network fills is bounded; the oldest entries go first.
    /// Sources whose touches are counted at once.
    public static let maximumTrackedSources = 4096
    /// Distinct (host, port) touches kept per source: enough to see either threshold crossed.
    public static let maximumTouchesPerSource = 16
    /// Packets held at once; more in one moment is a flood, and those are declined (`busy`).
    public static let maximumHeld = 1024
    /// Connection attempts kept for retransmission matching.
    public static let maximumConnections = 4096
    /// Sources in quarantine at once.
    public static let maximumScanners = 1024
    /// Sources remembered as having resolved a host (each with a few hosts).
    public static let maximumResolvers = 4096
    public static let maximumResolvedHostsPerSource = 16
    /// Addresses whose MAC is remembered, to match a resolve over one family with a connection over the other.
    public static let maximumLearnedMACs = 4096
    /// (source, host) pairs on a monitor budget.
    public static let maximumBudgets = 4096
    /// (source, host, rule) keys whose declines are being collapsed.
    public static let maximumDeclineKeys = 1024
    /// A TCP SYN with only an MSS option and a window this small or smaller is shaped like nmap's raw probe
    /// (window 1024, MSS only); every desktop stack offers SACK and window scaling and a larger window.
    public static let probeWindowLimit: UInt16 = 4096
    /// TCP option kind of the MSS (RFC 9293 §3.2).
    static let mssOption: UInt8 = 2
}
