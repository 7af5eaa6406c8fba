import CSleepProxyLinux
import Foundation
import SleepProxySystem
import SleepProxyWire

#if canImport(Glibc)
    import Glibc
#endif

/// One frame seen by a capture.
public struct CapturedFrame: Sendable {
    public var bytes: [UInt8]
    public var at: Date
    /// `sll_pkttype`: 0 to this host, 1 broadcast, 2 multicast, 3 to another host, 4 sent by this host.
    public var packetType: UInt8
}

/// Records every frame on one interface of a lab host through an AF_PACKET socket opened inside its namespace.
/// Reading happens on a thread of its own; waits are bounded.
public final class FrameCapture: @unchecked Sendable {
    // @unchecked: `frames` and `stopped` are guarded by `lock`; `fd` is only closed after the reader ends.
    private let fd: Int32
    private let lock = NSLock()
    private var frames: [CapturedFrame] = []
    private var stopped = false
    private let finished = DispatchSemaphore(value: 0)
    /// Frames kept at most; a test that needs more is doing something else.
    public static let maximumFrames = 100_000

    public init(in namespace: NetworkNamespace, interface: String = "eth0") throws {
        self.fd = try namespace.inside { () throws -> Int32 in
            let fd = socket(
                AF_PACKET, PosixSocket.raw | PosixSocket.closeOnExec, Int32(UInt16(ETH_P_ALL).bigEndian))
            guard fd >= 0 else { throw CommandError("AF_PACKET socket: \(String(cString: strerror(errno)))") }
            // A large buffer: a capture that falls behind for a moment must not lose the very frames a test times.
            var size: Int32 = 8 << 20
            setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, socklen_t(MemoryLayout<Int32>.size))
            var address = sockaddr_ll()
            address.sll_family = UInt16(AF_PACKET)
            address.sll_protocol = UInt16(ETH_P_ALL).bigEndian
            address.sll_ifindex = Int32(if_nametoindex(interface))
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(fd, $0, socklen_t(MemoryLayout<sockaddr_ll>.size))
                }
            }
            guard bound == 0 else {
                Glibc.close(fd)
                throw CommandError("bind AF_PACKET to \(interface): \(String(cString: strerror(errno)))")
            }
            return fd
        }
        let thread = Thread { [self] in
            self.read()
            self.finished.signal()
        }
        thread.start()
    }

    deinit { self.stop() }

    private func read() {
        var buffer = [UInt8](repeating: 0, count: 65536)
        var descriptor = pollfd(fd: self.fd, events: Int16(POLLIN), revents: 0)
        while !self.lock.withLock({ self.stopped }) {
            guard poll(&descriptor, 1, 50) > 0 else { continue }
            var address = sockaddr_ll()
            var length = socklen_t(MemoryLayout<sockaddr_ll>.size)
            let count = withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    recvfrom(self.fd, &buffer, buffer.count, 0, $0, &length)
                }
            }
            guard count > 0 else { continue }  // ENETDOWN when the link goes down: keep reading
            let frame = CapturedFrame(bytes: Array(buffer[0..<count]), at: Date(), packetType: address.sll_pkttype)
            self.lock.withLock {
                if self.frames.count < FrameCapture.maximumFrames { self.frames.append(frame) }
            }
        }
    }

    /// Every frame captured so far.
    public var captured: [CapturedFrame] { self.lock.withLock { self.frames } }

    /// How many frames were captured so far.
    public var count: Int { self.lock.withLock { self.frames.count } }

    /// The frames captured after the first `index` (cheap to poll: copies only the new ones).
    public func captured(from index: Int) -> [CapturedFrame] {
        self.lock.withLock { index < self.frames.count ? Array(self.frames[index...]) : [] }
    }

    /// Waits until at least `count` captured frames satisfy `predicate`, or `timeout` passes; returns them.
    public func wait(for count: Int = 1, timeout: TimeInterval, where predicate: (CapturedFrame) -> Bool)
        -> [CapturedFrame]
    {
        let deadline = Date(timeIntervalSinceNow: timeout)
        while true {
            let matching = self.captured.filter(predicate)
            if matching.count >= count || Date() >= deadline { return matching }
            usleep(10_000)
        }
    }

    public func stop() {
        let wasRunning: Bool = self.lock.withLock {
            defer { self.stopped = true }
            return !self.stopped
        }
        if wasRunning {
            self.finished.wait()
            Glibc.close(self.fd)
        }
    }
}

extension NetworkNamespace {
    /// Sends one raw Ethernet frame out of `interface` (a send-only AF_PACKET socket, protocol 0).
    public func sendFrame(_ frame: [UInt8], interface: String = "eth0") throws {
        try self.inside { () throws -> Void in
            let fd = socket(AF_PACKET, PosixSocket.raw | PosixSocket.closeOnExec, 0)
            guard fd >= 0 else { throw CommandError("AF_PACKET socket: \(String(cString: strerror(errno)))") }
            defer { Glibc.close(fd) }
            var address = sockaddr_ll()
            address.sll_family = UInt16(AF_PACKET)
            address.sll_ifindex = Int32(if_nametoindex(interface))
            address.sll_halen = 6
            let sent = frame.withUnsafeBytes { raw in
                withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                        sendto(fd, raw.baseAddress, raw.count, 0, $0, socklen_t(MemoryLayout<sockaddr_ll>.size))
                    }
                }
            }
            guard sent == frame.count else { throw CommandError("send frame: \(String(cString: strerror(errno)))") }
        }
    }
}
