import CSleepProxyLinux
import Dispatch
import FoundationEssentials
import Logging
import NIOConcurrencyHelpers
import SleepProxySystem
import SleepProxyWire

#if canImport(Glibc)
    import Glibc
#endif

/// Raw Ethernet on the served interfaces: one receive socket (AF_PACKET with the capture filter) read by a plain
/// thread per interface, and one send-only socket per interface (docs/linux.md §2: NIO's pipe channel merges writes
/// and dies on ENETDOWN; a thread and direct `send` do neither).
public final class PacketLinks: @unchecked Sendable {
    // @unchecked: `links` is guarded by `lock`; each link's socket is used by its reader thread and by `send`
    // (send on a packet socket is thread-safe in the kernel).
    /// Hands a frame to the engine; false when the engine's queue refused it. `routine`: nothing is urgent about
    /// it (`CaptureWatch.isRoutine`).
    public typealias Sink = @Sendable (_ frame: [UInt8], _ index: Int, _ outgoing: Bool, _ routine: Bool) -> Bool

    /// Bytes of captured frames waiting for the engine at most (our own bound): the mailbox counts events, and a
    /// burst of large frames (GRO can hand a packet socket 64 KiB at once) must not pin hundreds of MB on a small
    /// box. Past it, frames are dropped until the engine catches up; `droppedFrames` counts them.
    public static let maximumQueuedBytes = 8 << 20
    let budget = ByteBudget(limit: PacketLinks.maximumQueuedBytes)
    private let droppedLock = NIOLock()
    private var dropped = 0
    public var droppedFrames: Int { self.droppedLock.withLock { self.dropped } }

    /// The engine has handled a frame of `count` bytes.
    public func consumed(_ count: Int) { self.budget.give(count) }

    private final class Link: @unchecked Sendable {
        let index: Int
        let name: String
        let receiveFD: Int32
        let sendFD: Int32
        var datagramFD: Int32 = -1
        var joined: Set<MACAddress> = []
        /// Every multicast group joined at once (more IPv6 addresses than the filter holds).
        var allMulticast = false
        /// The capture filter attached now.
        var program: [CaptureFilter.Instruction] = []
        let stopped = NIOLockedFlag()
        let finished = DispatchSemaphore(value: 0)
        /// What the filter watches now, read by the reader thread for every frame.
        let watched = NIOLockedValueBox(CaptureWatch.unknown)

        init(index: Int, name: String, receiveFD: Int32, sendFD: Int32) {
            self.index = index
            self.name = name
            self.receiveFD = receiveFD
            self.sendFD = sendFD
        }
    }

    private let logger: Logger
    private let sink: Sink
    /// Called by a reader that waited `receiveTimeout` for a frame in vain.
    private let idle: @Sendable () -> Void
    private let lock = NIOLock()
    private var links: [Int: Link] = [:]
    /// How long a reader blocks before looking at its stop flag.
    static let receiveTimeout = timeval(tv_sec: 0, tv_usec: 200_000)

    public init(logger: Logger, sink: @escaping Sink, idle: @escaping @Sendable () -> Void = {}) {
        self.logger = logger
        self.sink = sink
        self.idle = idle
    }

    /// Opens links on `interfaces` (index, name) not yet open and closes the others.
    public func serve(_ interfaces: [(index: Int, name: String)]) {
        let wanted = Set(interfaces.map(\.index))
        let (toClose, existing): ([Link], Set<Int>) = self.lock.withLock {
            let gone = self.links.values.filter { !wanted.contains($0.index) }
            for link in gone { self.links[link.index] = nil }
            return (gone, Set(self.links.keys))
        }
        for link in toClose { self.close(link) }
        for (index, name) in interfaces where !existing.contains(index) {
            do {
                let link = try self.open(index: index, name: name)
                self.lock.withLock { self.links[index] = link }
            } catch {
                self.logger.error(
                    "packets: cannot capture on \(name): \(error). Address takeover and wake need CAP_NET_RAW (run as root or grant the capability)"
                )
            }
        }
    }

