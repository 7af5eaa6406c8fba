import SleepProxyWire
import Testing

@testable import SleepProxyIO

#if canImport(Glibc)
    import Glibc
#endif

/// The sockets the daemon makes itself before NIO takes them (`MulticastSockets.boundSocket`), over loopback only.
@Suite("Multicast sockets")
struct MulticastSocketTests {
    static func port(of fd: CInt) -> UInt16 {
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        return UInt16(bigEndian: address.sin_port)
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
        let asker = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        defer { close(asker) }
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        local.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(asker, $0, length) }
        }
        _ = withUnsafeMutablePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(asker, $0, &length) }
        }
        let own = fcntl(first, F_DUPFD_CLOEXEC, 0)
        defer { close(own) }
        let answer: [UInt8] = [1, 2, 3]
        let sent = answer.withUnsafeBytes { bytes in
            withUnsafePointer(to: &local) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(own, bytes.baseAddress, bytes.count, 0, $0, length)
                }
            }
        }
        #expect(sent == answer.count)
        var timeout = timeval(tv_sec: 5, tv_usec: 0)
        setsockopt(asker, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var buffer = [UInt8](repeating: 0, count: 16)
        var from = sockaddr_in()
        var fromLength = socklen_t(MemoryLayout<sockaddr_in>.size)
        let received = buffer.withUnsafeMutableBytes { raw in
            withUnsafeMutablePointer(to: &from) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    recvfrom(asker, raw.baseAddress, raw.count, 0, $0, &fromLength)
                }
            }
        }
        #expect(received == answer.count && Array(buffer.prefix(3)) == answer)
        #expect(UInt16(bigEndian: from.sin_port) == port)
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
}
