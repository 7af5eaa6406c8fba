import CSleepProxyLinux
import SleepProxyWire

#if canImport(Glibc)
    import Glibc
#endif

/// The socket types and flags as plain numbers. Which module Swift attributes `SOCK_DGRAM` and its kin to depends on
/// which header a compile batch saw first (Glibc or one including <sys/socket.h>, docs/linux.md §4), so a file that
/// named them could stop compiling when files were added elsewhere; importing both here and exporting numbers ends
/// that.
public enum PosixSocket {
    public static let datagram = Int32(SOCK_DGRAM.rawValue)
    public static let stream = Int32(SOCK_STREAM.rawValue)
    public static let raw = Int32(SOCK_RAW.rawValue)
    public static let closeOnExec = Int32(SOCK_CLOEXEC.rawValue)
    public static let nonBlocking = Int32(SOCK_NONBLOCK.rawValue)
}

/// A socket address for the POSIX calls (bind, connect, sendto), built from our address type: the one place where
/// `sockaddr_in` and `sockaddr_in6` are filled in.
public struct PosixSocketAddress: Sendable {
    private var storage = sockaddr_storage()
    public private(set) var length: socklen_t

    /// `address`:`port`; an IPv6 link-local or multicast address carries `scope` (the interface index) as its
    /// zone, which the kernel needs to know the link.
    public init(_ address: IPAddress, port: UInt16, scope: Int = 0) {
        switch address {
        case .v4(let v4):
            var sin = sockaddr_in()
            sin.sin_family = sa_family_t(AF_INET)
            sin.sin_port = port.bigEndian
            sin.sin_addr.s_addr = v4.rawValue.bigEndian
            self.length = socklen_t(MemoryLayout<sockaddr_in>.size)
            withUnsafeMutableBytes(of: &self.storage) { target in
                withUnsafeBytes(of: sin) { target.copyMemory(from: $0) }
            }
        case .v6(let v6):
            var sin6 = sockaddr_in6()
            sin6.sin6_family = sa_family_t(AF_INET6)
            sin6.sin6_port = port.bigEndian
            withUnsafeMutableBytes(of: &sin6.sin6_addr) { raw in
                for (offset, byte) in v6.bytes.enumerated() { raw[offset] = byte }
            }
            if v6.isLinkLocal || v6.isMulticast { sin6.sin6_scope_id = UInt32(scope) }
            self.length = socklen_t(MemoryLayout<sockaddr_in6>.size)
            withUnsafeMutableBytes(of: &self.storage) { target in
                withUnsafeBytes(of: sin6) { target.copyMemory(from: $0) }
            }
        }
    }

    /// The IPv4 wildcard address (INADDR_ANY) at `port`.
    public static func anyV4(port: UInt16) -> PosixSocketAddress {
        PosixSocketAddress(.v4(IPv4Address(rawValue: 0)), port: port)
    }

    /// The address as `sockaddr_in`, when it is IPv4.
    public var v4: sockaddr_in? {
        guard self.storage.ss_family == sa_family_t(AF_INET) else { return nil }
        return withUnsafeBytes(of: self.storage) { $0.load(as: sockaddr_in.self) }
    }

    /// The address as `sockaddr_in6`, when it is IPv6.
    public var v6: sockaddr_in6? {
        guard self.storage.ss_family == sa_family_t(AF_INET6) else { return nil }
        return withUnsafeBytes(of: self.storage) { $0.load(as: sockaddr_in6.self) }
    }

    /// Calls `body` with the address as the `sockaddr` pointer and length the POSIX calls take.
    public func withSockaddr<Result>(_ body: (UnsafePointer<sockaddr>, socklen_t) throws -> Result) rethrows -> Result {
        try withUnsafeBytes(of: self.storage) { raw in
            try body(raw.baseAddress!.assumingMemoryBound(to: sockaddr.self), self.length)
        }
    }

    /// bind(2).
    public func bind(_ fd: Int32) -> Bool { self.withSockaddr { Glibc.bind(fd, $0, $1) } == 0 }

    /// connect(2).
    public func connect(_ fd: Int32) -> Bool { self.withSockaddr { Glibc.connect(fd, $0, $1) } == 0 }

    /// sendto(2): the bytes sent, or -1 with errno set.
    @discardableResult
    public func send(_ bytes: [UInt8], on fd: Int32) -> Int {
        bytes.withUnsafeBytes { raw in self.withSockaddr { sendto(fd, raw.baseAddress, raw.count, 0, $0, $1) } }
    }
}
