import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import SleepProxyCore
import SleepProxyTestSupport
import SleepProxyWire
import Testing

@testable import SleepProxyIO

#if canImport(Glibc)
    import Glibc
#endif

/// The sockets the daemon makes itself before NIO takes them (`MulticastSockets.boundSocket`), over loopback only.
@Suite("Multicast sockets", .lab())
struct MulticastSocketTests {
    static func port(of fd: CInt) -> UInt16 {
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return UInt16(bigEndian: address.sin_port)
    }

    /// A UDP socket on 127.0.0.1, port of the system's choosing, that waits at most 5 s for a datagram.
    struct Asker: ~Copyable {
        let fd: CInt
        let port: UInt16

        init() {
            self.fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            var local = Self.loopback(port: 0)
            let fd = self.fd
            _ = withUnsafeMutablePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            self.port = MulticastSocketTests.port(of: self.fd)
            var timeout = timeval(tv_sec: 5, tv_usec: 0)
            setsockopt(self.fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        }

        deinit { close(self.fd) }

        static func loopback(port: UInt16) -> sockaddr_in {
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = port.bigEndian
            address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
            return address
        }

        /// Sends `bytes` from `fd` to 127.0.0.1:`port`; the count sent.
        static func send(_ bytes: [UInt8], from fd: CInt, to port: UInt16) -> Int {
            var destination = Self.loopback(port: port)
            return bytes.withUnsafeBytes { raw in
                withUnsafePointer(to: &destination) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        sendto(fd, raw.baseAddress, raw.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                    }
                }
            }
        }

