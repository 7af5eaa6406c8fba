import CNetlink
import Dispatch
import FoundationEssentials
import Logging
import SleepProxyWire

#if canImport(Glibc)
    import Glibc
#endif

/// Neighbour entries on the proxy machine through libnl-route-3 (docs/linux.md §3).
///
/// docs/protocol.md §4.3: while the proxy answers ARP/ND for a sleeping host, its own kernel must not be left asking
/// (our answers go onto the wire, never back into the local stack). A permanent entry "proxied address → the
/// owner's MAC" lets a local connection go straight to the host, where the packet socket sees the SYN and wakes
/// it; the entry is removed when the proxy lets go of the address.
public final class NeighbourTable: @unchecked Sendable {
    // @unchecked: `socket` is used only on `queue`.
    private let socket: OpaquePointer
    private let logger: Logger
    /// Changes wait for the kernel's acknowledgement (tens of microseconds each); a takeover of a hundred hosts
    /// at once made the engine thread wait for all of them, in the middle of answering registrations. They run
    /// here instead, in order.
    private let queue = DispatchQueue(label: "sleepproxyd.neighbours")

    public init(logger: Logger) throws {
        guard let socket = nl_socket_alloc() else { throw SystemCallError(function: "nl_socket_alloc", errno: ENOMEM) }
        let status = nl_connect(socket, NETLINK_ROUTE)
        guard status == 0 else {
            nl_socket_free(socket)
            throw NetlinkError(operation: "connect to rtnetlink", code: status)
        }
        self.socket = socket
        self.logger = logger
    }

    deinit {
        // Every queued change holds a reference to this table, so none is pending here.
        nl_close(self.socket)
        nl_socket_free(self.socket)
    }

    public func set(interfaceIndex: Int, address: IPAddress, mac: MACAddress) {
        self.queue.async { self.change(interfaceIndex: interfaceIndex, address: address, mac: mac) }
    }

    public func remove(interfaceIndex: Int, address: IPAddress) {
        self.queue.async { self.change(interfaceIndex: interfaceIndex, address: address, mac: nil) }
    }

    /// Returns once every change asked for so far is made (before exit: no entry may outlive the proxy).
    public func flush() {
        self.queue.sync {}
    }

    private func change(interfaceIndex: Int, address: IPAddress, mac: MACAddress?) {
        guard let neighbour = rtnl_neigh_alloc() else { return }
        defer { rtnl_neigh_put(neighbour) }
        rtnl_neigh_set_ifindex(neighbour, Int32(interfaceIndex))
        let family: Int32
        let bytes: [UInt8]
        switch address {
        case .v4(let a): (family, bytes) = (AF_INET, a.bytes)
        case .v6(let a): (family, bytes) = (AF_INET6, a.bytes)
        }
        var raw = bytes
        guard let destination = nl_addr_build(family, &raw, raw.count) else { return }
        defer { nl_addr_put(destination) }
        rtnl_neigh_set_dst(neighbour, destination)
        let status: Int32
        if let mac {
            var macBytes = mac.bytes
            guard let link = nl_addr_build(AF_UNSPEC, &macBytes, macBytes.count) else { return }
            defer { nl_addr_put(link) }
            rtnl_neigh_set_lladdr(neighbour, link)
            rtnl_neigh_set_state(neighbour, Int32(NUD_PERMANENT))
            status = rtnl_neigh_add(self.socket, neighbour, NLM_F_CREATE | NLM_F_REPLACE)
        } else {
            status = rtnl_neigh_delete(self.socket, neighbour, 0)
        }
        // Removing an entry that is already gone (the kernel aged it, an administrator flushed it) is fine.
        if status < 0, !(mac == nil && -status == NLE_OBJ_NOTFOUND) {
            self.logger.warning(
                "netlink: cannot \(mac == nil ? "remove" : "set") the neighbour entry for \(address) on interface \(interfaceIndex): \(String(cString: nl_geterror(status)))"
            )
        }
    }
}

/// Watches links and addresses through libnl's cache manager and calls `changed` after any change (a cable
/// pulled or plugged, a DHCP renumbering, a new VLAN interface), so the daemon needs no restart and no polling.
public final class LinkMonitor: @unchecked Sendable {
    // @unchecked: `manager` is used by the monitor thread only, after `init` and until `stop` joins it.
    private let manager: OpaquePointer
    private let stopped = NIOLockedFlag()
    private let started = NIOLockedFlag()
    private let finished = DispatchSemaphore(value: 0)
    private let changed: @Sendable () -> Void
    private let logger: Logger

    public init(logger: Logger, changed: @escaping @Sendable () -> Void) throws {
        self.logger = logger
        self.changed = changed
        var manager: OpaquePointer? = nil
        let status = nl_cache_mngr_alloc(nil, NETLINK_ROUTE, NL_AUTO_PROVIDE, &manager)
        guard status == 0, let manager else { throw NetlinkError(operation: "start the link monitor", code: status) }
        self.manager = manager
        let context = Unmanaged.passUnretained(self).toOpaque()
        for name in ["route/link", "route/addr"] {
            var cache: OpaquePointer? = nil
            let added = nl_cache_mngr_add(
                manager, name,
                { _, _, _, data in
                    guard let data else { return }
                    Unmanaged<LinkMonitor>.fromOpaque(data).takeUnretainedValue().changed()
                }, context, &cache)
            if added != 0 {
                nl_cache_mngr_free(manager)
                throw NetlinkError(operation: "watch \(name)", code: added)
            }
        }
    }

    public func start() throws(SystemCallError) {
        guard !self.started.value else { return }
        try startThread(name: "netlink") { [self] in
            while !self.stopped.value {
                let status = nl_cache_mngr_poll(self.manager, 250)
                if status < 0 {
                    self.logger.warning("netlink: monitor: \(String(cString: nl_geterror(status)))")
                    usleep(500_000)
                }
            }
            self.finished.signal()
        }
        self.started.value = true
    }

    public func stop() {
        guard !self.stopped.value else { return }
        self.stopped.value = true
        if self.started.value { self.finished.wait() }
        nl_cache_mngr_free(self.manager)
    }
}

public struct NetlinkError: Error, CustomStringConvertible {
    public var operation: String
    public var code: Int32
    public var description: String { "netlink: cannot \(self.operation): \(String(cString: nl_geterror(self.code)))" }
}
