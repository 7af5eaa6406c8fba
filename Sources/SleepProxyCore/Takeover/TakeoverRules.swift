/// The timings and bounds of address takeover and waking, each with its source.
public enum TakeoverRules {
    /// docs/protocol.md §4.3: the proxy starts probing about a second after the registration, giving the host time
    /// to actually go to sleep.
    public static let startDelay: Duration = .seconds(1)
    /// docs/protocol.md §4.3 / RFC 5227 §2.1.1: three probes unicast to the owner's wake MAC, a second apart.
    public static let probeCount = 3
    public static let probeInterval: Duration = .seconds(1)
    /// Ours: between two probes of a host another proxy handed over (`Takeover.handedOver`). The host sleeps
    /// already, so its three probes take 0.6 s, not the 4 s of a host going to sleep, and the proxy answers for it
    /// within a second of the other letting go; an awake host still answers the first probe within milliseconds.
    public static let handoverProbeInterval: Duration = .milliseconds(200)
    /// docs/protocol.md §4.3, Apple's four announcements: gratuitous ARP (unsolicited NA) at 0, 1, 3 and 7 s.
    public static let announcementOffsets: [Duration] = [.zero, .seconds(1), .seconds(3), .seconds(7)]
    /// docs/protocol.md §5.2: after the owner is seen on the wire, probing starts again after 10 s (1 s when it
    /// had not announced yet), at most 20 times (`MAX_PROBE_RESTARTS`).
    public static let restartDelayAfterAnnouncing: Duration = .seconds(10)
    public static let restartDelayBeforeAnnouncing: Duration = .seconds(1)
    public static let maximumProbeRestarts = 20
    /// Ours (docs/scale.md): hosts stepped in one timer pass at most. Thousands of hosts registered in one second come
    /// due together a second later; stepping them all at once would hold every query behind a pass of tens of
    /// milliseconds. The rest stay due and are stepped in the next pass, after the packets that came meanwhile.
    /// Claiming a host (its frames, its records' first announcement) is about 0.2 ms of work, so 8 hosts keep a
    /// pass near a millisecond and queries answered within RFC 6762's legacy expectations (sleepproxy-bench scale:
    /// 64 hosts a pass delayed queries by 5-15 ms while 10,000 hosts were taken over).
    public static let maximumHostsPerTick = 8
    /// docs/protocol.md §4.6: one burst of magic packets per host every 2 s, 15 bursts at most.
    public static let wakeInterval: Duration = .seconds(2)
    public static let maximumWakeAttempts = 15
    /// After a wake sequence ended without a sign of the host, a new trigger may start another only after this
    /// long (our own rate limit: a client retrying a connection to a host whose Wake-on-LAN is off must not keep
    /// the link busy with magic packets).
    public static let wakeHoldoff: Duration = .seconds(10)
    /// Connection requests kept per host for replay once it is awake, and how old they may be (a client's
    /// connect() gives up after about 75-130 s; a replay older than a minute helps nobody).
    public static let maximumReplayedSegments = 8
    public static let replayWindow: Duration = .seconds(60)
    /// docs/protocol.md §4.3: Apple's capture filter took at most 250 addresses per interface (`MAX_BPF_ADDRS`).
    /// Past it, the filter passes all IP traffic and the packet path sorts it out.
    public static let maximumFilteredAddresses = 250
    /// docs/protocol.md §4.4: SSH (port 22) wakes on any segment but RST and FIN-only, not only on a SYN.
    public static let sshPort: UInt16 = 22
    /// docs/protocol.md §4.4: a one-byte 0xFF datagram to IPsec NAT-T is a keepalive, never a reason to wake.
    public static let natTraversalPort: UInt16 = 4500
}
