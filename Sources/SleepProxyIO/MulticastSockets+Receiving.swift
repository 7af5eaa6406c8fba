import CSleepProxyLinux
import NIOCore
import SleepProxyWire
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The engine thread reads the multicast sockets itself, between batches (`Mailbox.take(timeout:watching:receive:)`).
///
/// Until 0.8.0 NIO read them on its event loops and posted each datagram to the engine's mailbox: every datagram of
/// a busy LAN's chatter woke two threads, an event loop and then the engine, and on a box whose cores are idle most
/// of the time waking a thread costs more than the engine's work on the datagram (docs/busy-lan.md). NIO keeps the
/// channels for the writes the engine leaves to it.
extension MulticastSockets {
    /// Reads what waits on each of `readable` that is ours (`receive(from:)`).
    func receive(_ readable: [CInt]) {
        let ours = self.receivingSockets
        for socket in readable where ours.contains(socket) { self.receive(from: socket) }
    }

    /// `receive(from:into:)` with a buffer of its own.
    @discardableResult
    func receive(from socket: CInt) -> Int {
        var buffer: [UInt8] = []
        return self.receive(from: socket, into: &buffer)
    }

    /// Reads up to `receiveBurst` datagrams from `socket` and hands each one that fits and says where it came in
    /// (packet info) to the sink, which posts it to its mailbox lane. Returns how many it read, dropped ones included.
    /// `buffer` is grown to the size it needs and kept by the caller for the next look: the engine thread reads
    /// every datagram through one (a 9 KB allocation per look was a twentieth of a busy LAN's cost).
    @discardableResult
    func receive(from socket: CInt, into buffer: inout [UInt8]) -> Int {
        // One byte more than a datagram may have: a larger one shows as longer than the limit, or truncated. Not
        // zeroed: only what the kernel wrote is ever read.
        if buffer.count < self.profile.maximumSize + 1 {
            buffer = [UInt8](unsafeUninitializedCapacity: self.profile.maximumSize + 1) { _, count in
                count = self.profile.maximumSize + 1
            }
        }
        for count in 0..<Self.receiveBurst {
            guard let event = self.receiveOne(from: socket, into: &buffer) else { return count }
            if let event { self.sink(event) }
        }
        return Self.receiveBurst
    }

    /// One datagram from `socket`: nil when none waits (or the socket reports an error, collected by the read),
    /// `.some(nil)` for one dropped (too large, or without packet info), else its event.
    private func receiveOne(from socket: CInt, into buffer: inout [UInt8]) -> EngineRunner.Event?? {
        var info = csp_datagram_info()
        var length = -1
        let size = self.profile.maximumSize + 1
        repeat {
            length = buffer.withUnsafeMutableBytes { csp_receive_datagram(socket, $0.baseAddress, size, &info) }
        } while length < 0 && errno == EINTR
        guard length >= 0 else { return nil }
        if info.has_dropped != 0 { self.noteKernelDrops(info.dropped, socket: socket) }
        guard info.truncated == 0, length <= self.profile.maximumSize, info.interface_index > 0,
            let source = Self.endpoint(info.source)
        else { return .some(nil) }
        return self.profile.event(
            Array(buffer[..<length]), source.address, source.port, Int(info.interface_index),
            Self.endpoint(info.destination)?.address)
    }

    /// The kernel's count for a socket only grows (it wraps at 2^32); what it grew by since we last saw it is added.
    private func noteKernelDrops(_ count: UInt32, socket: CInt) {
        let grown = self.kernelDrops.withLockedValue { drops in
            defer { drops[socket] = count }
            return Int(count &- (drops[socket] ?? 0))
        }
        self.kernelDropped.add(grown, ordering: .relaxed)
    }

    /// Before a socket's descriptors close (their numbers are then free for the next socket, whose count starts
    /// at 0).
    func forgetDrops(of channels: Channels) {
        self.kernelDrops.withLockedValue { drops in
            for socket in channels.receiving { drops[socket] = nil }
        }
    }

    /// The address and port of a sockaddr_in or sockaddr_in6; an IPv6 scope is dropped (the interface index
    /// travels beside it). Made here rather than through NIO's `SocketAddress`, which allocates.
    static func endpoint(_ storage: sockaddr_storage) -> (address: IPAddress, port: UInt16)? {
        let family = CInt(storage.ss_family)
        return withUnsafeBytes(of: storage) { bytes in
            switch family {
            case AF_INET:
                let address = bytes.load(as: sockaddr_in.self)
                return (
                    .v4(IPv4Address(rawValue: UInt32(bigEndian: address.sin_addr.s_addr))),
                    UInt16(bigEndian: address.sin_port)
                )
            case AF_INET6:
                let address = bytes.load(as: sockaddr_in6.self)
                let halves = withUnsafeBytes(of: address.sin6_addr) {
                    (
                        UInt64(bigEndian: $0.loadUnaligned(as: UInt64.self)),
                        UInt64(bigEndian: $0.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
                    )
                }
                return (.v6(IPv6Address(high: halves.0, low: halves.1)), UInt16(bigEndian: address.sin6_port))
            default:
                return nil
            }
        }
    }
}
