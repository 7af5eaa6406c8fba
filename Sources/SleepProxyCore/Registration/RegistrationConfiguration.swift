/// Limits and policies of the registration side. Every default is named and cites where it comes from.
public struct RegistrationConfiguration: Hashable, Sendable {
    /// What a refused (policy, capacity, rate) registration gets back.
    public enum RefusalReply: String, Hashable, Sendable, CaseIterable {
        /// Nothing: every client, Apple's included (they ignore the RCODE, docs/protocol.md §3.6), then moves on to
        /// its next proxy.
        case silent
        /// An UPDATE response with RCODE REFUSED.
        case refused
    }

    /// What happens when a host's lease ends while it still sleeps.
    public enum ExpiryAction: String, Hashable, Sendable, CaseIterable {
        /// Wake the host so it can register again (Apple's behaviour, docs/protocol.md §5.4): a lease that ends while
        /// the host sleeps means its own renewal wake did not happen.
        case wake
        /// Drop its records and say goodbye (TTL 0) so browsers forget it at once.
        case dropWithGoodbyes = "drop"
    }

    /// Apple's `MAX_PROXY_RECORDS`: "400 machines at 25 records each" (docs/protocol.md §7).
    public static let defaultMaximumRecords = 10_000
    /// Apple's sizing assumption behind `MAX_PROXY_RECORDS` (docs/protocol.md §7).
    public static let defaultMaximumHosts = 400
    /// Apple sets no per-host limit. A Mac with many services registers a few dozen records (kfix/SleepProxyServer
    /// test dump: ~25); 400 leaves room for hubs publishing many accessories while stopping one host from taking
    /// the whole table.
    public static let defaultMaximumRecordsPerHost = 400
    /// RFC 9664 §8 says servers MUST rate-limit updates. Apple's client sends up to 3 tries at each of up to 3
    /// proxies, 1 s apart, and splits large registrations into several UPDATEs (docs/protocol.md §2.3, §2.5), so a
    /// burst of 32 with 4 more per second never limits a real client.
    public static let defaultRateLimitBurst = 32
    public static let defaultRateLimitPerSecond = 4

    public var leasePolicy: LeasePolicy
    public var maximumRecords: Int
    public var maximumHosts: Int
    public var maximumRecordsPerHost: Int
    /// Require the UPDATE's source address to be one of the addresses it claims. Off lets a peer proxy transfer
    /// registrations it holds (docs/protocol.md §5.6).
    public var requireSourceAmongClaimedAddresses: Bool
    public var refusalReply: RefusalReply
    public var rateLimitBurst: Int
    public var rateLimitPerSecond: Int
    public var expiryAction: ExpiryAction

    public init(
        leasePolicy: LeasePolicy = try! LeasePolicy(),
        maximumRecords: Int = RegistrationConfiguration.defaultMaximumRecords,
        maximumHosts: Int = RegistrationConfiguration.defaultMaximumHosts,
        maximumRecordsPerHost: Int = RegistrationConfiguration.defaultMaximumRecordsPerHost,
        requireSourceAmongClaimedAddresses: Bool = true,
        refusalReply: RefusalReply = .silent,
        rateLimitBurst: Int = RegistrationConfiguration.defaultRateLimitBurst,
        rateLimitPerSecond: Int = RegistrationConfiguration.defaultRateLimitPerSecond,
        expiryAction: ExpiryAction = .wake
    ) {
        self.leasePolicy = leasePolicy
        self.maximumRecords = maximumRecords
        self.maximumHosts = maximumHosts
        self.maximumRecordsPerHost = maximumRecordsPerHost
        self.requireSourceAmongClaimedAddresses = requireSourceAmongClaimedAddresses
        self.refusalReply = refusalReply
        self.rateLimitBurst = rateLimitBurst
        self.rateLimitPerSecond = rateLimitPerSecond
        self.expiryAction = expiryAction
    }
}
