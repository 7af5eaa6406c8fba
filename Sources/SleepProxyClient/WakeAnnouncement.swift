/// When a waking client tells the proxies it is back.
///
/// Apple's client puts its Owner option (new sequence number) into every mDNS packet it sends for 60 s after
/// waking and whenever an interface comes up (docs/protocol.md §3.5, `AnnounceOwner`); a proxy drops the host's
/// records silently on the first one it hears (§5.1). A Linux client cannot add the option to avahi-daemon's
/// packets, so it sends probes of its own on this schedule, counted from the moment the interface has its
/// address back: a resumed NIC often needs seconds to renegotiate its link or renew its lease, and a packet sent
/// before that reaches nobody — the proxy would go on answering for the host, and the host's own responder would
/// then see its name defended and rename itself.
public enum WakeAnnouncement {
    /// Apple's `AnnounceOwner` window (docs/protocol.md §3.5 and the §11 table: 60 s).
    public static let window: Duration = .seconds(60)

    /// How long to wait for the interface's address after resume before giving up (a DHCP renewal takes a few
    /// seconds; longer than the window would be pointless, since proxies also hand back 60 s after registration
    /// on any packet from the host, §5.1).
    public static let addressWait: Duration = .seconds(30)

    /// Offsets from the first transmission: three packets 250 ms apart, as a probe burst (RFC 6762 §8.1), then
    /// doubling gaps (RFC 6762 §8.3 announces at least twice a second apart; continuing to double keeps the
    /// traffic at ten packets in all) until the end of `window`.
    public static func schedule(window: Duration = Self.window) -> [Duration] {
        var offsets: [Duration] = [.zero, .milliseconds(250), .milliseconds(500)]
        var next: Duration = .seconds(1)
        while next < window {
            offsets.append(next)
            next *= 2
        }
        offsets.append(window)
        return offsets.filter { $0 <= window }.reduce(into: []) { kept, offset in
            if kept.last != offset { kept.append(offset) }
        }
    }
}
