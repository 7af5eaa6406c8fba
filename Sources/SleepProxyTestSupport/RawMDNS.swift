import CSleepProxyLinux
import Foundation
import SleepProxySystem
import SleepProxyWire

#if canImport(Glibc)
    import Glibc
#endif

/// A raw mDNS querier built on our own codec, for what ordinary clients do not send: the QU bit, legacy unicast
/// from a random port, known answers, multi-packet (TC) queries, Owner options.
public enum RawMDNS {
    public struct Response: Sendable {
        public var source: IPAddress
        public var sourcePort: UInt16
        public var message: DNSMessage
        /// The IP TTL / hop limit the response arrived with (RFC 6762 §11 wants 255).
        public var hopLimit: Int?
    }

    /// Sends `packets` (in order, `gap` apart) from `sourcePort` (0: an ephemeral port; 5353: the mDNS port,
    /// joining the group so multicast answers are heard too) to `destination`:`port`, then collects every response
    /// for `listen`. Runs inside `host`'s namespace. `ready` is called once the socket is bound and in the group,
    /// so a test can start what it wants heard without guessing how long that takes.
    public static func exchange(
        in host: LabHost, packets: [DNSMessage], to destination: IPAddress, port: UInt16 = 5353, sourcePort: UInt16 = 0,
        gap: Duration = .milliseconds(20), listen: Duration = .seconds(2), ready: (@Sendable () -> Void)? = nil
    ) throws -> [Response] {
        let interface = host.interface
        let payloads = packets.map { $0.encoded() }
        return try host.namespace.inside { () throws -> [Response] in
            let v6: Bool
            if case .v6 = destination { v6 = true } else { v6 = false }
            let fd = socket(v6 ? AF_INET6 : AF_INET, PosixSocket.datagram | PosixSocket.closeOnExec, 0)
            guard fd >= 0 else { throw CommandError("socket: \(String(cString: strerror(errno)))") }
            defer { Glibc.close(fd) }
            var one: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, 4)
            setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, 4)
            let index = if_nametoindex(interface)
            var ttl: Int32 = 255
            if v6 {
                setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_V6ONLY, &one, 4)
                setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_RECVHOPLIMIT, &one, 4)
                setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_MULTICAST_HOPS, &ttl, 4)
                setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_UNICAST_HOPS, &ttl, 4)
                var ifindex = Int32(index)
                setsockopt(fd, Int32(IPPROTO_IPV6), IPV6_MULTICAST_IF, &ifindex, 4)
                try bindOrThrow(fd, PosixSocketAddress(.v6(.any), port: sourcePort))
                if sourcePort == 5353 {
                    var request = ipv6_mreq()
                    request.ipv6mr_multiaddr = in6(IPv6Address.mdnsGroup)
                    request.ipv6mr_interface = index
                    setsockopt(
                        fd, Int32(IPPROTO_IPV6), IPV6_ADD_MEMBERSHIP, &request, socklen_t(MemoryLayout<ipv6_mreq>.size))
                }
            } else {
                setsockopt(fd, Int32(IPPROTO_IP), IP_RECVTTL, &one, 4)
                setsockopt(fd, Int32(IPPROTO_IP), IP_MULTICAST_TTL, &ttl, 4)
                setsockopt(fd, Int32(IPPROTO_IP), IP_TTL, &ttl, 4)
                var request = ip_mreqn()
                request.imr_ifindex = Int32(index)
                setsockopt(fd, Int32(IPPROTO_IP), IP_MULTICAST_IF, &request, socklen_t(MemoryLayout<ip_mreqn>.size))
                try bindOrThrow(fd, PosixSocketAddress.anyV4(port: sourcePort))
                if sourcePort == 5353 {
                    request.imr_multiaddr.s_addr = IPv4Address.mdnsGroup.rawValue.bigEndian
                    setsockopt(
                        fd, Int32(IPPROTO_IP), IP_ADD_MEMBERSHIP, &request, socklen_t(MemoryLayout<ip_mreqn>.size))
                }
            }
            ready?()
            for (number, payload) in payloads.enumerated() {
                if number > 0 { usleep(UInt32(gap.nanosecondsValue / 1000)) }
                let sent = PosixSocketAddress(destination, port: port, scope: Int(index)).send(payload, on: fd)
                guard sent == payload.count else { throw CommandError("sendto: \(String(cString: strerror(errno)))") }
            }
            return receive(fd, v6: v6, until: Date(timeIntervalSinceNow: Double(listen.nanosecondsValue) / 1e9))
        }
    }

    private static func receive(_ fd: Int32, v6: Bool, until deadline: Date) -> [Response] {
        var responses: [Response] = []
        var buffer = [UInt8](repeating: 0, count: 9000)
        var control = [UInt8](repeating: 0, count: 256)
        var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        while Date() < deadline {
            let wait = Int32(max(1, deadline.timeIntervalSinceNow * 1000))
            guard poll(&descriptor, 1, wait) > 0 else { continue }
            var storage = sockaddr_storage()
            var hopLimit: Int? = nil
            let count = buffer.withUnsafeMutableBytes { data -> Int in
                control.withUnsafeMutableBytes { controlBytes -> Int in
                    withUnsafeMutablePointer(to: &storage) { addressPointer -> Int in
                        var vector = iovec(iov_base: data.baseAddress, iov_len: data.count)
                        return withUnsafeMutablePointer(to: &vector) { vectorPointer -> Int in
                            var header = msghdr()
                            header.msg_name = UnsafeMutableRawPointer(addressPointer)
                            header.msg_namelen = socklen_t(MemoryLayout<sockaddr_storage>.size)
                            header.msg_iov = vectorPointer
                            header.msg_iovlen = 1
                            header.msg_control = controlBytes.baseAddress
                            header.msg_controllen = controlBytes.count
                            let received = recvmsg(fd, &header, 0)
                            // The received TTL / hop limit, from the control message.
                            var offset = 0
                            while received > 0, offset + 16 <= header.msg_controllen {
                                let base = controlBytes.baseAddress! + offset
                                let length = base.loadUnaligned(as: Int.self)
                                let level = base.loadUnaligned(fromByteOffset: 8, as: Int32.self)
                                let type = base.loadUnaligned(fromByteOffset: 12, as: Int32.self)
                                if (level == IPPROTO_IP && type == IP_TTL)
                                    || (level == Int32(IPPROTO_IPV6) && type == IPV6_HOPLIMIT)
                                {
                                    hopLimit = Int(base.loadUnaligned(fromByteOffset: 16, as: Int32.self))
                                }
                                guard length > 0 else { break }
                                offset += (length + 7) & ~7
                            }
                            return received
                        }
                    }
                }
            }
            guard count > 0, let message = try? DNSMessage(decoding: Array(buffer[0..<count])) else { continue }
            let (source, port) = Self.address(storage)
            if let source {
                responses.append(Response(source: source, sourcePort: port, message: message, hopLimit: hopLimit))
            }
        }
        return responses
    }

    private static func address(_ storage: sockaddr_storage) -> (IPAddress?, UInt16) {
        var storage = storage
        return withUnsafePointer(to: &storage) { pointer in
            if pointer.pointee.ss_family == sa_family_t(AF_INET) {
                return pointer.withMemoryRebound(to: sockaddr_in.self, capacity: 1) {
                    (
                        .v4(IPv4Address(rawValue: UInt32(bigEndian: $0.pointee.sin_addr.s_addr))),
                        UInt16(bigEndian: $0.pointee.sin_port)
                    )
                }
            }
            return pointer.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) {
                var bytes = $0.pointee.sin6_addr
                let address = withUnsafeBytes(of: &bytes) { IPv6Address(bytes: Array($0)) }
                return (address.map { .v6($0) }, UInt16(bigEndian: $0.pointee.sin6_port))
            }
        }
    }

    /// The kernel's form of an IPv6 address.
    public static func in6(_ address: IPv6Address) -> in6_addr {
        var result = in6_addr()
        withUnsafeMutableBytes(of: &result) { raw in
            for (index, byte) in address.bytes.enumerated() { raw[index] = byte }
        }
        return result
    }

    private static func bindOrThrow(_ fd: Int32, _ address: PosixSocketAddress) throws {
        guard address.bind(fd) else { throw CommandError("bind: \(String(cString: strerror(errno)))") }
    }
}

extension Duration {
    var nanosecondsValue: Int64 {
        self.components.seconds * 1_000_000_000 + self.components.attoseconds / 1_000_000_000
    }
}
