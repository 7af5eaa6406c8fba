import Foundation
import SleepProxyWire

/// A small LAN inside the machine: one bridge in its own namespace (multicast snooping off, so mDNS floods to
/// every port) and hosts, each in its own namespace with one veth port called `eth0`.
///
/// Addresses are documentation (192.0.2.0/24, 2001:db8::/64) or link-local only; DAD is off so IPv6 addresses
/// are usable at once; every host has a route for 224.0.0.0/4 (without it multicast sends fail, docs/linux.md §7).
/// Each lab has its own namespaces, so labs in parallel tests never see each other.
public final class LabNetwork: @unchecked Sendable {
    // @unchecked: `hosts` is guarded by `lock`.
    public let bridge: NetworkNamespace
    private let lock = NSLock()
    private var hosts: [LabHost] = []
    public let directory: URL

    public init() throws {
        self.bridge = try NetworkNamespace()
        self.directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "sleepproxy-lab-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: self.directory, withIntermediateDirectories: true)
        try self.bridge.check(["ip", "link", "add", "br0", "type", "bridge", "mcast_snooping", "0"])
        try self.bridge.check(["ip", "link", "set", "br0", "up"])
    }

    deinit { self.close() }

    /// Adds a host `name` with `mac`, IPv4 addresses in CIDR form and optional extra IPv6 addresses; its IPv6
    /// link-local address is derived from the MAC (EUI-64).
    @discardableResult
    public func addHost(_ name: String, mac: MACAddress, ipv4: [String] = [], ipv6: [String] = []) throws -> LabHost {
        let namespace = try NetworkNamespace()
        let port = "p-\(name)"
        try Command.check([
            "ip", "link", "add", "eth0", "netns", "\(namespace.pid)", "address", mac.description, "type", "veth",
            "peer", "name", port, "netns", "\(self.bridge.pid)",
        ])
        try self.bridge.check(["ip", "link", "set", port, "master", "br0", "up"])
        try namespace.check([
            "sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0",
            "net.ipv6.conf.eth0.accept_dad=0",
        ])
        for address in ipv4 { try namespace.check(["ip", "addr", "add", address, "dev", "eth0"]) }
        for address in ipv6 { try namespace.check(["ip", "-6", "addr", "add", address, "dev", "eth0", "nodad"]) }
        try namespace.check(["ip", "link", "set", "eth0", "up"])
        try namespace.check(["ip", "route", "add", "224.0.0.0/4", "dev", "eth0"])
        let host = LabHost(name: name, namespace: namespace, mac: mac, lab: self)
        // Wait (bounded) for the link-local address, derived once the link is up.
        let deadline = Date(timeIntervalSinceNow: 5)
        while Date() < deadline,
            try !namespace.run(["ip", "-6", "addr", "show", "dev", "eth0", "scope", "link"]).stdout.contains("fe80")
        {
            usleep(20_000)
        }
        self.lock.withLock { self.hosts.append(host) }
        return host
    }

    public func close() {
        let hosts = self.lock.withLock {
            let hosts = self.hosts
            self.hosts = []
            return hosts
        }
        for host in hosts { host.namespace.close() }
        self.bridge.close()
        try? FileManager.default.removeItem(at: self.directory)
    }
}

public final class LabHost: Sendable {
    public let name: String
    public let namespace: NetworkNamespace
    public let mac: MACAddress
    public let interface = "eth0"
    public let labDirectory: URL

    init(name: String, namespace: NetworkNamespace, mac: MACAddress, lab: LabNetwork) {
        self.name = name
        self.namespace = namespace
        self.mac = mac
        self.labDirectory = lab.directory
    }

    /// The EUI-64 link-local address the kernel derives from the MAC.
    public var linkLocal: IPv6Address {
        let b = self.mac.bytes
        let low =
            UInt64(b[0] ^ 0x02) << 56 | UInt64(b[1]) << 48 | UInt64(b[2]) << 40 | 0xFF_FE00_0000 | UInt64(b[3]) << 16
            | UInt64(b[4]) << 8 | UInt64(b[5])
        return IPv6Address(high: 0xFE80_0000_0000_0000, low: low)
    }

    @discardableResult
    public func run(_ arguments: [String], timeout: Duration = .seconds(30), input: Data? = nil) throws
        -> CommandResult
    {
        try self.namespace.run(arguments, timeout: timeout, input: input)
    }

    public func spawn(_ arguments: [String], logName: String) throws -> ManagedProcess {
        try self.namespace.spawn(
            arguments, log: self.labDirectory.appendingPathComponent("\(self.name)-\(logName).log"))
    }

    public func setLink(up: Bool) throws {
        try self.namespace.check(["ip", "link", "set", "eth0", up ? "up" : "down"])
    }

    public func addAddress(_ cidr: String) throws {
        try self.namespace.check(["ip", "addr", "add", cidr, "dev", "eth0"] + (cidr.contains(":") ? ["nodad"] : []))
    }

    public func removeAddress(_ cidr: String) throws {
        try self.namespace.check(["ip", "addr", "del", cidr, "dev", "eth0"])
    }
}
