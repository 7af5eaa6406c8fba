import SleepProxyWire

/// The numbers of RFC 6762 (and of Apple's responder, where it is the reference) that the responder enforces,
/// each in one place with its source.
public enum MDNSRules {
    /// RFC 6762 §3: the mDNS port.
    public static let port: UInt16 = 5353
    /// RFC 6762 §6.7: "the TTL given in a legacy unicast response SHOULD NOT be greater than ten seconds".
    public static let legacyUnicastMaximumTTL: UInt32 = 10
    /// RFC 6762 §6.2: a record is multicast on an interface at most once per second.
    public static let multicastRateLimit: Duration = .seconds(1)
    /// RFC 6762 §6.2: when answering a probe, the limit is relaxed to 250 ms ("defend ... without delay").
    public static let probeDefenceRateLimit: Duration = .milliseconds(250)
    /// RFC 6762 §6: shared answers wait a random 20–120 ms so that answers of several responders aggregate.
    public static let sharedAnswerDelay: ClosedRange<Int64> = 20...120
    /// RFC 6762 §7.2: a query with TC set waits 400–500 ms for the rest of its known answers.
    public static let truncatedQueryDelay: ClosedRange<Int64> = 400...500
    /// RFC 6762 §6: a delayed response may be aggregated with others for up to 500 ms.
    public static let maximumAggregation: Duration = .milliseconds(500)
    /// RFC 6762 §7.1: a known answer suppresses ours only if its TTL is at least half of ours.
    public static func knownAnswerSuppresses(knownTTL: UInt32, ourTTL: UInt32) -> Bool {
        UInt64(knownTTL) * 2 >= UInt64(ourTTL)
    }
    /// RFC 6762 §5.4: a QU question is answered by multicast after all if the record has not been multicast on
    /// the interface within a quarter of its TTL.
    public static func quarterTTL(_ ttl: UInt32) -> Duration { .milliseconds(Int64(ttl) * 250) }
    /// Apple's `NormalMaxDNSMessageData`: the payload of a multicast response fits an Ethernet frame with room
    /// for IPv6 and UDP headers (RFC 6762 §17 asks to stay within the MTU). One larger record goes alone.
    public static let maximumResponsePayload = 1440
    /// RFC 1035 §4.2.1: a legacy unicast response without EDNS is at most 512 bytes; larger ones set TC.
    public static let legacyPayloadWithoutEDNS = 512
    /// RFC 6762 §8.1: three probes, 250 ms apart, the first after a random 0–250 ms.
    public static let probeCount = 3
    public static let probeInterval: Duration = .milliseconds(250)
    public static let initialProbeDelay: ClosedRange<Int64> = 0...250
    /// RFC 6762 §8.2: after losing a simultaneous-probe tie-break, wait one second and probe again.
    public static let probeTieBreakDelay: Duration = .seconds(1)
    /// RFC 6762 §8.1: after 15 conflicts within 10 s, wait five seconds between probes (rename storms).
    public static let conflictStormCount = 15
    public static let conflictStormDelay: Duration = .seconds(5)
    /// RFC 6762 §8.3: at least two announcements, one second apart. Apple sends two for proxied records
    /// (docs/protocol.md §4.2).
    public static let announcementCount = 2
    public static let announcementInterval: Duration = .seconds(1)
    /// docs/protocol.md §4.2: a proxied unique record is announced after Apple's silent probing (~0.9 s); shared
    /// ones start at once.
    public static let proxiedUniqueAnnouncementDelay: Duration = .milliseconds(900)
    /// Ours (docs/scale.md): announcements (and goodbyes) sent in one timer pass at most, so that queries are answered
    /// between the passes of a wave of thousands of hosts falling asleep together (RFC 6762 §8.3 asks for the
    /// announcements, not for them all in one instant). 8 of a Mac-sized host's are about a millisecond of work.
    public static let maximumAnnouncementsPerTick = 8
    /// docs/protocol.md §8: goodbyes for proxied records go out three times, two seconds apart.
    public static let goodbyeCount = 3
    public static let goodbyeInterval: Duration = .seconds(2)
    /// docs/protocol.md §5.1: packets with the registration's own Owner sequence within 60 s of registering are the
    /// host's own traffic as it falls asleep; after that, or with another sequence, they mean it is awake.
    public static let handBackGrace: Duration = .seconds(60)
    /// TTLs of the proxy's own records (RFC 6762 §10: 120 s for host-name-bearing records, 75 minutes else).
    public static let hostRecordTTL: UInt32 = 120
    public static let otherRecordTTL: UInt32 = 4500
    /// Bound on queries held for their known-answer continuation (RFC 6762 §7.2), so a flood of TC queries from
    /// many sources cannot grow memory without limit.
    public static let maximumHeldQueries = 256
    /// Bound on questions and on known answers accumulated for one held query.
    public static let maximumKnownAnswers = 2048
    /// Bound on the packet bytes all held queries together have taken in: a continuation packet can carry a few
    /// large known answers, so a count alone would let 500 ms of a fast link pin tens of megabytes. Past it,
    /// continuations are ignored (the answer then only repeats what the querier knew).
    public static let maximumHeldBytes = 1 << 20
    /// Bounds on the legacy-answer cache (our own, not an RFC's): a querier can vary the case of a name or the
    /// payload size it offers to make many entries, so both the count and the bytes held are capped; past
    /// either, the cache starts again empty (a miss only costs the normal answer path).
    public static let maximumCachedLegacyAnswers = 4096
    public static let maximumCachedLegacyBytes = 1 << 20
}

/// An address family, for choosing the mDNS group an answer goes to.
public enum IPFamily: Hashable, Sendable, CustomStringConvertible {
    case v4, v6

    public init(_ address: IPAddress) {
        switch address {
        case .v4: self = .v4
        case .v6: self = .v6
        }
    }

    public var description: String { self == .v4 ? "IPv4" : "IPv6" }
}
