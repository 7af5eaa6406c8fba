import FoundationEssentials

/// Kernel settings of the proxy machine that work against an address takeover, read from /proc/sys (which shows
/// the settings of the reader's own network namespace). The daemon reports them at start; it changes no sysctl
/// itself (the systemd unit makes /proc/sys read-only, and they are the administrator's machine-wide choices).
public enum KernelSettings {
    public static let defaultRoot = "/proc/sys/net"

    /// What to tell the administrator about `interface`, one sentence each; empty when nothing is wrong.
    ///
    /// With forwarding on (a router, or any machine running Docker, which turns IPv4 forwarding on for all
    /// interfaces), a packet a client sends to a sleeping host reaches the proxy machine, which answers ARP/ND for
    /// that address, and the kernel forwards it back out of the interface it came in on. That is the case in which
    /// a router sends the client a redirect (RFC 1812 §5.2.7.2, RFC 4861 §8): clients of sleeping hosts would be
    /// told to go around the proxy. IPv4 redirects stop only when `send_redirects` is 0 for both `all` and the
    /// interface (the kernel ORs the two); IPv6 has no such switch.
    public static func takeoverProblems(interface: String, root: String = Self.defaultRoot) -> [String] {
        var problems: [String] = []
        let ipv4 = "\(root)/ipv4/conf"
        if self.flag("\(ipv4)/\(interface)/forwarding") == true {
            let sending = ["all", interface].filter { self.flag("\(ipv4)/\($0)/send_redirects") == true }
            if !sending.isEmpty {
                problems.append(
                    "IPv4 forwarding is on for \(interface) (a router, or Docker), so the kernel will send ICMP redirects to clients of sleeping hosts: run `sysctl -w net.ipv4.conf.all.send_redirects=0 net.ipv4.conf.\(interface).send_redirects=0` (and keep it in /etc/sysctl.d)"
                )
            }
        }
        if self.flag("\(root)/ipv6/conf/\(interface)/forwarding") == true {
            problems.append(
                "IPv6 forwarding is on for \(interface), so the kernel will send ICMPv6 redirects to clients of sleeping hosts (Linux has no switch for them): drop them with nftables (README, troubleshooting: \"ICMP redirects\") or turn forwarding off"
            )
        }
        return problems
    }

    /// A 0/1 sysctl, or nil when it cannot be read (no such interface, no IPv6, not Linux).
    static func flag(_ path: String) -> Bool? {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8),
            case let words = text.split(whereSeparator: \.isWhitespace), words.count == 1, let value = Int(words[0])
        else {
            return nil
        }
        return value != 0
    }
}
