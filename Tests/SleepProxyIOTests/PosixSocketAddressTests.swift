import SleepProxySystem
import SleepProxyWire
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The one socket helper: addresses filled in as the kernel reads them, and usable for a real exchange over
/// loopback.
@Suite("POSIX socket addresses")
struct PosixSocketAddressTests {
    @Test func addressesAreFilledInAsTheKernelReadsThem() throws {
        let v4 = PosixSocketAddress(.v4(IPv4Address(192, 0, 2, 1)), port: 5353)
        let sin = try #require(v4.v4)
        #expect(v4.length == socklen_t(MemoryLayout<sockaddr_in>.size) && v4.v6 == nil)
        #expect(sin.sin_family == sa_family_t(AF_INET) && sin.sin_port == UInt16(5353).bigEndian)
        #expect(sin.sin_addr.s_addr == IPv4Address(192, 0, 2, 1).rawValue.bigEndian)

        // A link-local or multicast IPv6 destination carries its interface as the zone; a global one does not.
        let linkLocal = try #require(PosixSocketAddress(IPAddress("fe80::1")!, port: 9, scope: 3).v6)
        let group = try #require(PosixSocketAddress(IPAddress("ff02::fb")!, port: 5353, scope: 3).v6)
        let global = try #require(PosixSocketAddress(IPAddress("2001:db8::1")!, port: 9, scope: 3).v6)
        #expect(linkLocal.sin6_scope_id == 3 && group.sin6_scope_id == 3 && global.sin6_scope_id == 0)
        #expect(global.sin6_family == sa_family_t(AF_INET6) && global.sin6_port == UInt16(9).bigEndian)
        let bytes = withUnsafeBytes(of: global.sin6_addr) { Array($0) }
        #expect(IPv6Address(bytes: bytes) == IPv6Address(high: 0x2001_0DB8_0000_0000, low: 1))
    }

    @Test func aDatagramBoundSentAndReceivedOverLoopback() throws {
        let fd = socket(AF_INET, PosixSocket.datagram | PosixSocket.closeOnExec, 0)
        try #require(fd >= 0)
        defer { close(fd) }
        let loopback = IPv4Address(127, 0, 0, 1)
        try #require(PosixSocketAddress(.v4(loopback), port: 0).bind(fd))
        var bound = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &bound) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        let port = UInt16(bigEndian: bound.sin_port)
        #expect(PosixSocketAddress(.v4(loopback), port: port).send([1, 2, 3], on: fd) == 3)
        var buffer = [UInt8](repeating: 0, count: 16)
        var timeout = timeval(tv_sec: 2, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let count = recv(fd, &buffer, buffer.count, 0)
        #expect(count == 3 && Array(buffer.prefix(3)) == [1, 2, 3])
    }
}