    private func open(index: Int, name: String) throws -> Link {
        // Protocol 0 first: nothing is queued before the filter is attached; then bind with ETH_P_ALL.
        let receiveFD = try retryingSyscall("socket(AF_PACKET)") {
            socket(AF_PACKET, PosixSocket.raw | PosixSocket.closeOnExec, 0)
        }
        let sendFD: Int32
        do {
            try Self.attach(CaptureFilter.program(addresses: []), to: receiveFD)
            var timeout = Self.receiveTimeout
            try retryingSyscall("setsockopt(SO_RCVTIMEO)") {
                setsockopt(receiveFD, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
            }
            var address = sockaddr_ll()
            address.sll_family = UInt16(AF_PACKET)
            address.sll_protocol = UInt16(ETH_P_ALL).bigEndian
            address.sll_ifindex = Int32(index)
            try retryingSyscall("bind(AF_PACKET)") {
                withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        bind(receiveFD, $0, socklen_t(MemoryLayout<sockaddr_ll>.size))
                    }
                }
            }
            sendFD = try retryingSyscall("socket(AF_PACKET)") {
                socket(AF_PACKET, PosixSocket.raw | PosixSocket.closeOnExec, 0)
            }
        } catch {
            Glibc.close(receiveFD)
            throw error
        }
        let link = Link(index: index, name: name, receiveFD: receiveFD, sendFD: sendFD)
        do {
            try startThread(name: "packets-\(name)") { [self] in
                self.read(link)
                link.finished.signal()
            }
        } catch {
            Glibc.close(receiveFD)
            Glibc.close(sendFD)
            throw error
        }
        self.logger.info("packets: capturing on \(name)")
        return link
    }

    private func read(_ link: Link) {
        var buffer = [UInt8](repeating: 0, count: 65536)
        var reportedDown = false
        while !link.stopped.value {
            var address = sockaddr_ll()
            var length = socklen_t(MemoryLayout<sockaddr_ll>.size)
            let count = buffer.withUnsafeMutableBytes { raw in
                withUnsafeMutablePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        recvfrom(link.receiveFD, raw.baseAddress, raw.count, 0, $0, &length)
                    }
                }
            }
            if count < 0 {
                let code = errno
                // docs/linux.md §2: ENETDOWN comes once when the link goes down; the socket works again after it
                // comes back up.
                if code == ENETDOWN, !reportedDown {
                    reportedDown = true
                    self.logger.notice("packets: \(link.name) is down; waiting for it to come back")
                }
                if code == EAGAIN || code == EWOULDBLOCK { self.idle() }
                if code != EAGAIN, code != EWOULDBLOCK, code != EINTR, code != ENETDOWN {
                    self.logger.warning(
                        "packets: receive on \(link.name): \(SystemCallError(function: "recvfrom", errno: code))")
                    usleep(100_000)
                }
                continue
            }
            reportedDown = false
            guard count > 0 else { continue }
            guard self.budget.take(count) else {
                self.droppedLock.withLock { self.dropped += 1 }
                continue
            }
            let routine = buffer.withUnsafeBytes { bytes in
                link.watched.withLockedValue { $0.isRoutine(UnsafeRawBufferPointer(rebasing: bytes[0..<count])) }
            }
            let outgoing = address.sll_pkttype == UInt8(PACKET_OUTGOING)
            if !self.sink(Array(buffer[0..<count]), link.index, outgoing, routine) {
                self.budget.give(count)
                self.droppedLock.withLock { self.dropped += 1 }
            }
        }
    }

    private static func attach(_ program: [CaptureFilter.Instruction], to fd: Int32) throws {
        var filters = program.map { sock_filter(code: $0.code, jt: $0.jt, jf: $0.jf, k: $0.k) }
        try filters.withUnsafeMutableBufferPointer { buffer in
            var fprog = sock_fprog(len: UInt16(buffer.count), filter: buffer.baseAddress)
            try retryingSyscall("setsockopt(SO_ATTACH_FILTER)") {
                setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &fprog, socklen_t(MemoryLayout<sock_fprog>.size))
            }
        }
    }

    /// Replaces the capture filter and the solicited-node multicast memberships (RFC 4861 §7.2.1: an NS for a
    /// proxied IPv6 address goes to its solicited-node group, which a real NIC filters out unless joined). A nil
    /// family is watched whole: its frames all pass the filter, and for IPv6 the link joins every multicast group
    /// at once (PACKET_MR_ALLMULTI) instead of one group per address, which the kernel keeps in a list it walks
    /// on each change. Nothing is done when nothing changed: with thousands of hosts the list stays "whole".
    ///
    /// `nameService`: a sleeping PC may be asked for by name (docs/windows.md), so the filter passes NetBIOS and
    /// LLMNR questions, and the link joins LLMNR's groups, which a real NIC filters out unless joined.
    public func watch(
        v4: [IPv4Address]?, v6: [IPv6Address]?, macs: [MACAddress] = [], nameService: Bool = false,
        interfaceIndex: Int
    ) {
        guard let link = self.lock.withLock({ self.links[interfaceIndex] }) else { return }
        // Before the filter: a frame the old filter passed about an address watched from now on is never taken
        // for routine.
        link.watched.withLockedValue {
            $0 = CaptureWatch(v4: v4.map { Set($0) }, v6: v6.map { Set($0) }, macs: Set(macs))
        }
        let program = CaptureFilter.program(v4: v4, v6: v6, macs: macs, nameService: nameService)
        if program != link.program {
            do {
                try Self.attach(program, to: link.receiveFD)
                link.program = program
            } catch {
                self.logger.error("packets: cannot update the capture filter on \(link.name): \(error)")
            }
        }
        self.lock.withLock {
            guard let v6 else {
                if !link.allMulticast {
                    Self.membership(PACKET_ADD_MEMBERSHIP, nil, link)
                    link.allMulticast = true
                }
                for mac in link.joined { Self.membership(PACKET_DROP_MEMBERSHIP, mac, link) }
                link.joined = []
                return
            }
            var groups = Set(v6.map(\.solicitedNodeMulticast.multicastMAC))
            if nameService { groups.formUnion(CaptureFilter.nameServiceGroups) }
            for mac in groups.subtracting(link.joined) { Self.membership(PACKET_ADD_MEMBERSHIP, mac, link) }
            for mac in link.joined.subtracting(groups) { Self.membership(PACKET_DROP_MEMBERSHIP, mac, link) }
            link.joined = groups
            if link.allMulticast {
                Self.membership(PACKET_DROP_MEMBERSHIP, nil, link)
                link.allMulticast = false
            }
        }
    }

    /// Joins or leaves one multicast group, or every group when `mac` is nil.
    private static func membership(_ option: Int32, _ mac: MACAddress?, _ link: Link) {
        var request = packet_mreq()
        request.mr_ifindex = Int32(link.index)
        request.mr_type = UInt16(mac == nil ? PACKET_MR_ALLMULTI : PACKET_MR_MULTICAST)
        if let mac {
            request.mr_alen = 6
            withUnsafeMutableBytes(of: &request.mr_address) { raw in
                for (i, byte) in mac.bytes.enumerated() { raw[i] = byte }
            }
        }
        _ = setsockopt(link.receiveFD, SOL_PACKET, option, &request, socklen_t(MemoryLayout<packet_mreq>.size))
    }

    /// Sends whole Ethernet frames out of the interface. Failures are logged, never fatal (a link that is down).
    public func send(_ frame: [UInt8], interfaceIndex: Int) {
        guard let link = self.lock.withLock({ self.links[interfaceIndex] }) else { return }
        var address = sockaddr_ll()
        address.sll_family = UInt16(AF_PACKET)
        address.sll_ifindex = Int32(interfaceIndex)
        address.sll_halen = 6
        let sent = frame.withUnsafeBytes { raw in
            withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(link.sendFD, raw.baseAddress, raw.count, 0, $0, socklen_t(MemoryLayout<sockaddr_ll>.size))
                }
            }
        }
        if sent != frame.count {
            self.logger.warning("packets: send on \(link.name): \(SystemCallError(function: "sendto", errno: errno))")
        }
    }

    /// A magic packet as a UDP broadcast to port 9, bound to the interface (docs/linux.md §2: without
    /// SO_BINDTODEVICE the limited broadcast follows the default route, if any).
    public func sendWakeDatagram(_ payload: [UInt8], interfaceIndex: Int) {
        guard let link = self.lock.withLock({ self.links[interfaceIndex] }) else { return }
        if link.datagramFD < 0 {
            let fd = socket(AF_INET, PosixSocket.datagram | PosixSocket.closeOnExec, 0)
            guard fd >= 0 else { return }
            var one: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_BROADCAST, &one, socklen_t(MemoryLayout<Int32>.size))
            _ = link.name.withCString {
                setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, $0, socklen_t(link.name.utf8.count + 1))
            }
            link.datagramFD = fd
        }
        let sent = PosixSocketAddress(.v4(.broadcast), port: MagicPacket.udpPort).send(payload, on: link.datagramFD)
        if sent != payload.count {
            self.logger.warning(
                "packets: UDP magic packet on \(link.name): \(SystemCallError(function: "sendto", errno: errno))")
        }
    }

    public func close() {
        let all = self.lock.withLock { () -> [Link] in
            defer { self.links.removeAll() }
            return Array(self.links.values)
        }
        for link in all { self.close(link) }
    }

    private func close(_ link: Link) {
        link.stopped.value = true
        link.finished.wait()
        Glibc.close(link.receiveFD)
        Glibc.close(link.sendFD)
        if link.datagramFD >= 0 { Glibc.close(link.datagramFD) }
    }
}

/// A Bool readable and settable from several threads.
final class NIOLockedFlag: @unchecked Sendable {
    private let lock = NIOLock()
    private var state = false
    var value: Bool {
        get { self.lock.withLock { self.state } }
        set { self.lock.withLock { self.state = newValue } }
    }
}