        /// The next datagram and the port it came from; nil after 5 s without one.
        func receive() -> (bytes: [UInt8], port: UInt16)? {
            var buffer = [UInt8](repeating: 0, count: 16)
            var from = sockaddr_in()
            var fromLength = socklen_t(MemoryLayout<sockaddr_in>.size)
            let count = buffer.withUnsafeMutableBytes { raw in
                withUnsafeMutablePointer(to: &from) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        recvfrom(self.fd, raw.baseAddress, raw.count, 0, $0, &fromLength)
                    }
                }
            }
            return count > 0 ? (Array(buffer.prefix(count)), UInt16(bigEndian: from.sin_port)) : nil
        }
    }

    @Test func sharesItsPortAndAnswersFromIt() throws {
        // Bound beside another socket on the same port, as beside avahi-daemon on 5353.
        let first = try MulticastSockets.boundSocket(family: .v4, port: 0)
        defer { close(first) }
        let port = Self.port(of: first)
        let second = try MulticastSockets.boundSocket(family: .v4, port: port)
        defer { close(second) }
        #expect(port != 0 && Self.port(of: second) == port)

        // What the engine sends through its own descriptor leaves from that port: a legacy asker takes only an
        // answer from 5353 (RFC 6762 §6.7).
        let asker = Asker()
        let own = fcntl(first, F_DUPFD_CLOEXEC, 0)
        defer { close(own) }
        let answer: [UInt8] = [1, 2, 3]
        #expect(Asker.send(answer, from: own, to: asker.port) == answer.count)
        let received = asker.receive()
        #expect(received?.bytes == answer && received?.port == port, "\(String(describing: received))")
    }

    @Test func anIPv6SocketKeepsIPv4Out() throws {
        let fd = try MulticastSockets.boundSocket(family: .v6, port: 0)
        defer { close(fd) }
        var only: CInt = 0
        var size = socklen_t(MemoryLayout<CInt>.size)
        #expect(getsockopt(fd, CInt(IPPROTO_IPV6), IPV6_V6ONLY, &only, &size) == 0 && only == 1)
        var reuse: CInt = 0
        #expect(getsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &reuse, &size) == 0 && reuse == 1)
    }

    /// Sockets for the test namespace's loopback (made multicast-capable, as NIO requires of a device it joins a
    /// group on), with what they hand the engine collected.
    ///
    /// They run on an event loop of their own, never on NIO's shared one: a thread inherits the network namespace
    /// of the thread that starts it, so the shared group, were it first touched here (inside the test's
    /// namespace), would run every other test's event loops in this namespace for the rest of the run, and a
    /// registration socket bound again from one of them would land here, on a port that is free (seen in CI as
    /// the registration listener's "port still held" tests failing; docs/linux.md §7).
    final class LoopbackSockets: Sendable {
        let events = NIOLockedValueBox<[EngineRunner.Event]>([])
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let sockets: MulticastSockets
        static let loopback = InterfaceContext(
            name: "lo", index: 1, macAddress: MACAddress("00:00:00:00:00:00")!, prefixes: [IPPrefix("127.0.0.1/8")!])

        init(serving interfaces: [InterfaceContext] = [LoopbackSockets.loopback]) {
            let events = self.events
            self.sockets = MulticastSockets(
                .mdns, group: self.group, logger: Logger(label: "test"),
                sink: { event in events.withLockedValue { $0.append(event) } })
            self.sockets.serve(interfaces)
        }

        /// A namespace of the test's own whose loopback is multicast-capable, as NIO requires of a device it joins
        /// a group on.
        static func namespace() throws -> NetworkNamespace {
            let namespace = try NetworkNamespace()
            do {
                try namespace.check(["ip", "link", "set", "lo", "multicast", "on"])
            } catch {
                namespace.close()
                throw error
            }
            return namespace
        }

        deinit {
            self.sockets.close()
            try? self.group.syncShutdownGracefully()
        }

        var listener: Channel? {
            self.sockets.channels.withLockedValue { $0[MulticastSockets.Key(interfaceIndex: 1, family: .v4)]?.listener }
        }

        /// Waits (at most 5 s) for an event `matching`.
        func wait(for matching: (EngineRunner.Event) -> Bool) -> Bool {
            waitUntil(timeout: 5, interval: 0.01) { self.events.withLockedValue { $0.contains(where: matching) } }
        }

        /// Sends `query` from `asker` to port 5353 and reads the sockets as the engine thread does (each without
        /// waiting) until they hand it over (at most 5 s).
        func receives(_ query: [UInt8], from asker: borrowing Asker) -> Bool {
            _ = Asker.send(query, from: asker.fd, to: MDNSRules.port)
            return waitUntil(timeout: 5, interval: 0.01) {
                self.sockets.receive(self.sockets.receivingSockets)
                return self.events.withLockedValue {
                    $0.contains { if case .mdns(let bytes, _, _, _, _) = $0 { bytes == query } else { false } }
                }
            }
        }
    }

    /// An answer the kernel refuses is dropped and counted, not handed to NIO (which would close the socket over
    /// it): the socket goes on answering directly and receiving. In a namespace of the test's own, on its loopback.
    @Test(.enabled(if: Command.canBuildNetworks, "needs root, unshare, nsenter and ip"))
    func anAnswerTheKernelRefusesIsDroppedAndTheSocketGoesOn() throws {
        let namespace = try LoopbackSockets.namespace()
        defer { namespace.close() }
        struct Seen: Sendable {
            var first: (bytes: [UInt8], port: UInt16)?
            var countsAfterFirst = (deferred: -1, failed: -1)
            var countsAfterRefused = (deferred: -1, failed: -1)
            var afterRefused: [UInt8]?
            var listenerActive = false
            var queryReceived = false
        }
        // Expectations are checked here, on the test's own task: inside() runs on a thread of its own.
        let seen = try namespace.inside { () -> Seen in
            var seen = Seen()
            let lab = LoopbackSockets()
            let asker = Asker()
            let toAsker = MDNSTransmission.Destination.unicast(
                address: IPAddress("127.0.0.1")!, port: asker.port, interfaceIndex: 1)
            lab.sockets.send([(toAsker, [1, 2, 3])])
            seen.first = asker.receive()
            seen.countsAfterFirst = (lab.sockets.deferredUnicastSends, lab.sockets.failedUnicastSends)

            // The limited broadcast address without SO_BROADCAST: refused at once (EACCES), as a route that is
            // missing or a firewall's rule would be.
            let refused = MDNSTransmission.Destination.unicast(
                address: IPAddress("255.255.255.255")!, port: 9, interfaceIndex: 1)
            lab.sockets.send([(refused, [4, 5, 6])])
            seen.countsAfterRefused = (lab.sockets.deferredUnicastSends, lab.sockets.failedUnicastSends)
            lab.sockets.send([(toAsker, [7, 8, 9])])
            seen.afterRefused = asker.receive()?.bytes
            // Had the refused datagram been handed to the listener's event loop, the loop has met it once a task
            // submitted now has run (its tasks run in order); the listener must still be up, and still hear.
            try lab.listener?.eventLoop.submit {}.wait()
            seen.listenerActive = lab.listener?.isActive ?? false
            seen.queryReceived = lab.receives([10, 11, 12], from: asker)
            return seen
        }
        #expect(seen.first?.bytes == [1, 2, 3] && seen.first?.port == MDNSRules.port, "\(seen)")
        #expect(seen.countsAfterFirst == (0, 0))
        #expect(seen.countsAfterRefused == (0, 1))
        #expect(seen.afterRefused == [7, 8, 9])
        #expect(seen.listenerActive)
        #expect(seen.queryReceived)
    }

    /// Answers to a full socket wait on the event loop instead, counted as deferred, and the socket goes on. The
    /// socket is filled the way the scale bench first filled it: datagrams to a neighbour that never answers ARP
    /// wait in the kernel, charged to the socket (here one with the smallest send buffer, on a veth whose other
    /// end has no address).
    @Test(.enabled(if: Command.canBuildNetworks, "needs root, unshare, nsenter and ip"))
    func answersToAFullSocketWaitOnTheEventLoop() throws {
        let namespace = try LoopbackSockets.namespace()
        defer { namespace.close() }
        for command in [
            ["ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1"], ["ip", "link", "set", "v0", "up"],
            ["ip", "link", "set", "v1", "up"], ["ip", "addr", "add", "192.0.2.1/24", "dev", "v0"],
        ] {
            try namespace.check(command)
        }
        struct Seen: Sendable {
            var counts = (deferred: -1, failed: -1)
            var listenerActive = false
            var queryReceived = false
        }
        let seen = try namespace.inside { () -> Seen in
            var seen = Seen()
            let veth = InterfaceContext(
                name: "v0", index: Int(if_nametoindex("v0")), macAddress: MACAddress("02:00:00:00:00:01")!,
                prefixes: [IPPrefix("192.0.2.1/24")!])
            let lab = LoopbackSockets(serving: [LoopbackSockets.loopback, veth])
            let key = MulticastSockets.Key(interfaceIndex: veth.index, family: .v4)
            guard let socket = lab.sockets.channels.withLockedValue({ $0[key]?.replySocket }) else { return seen }
            var smallest: CInt = 1
            setsockopt(socket, SOL_SOCKET, SO_SNDBUF, &smallest, socklen_t(MemoryLayout<CInt>.size))
            let nobody = MDNSTransmission.Destination.unicast(
                address: IPAddress("192.0.2.9")!, port: MDNSRules.port, interfaceIndex: veth.index)
            lab.sockets.send(Array(repeating: (nobody, [UInt8](repeating: 0, count: 200)), count: 64))
            seen.counts = (lab.sockets.deferredUnicastSends, lab.sockets.failedUnicastSends)
            // Every task the sends left on the listener's event loop has run once this one has (a loop runs its
            // tasks in order), a close they caused included.
            if let listener = lab.sockets.channels.withLockedValue({ $0[key]?.listener }) {
                try listener.eventLoop.submit {}.wait()
            }
            seen.listenerActive =
                lab.sockets.channels.withLockedValue { $0[key]?.listener.isActive } ?? false
            let asker = Asker()
            seen.queryReceived = lab.receives([1, 2, 3], from: asker)
            return seen
        }
        #expect(seen.counts.deferred > 0 && seen.counts.failed == 0, "\(seen.counts)")
        #expect(seen.listenerActive)
        #expect(seen.queryReceived)
    }

    /// A socket NIO closes under us (it does on most write errors, a multicast on an interface that lost its
    /// address say) is reported to the engine, and the next `serve` opens it again: the interface is not left
    /// deaf until its addresses change.
    @Test(.enabled(if: Command.canBuildNetworks, "needs root, unshare, nsenter and ip"))
    func aSocketClosedUnderUsIsReportedAndOpenedAgain() throws {
        let namespace = try LoopbackSockets.namespace()
        defer { namespace.close() }
        struct Seen: Sendable {
            var reported = false
            var reopened = -1
            var listenerActive = false
            var queryReceived = false
            var reportedWhenClosedByUs = true
        }
        let seen = try namespace.inside { () -> Seen in
            var seen = Seen()
            let lab = LoopbackSockets()
            let asker = Asker()
            try lab.listener?.close().wait()
            seen.reported = lab.wait { if case .multicastSocketClosed = $0 { true } else { false } }
            lab.sockets.serve([LoopbackSockets.loopback])
            seen.reopened = lab.sockets.reopened
            seen.listenerActive = lab.listener?.isActive ?? false
            seen.queryReceived = lab.receives([1, 2, 3], from: asker)
            // Closed by us (the interface no longer served): nothing to report.
            lab.events.withLockedValue { $0.removeAll() }
            let closing = lab.listener
            lab.sockets.serve([])
            // Its close is complete, and the closure watcher (registered first) has run, once this returns.
            try closing?.closeFuture.wait()
            seen.reportedWhenClosedByUs = lab.events.withLockedValue {
                $0.contains { if case .multicastSocketClosed = $0 { true } else { false } }
            }
            return seen
        }
        #expect(seen.reported)
        #expect(seen.reopened == 1)
        #expect(seen.listenerActive)
        #expect(seen.queryReceived)
        #expect(!seen.reportedWhenClosedByUs)
    }
}
