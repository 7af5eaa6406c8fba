import SleepProxyWire

/// The numbers of the SSDP side (docs/ssdp.md), each with its source. UDA is the UPnP Device Architecture 1.1.
public enum SSDPRules {
    /// UDA §1.1.2: SSDP is HTTP over UDP on port 1900, to 239.255.255.250 or FF02::C (link-local scope).
    public static let port: UInt16 = 1900
    public static let group4 = IPv4Address(239, 255, 255, 250)
    public static let group6 = IPv6Address("ff02::c")!
    /// UDA §1.1.2: the TTL of multicast SSDP should default to 2.
    public static let multicastTTL = 2

    /// Entries (one per NT: rootdevice, uuid, each device and service type) one host keeps. UDA §1.2.2: a root
    /// device announces 3 + 2d + k of them (d embedded devices, k distinct service types): minidlna 6, a NAS
    /// with a media server, a printer and a router profile about 25.
    public static let maximumEntriesPerHost = 64
    /// Bytes of learned text (NT, USN, LOCATION, SERVER) per host: 64 entries of typical size fit well within it;
    /// a hostile host cannot make one entry cost more than the codec's line bound anyway.
    public static let maximumBytesPerHost = 32_768
    /// Bytes of learned text in all, hosts and unregistered addresses together: a NAS's full set of devices is
    /// about 20 KiB, so this holds 400 of them (the default `--max-hosts`) and stays a small share of a Raspberry
    /// Pi's memory even when every host on a large link runs UPnP servers. Beyond it, new entries are refused and
    /// counted; known ones are still refreshed.
    public static let maximumTotalBytes = 8 << 20
    /// Addresses not registered (yet) whose announcements are kept, for a host that announces before it
    /// registers. Oldest dropped first.
    public static let maximumUnclaimedSources = 256

    /// `max-age` is clamped to this range. UDA §1.2.2 asks for at least 1800 s, but a host's control points hold
    /// it to what it said: the proxy repeats the host's own value, or its announcements would lapse in their caches
    /// before the next one (a lapse makes a control point take the next announcement for a new device and fetch
    /// its description: a wake nobody asked for). Below 20 s it is not a cache lifetime; above a day, not one
    /// either.
    public static let maximumAgeRange: ClosedRange<Int> = 20...86_400
    /// UDA §1.2.2: `max-age` is required; a message without one is taken to mean the recommended 1800 s.
    public static let defaultMaximumAge = 1_800
    /// The proxy's announcements on a host's behalf repeat at the host's own interval when it was seen (two
    /// announcements of the same entry at least this far apart: UDA devices send each one two or three times a
    /// few hundred milliseconds apart, which is not their interval)...
    public static let minimumObservedInterval: Duration = .seconds(5)
    /// ...and otherwise at a little less than half the `max-age`, as UDA §1.2.2 recommends...
    public static let intervalShareOfMaximumAge = 0.45
    /// ...never more than half the `max-age` (a host announcing more rarely than that is late in its own control
    /// points' caches; the proxy is not)...
    public static let largestShareOfMaximumAge = 0.5
    /// ...and never more often than this, whatever a host says: a hostile `max-age` must not turn the proxy into
    /// a multicast source. 10 s is half of the shortest `max-age` kept.
    public static let minimumAnnouncementInterval: Duration = .seconds(10)
    /// The first set of announcements after the proxy starts speaking for a host: at once (but not in the same
    /// second as the takeover's gratuitous ARPs), whenever the host last announced. Its control points' caches
    /// run from that last announcement, which may be nearly a `max-age` ago (measured: GUPnP dropped minidlna
    /// and fetched its description again, waking it, when the first set waited for the host's schedule).
    public static let firstAnnouncementDelay: ClosedRange<Int64> = 1_000...3_000

    /// UDA §1.3.2: a multicast search carries `MX` (1 to 5 s); responses are spread over a random delay up to it.
    /// A search with none, or with 0, is not valid and is not answered.
    public static let minimumSearchWait = 1
    /// Responses waiting for their delay at most: an M-SEARCH flood must not grow memory without bound. Further
    /// responses are dropped and counted.
    public static let maximumPendingResponses = 4_096
    /// `MX` of the searches sent when a host registers. UDA §1.3.2 gives unicast searches no MX; devices that
    /// require one anyway answer at once with 1, and the group search's answers come within a second.
    public static let registrationSearchWait = 1
    /// A registering host is also searched for through the group: minidlna binds its SSDP socket to
    /// 239.255.255.250 and never sees a unicast search (docs/ssdp.md). At most one group search per interface
    /// this often, however many hosts register: a storm of registrations must not become a storm of searches
    /// that every UPnP device on the link answers.
    public static let groupSearchInterval: Duration = .seconds(10)
}
