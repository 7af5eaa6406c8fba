import SleepProxyWire

/// How long registrations are kept: the granted lease is the requested one clamped to `[minimum, maximum]`.
///
/// RFC 9664 §8: servers SHOULD clamp leases, with a maximum of 24 hours and a minimum of 30 seconds; Apple's
/// proxy caps at 86,400 s (docs/protocol.md §3.6). A lease of 0 is not a deletion but a malformed request, as in
/// Apple's proxy (docs/protocol.md §5.3), so it has no grant.
public struct LeasePolicy: Hashable, Sendable {
    /// RFC 9664 §8 and Apple's `mDNSCoreReceiveUpdate`: 24 hours.
    public static let defaultMaximum: UInt32 = 86_400
    /// RFC 9664 §8: 30 seconds.
    public static let defaultMinimum: UInt32 = 30

    public let minimum: UInt32
    public let maximum: UInt32

    public enum ConfigurationError: Error, Equatable, Sendable {
        case minimumAboveMaximum(minimum: UInt32, maximum: UInt32)
        case zeroMinimum
    }

    public init(minimum: UInt32 = LeasePolicy.defaultMinimum, maximum: UInt32 = LeasePolicy.defaultMaximum)
        throws(ConfigurationError)
    {
        guard minimum > 0 else { throw .zeroMinimum }
        guard minimum <= maximum else { throw .minimumAboveMaximum(minimum: minimum, maximum: maximum) }
        self.minimum = minimum
        self.maximum = maximum
    }

    /// The lease to grant for `requested` seconds, or nil for a request of 0.
    public func grant(_ requested: UInt32) -> UInt32? {
        guard requested > 0 else { return nil }
        return min(max(requested, self.minimum), self.maximum)
    }
}
