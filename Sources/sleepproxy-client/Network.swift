import Foundation
import SleepProxyCore
import SleepProxySystem
import SleepProxyWire

#if canImport(Glibc)
    import Glibc
#endif

struct Link {
    var name: String
    var index: Int
    var mac: MACAddress
    var ipv4: [IPv4Address]
    var ipv6: [IPv6Address]
    var hostName: DNSName

    static func find(_ name: String?, hostName override: String? = nil) throws -> Link {
        let inventory = try InterfaceInventory.read()
        let candidates =
            name.map { wanted in inventory.interfaces.filter { $0.context.name == wanted }.map(\.context) }
            ?? inventory.defaultServed
        guard
            let interface = candidates.first(where: {
                $0.prefixes.contains { if case .v4 = $0.address { return true } else { return false } }
            }) ?? candidates.first
        else {
            throw ClientError(
                description: name.map { "no interface named \($0) (see `ip link`)" }
                    ?? "no up, multicast-capable interface with an address")
        }
        var ipv4: [IPv4Address] = []
        var ipv6: [IPv6Address] = []
        for prefix in interface.prefixes {
            switch prefix.address {
            case .v4(let a): ipv4.append(a)
            case .v6(let a): ipv6.append(a)
            }
        }
        var buffer = [UInt8](repeating: 0, count: 256)
        _ = buffer.withUnsafeMutableBufferPointer {
            gethostname(UnsafeMutableRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), 255)
        }
        let short =
            String(decoding: buffer.prefix { $0 != 0 }, as: UTF8.self).split(separator: ".").first.map(String.init)
            ?? ""
        let hostName = try DNSName(labels: [override ?? (short.isEmpty ? "linux" : short), "local"])
        return Link(
            name: interface.name, index: interface.index, mac: interface.macAddress, ipv4: ipv4,
            ipv6: ipv6, hostName: hostName)
    }

    var addresses: [IPAddress] { self.ipv4.map(IPAddress.v4) + self.ipv6.map(IPAddress.v6) }
}

struct Proxy {
    var label: String
    var address: IPv4Address
    var port: UInt16
}

enum Browser {
    static let serviceType: DNSName = "_sleep-proxy._udp.local."

    /// Asks for `_sleep-proxy._udp` by legacy unicast (RFC 6762 §6.7: every responder answers straight back to
    /// our port, with the SRV and address records as additionals), then ranks what answered the way Apple's
    /// clients do: by the advertised metric, lowest first (docs/protocol.md §1.3).
    static func proxies(on link: Link, seconds: Double, prefer: String?) throws -> [Proxy] {
        guard let source = link.ipv4.first else {
            throw ClientError(description: "\(link.name) has no IPv4 address to browse from")
        }
        let query = DNSMessage(
            id: UInt16.random(in: 1 ... .max), questions: [DNSQuestion(name: Self.serviceType, type: .ptr)])
        let replies = try UDP.ask(
            query.encoded(), from: source, to: IPv4Address.mdnsGroup, port: 5353, seconds: seconds, link: link)
        var instances: [DNSName] = []
        var services: [DNSName: SRVRecord] = [:]
        var addresses: [DNSName: IPv4Address] = [:]
        for reply in replies {
            guard let message = try? DNSMessage(decoding: reply), message.flags.isResponse else { continue }
            for record in message.answers + message.additionals {
                switch record.rdata {
                case .ptr(let ptr) where record.name == Self.serviceType && ptr.target.parent == Self.serviceType:
                    if !instances.contains(ptr.target) { instances.append(ptr.target) }
                case .srv(let srv): services[record.name] = srv
                case .a(let a): addresses[record.name] = a.address
                default: break
                }
            }
        }
        var proxies: [Proxy] = []
        for instance in instances {
            guard let label = instance.labelStrings.first, let srv = services[instance],
                let address = addresses[srv.target]
            else { continue }
            proxies.append(Proxy(label: label, address: address, port: srv.port))
        }
        let ranked = SleepProxyName.rank(proxies.map(\.label))
        proxies.sort {
            (ranked.firstIndex(of: $0.label) ?? .max, $0.address.isLinkLocal ? 1 : 0) < (
                ranked.firstIndex(of: $1.label) ?? .max, $1.address.isLinkLocal ? 1 : 0
            )
        }
        if let prefer, let index = proxies.firstIndex(where: { $0.label.localizedCaseInsensitiveContains(prefer) }) {
            proxies.insert(proxies.remove(at: index), at: 0)
        }
        return proxies
    }
}

enum UDP {
    /// A UDP socket bound to `source` (and to the interface), with a receive timeout.
    static func socket(bound source: IPv4Address, link: Link?, port: UInt16 = 0, reuse: Bool = false) throws -> Int32 {
        let fd = Glibc.socket(AF_INET, PosixSocket.datagram | PosixSocket.closeOnExec, 0)
        guard fd >= 0 else {
            throw ClientError(description: "cannot open a UDP socket: \(String(cString: strerror(errno)))")
        }
        var one: Int32 = 1
        if reuse {
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
            setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, socklen_t(MemoryLayout<Int32>.size))
        }
        if let link {
            var interface = in_addr(s_addr: source.rawValue.bigEndian)
            setsockopt(fd, Int32(IPPROTO_IP), IP_MULTICAST_IF, &interface, socklen_t(MemoryLayout<in_addr>.size))
            var ttl: UInt8 = 255
            setsockopt(fd, Int32(IPPROTO_IP), IP_MULTICAST_TTL, &ttl, 1)
            _ = link.name.withCString {
                setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, $0, socklen_t(link.name.utf8.count + 1))
            }
        }
        let address = port == 0 ? PosixSocketAddress(.v4(source), port: 0) : PosixSocketAddress.anyV4(port: port)
        guard address.bind(fd) else {
            close(fd)
            throw ClientError(description: "cannot bind to \(source): \(String(cString: strerror(errno)))")
        }
        return fd
    }

    static func send(_ fd: Int32, _ bytes: [UInt8], to address: IPv4Address, port: UInt16) {
        PosixSocketAddress(.v4(address), port: port).send(bytes, on: fd)
    }

    /// Joins the mDNS group on the link's IPv4 address (so this socket hears multicast answers).
    static func joinMDNSGroup(_ fd: Int32, source: IPv4Address) throws {
        var request = ip_mreq(
            imr_multiaddr: in_addr(s_addr: IPv4Address.mdnsGroup.rawValue.bigEndian),
            imr_interface: in_addr(s_addr: source.rawValue.bigEndian))
        guard setsockopt(fd, Int32(IPPROTO_IP), IP_ADD_MEMBERSHIP, &request, socklen_t(MemoryLayout<ip_mreq>.size)) == 0
        else {
            throw ClientError(
                description: "cannot join the mDNS group on \(source): \(String(cString: strerror(errno)))")
        }
    }

    /// One datagram with its IPv4 source, or nil at the deadline.
    static func receiveFrom(_ fd: Int32, until deadline: Date) -> (bytes: [UInt8], source: IPv4Address)? {
        let remaining = deadline.timeIntervalSinceNow
        guard remaining > 0 else { return nil }
        var timeout = timeval(tv_sec: Int(remaining), tv_usec: Int((remaining - floor(remaining)) * 1_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var buffer = [UInt8](repeating: 0, count: 9216)
        var from = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let count = withUnsafeMutablePointer(to: &from) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                recvfrom(fd, &buffer, buffer.count, 0, $0, &length)
            }
        }
        guard count > 0 else { return nil }
        return (Array(buffer[0..<count]), IPv4Address(rawValue: UInt32(bigEndian: from.sin_addr.s_addr)))
    }

    static func receive(_ fd: Int32, until deadline: Date) -> [UInt8]? {
        let remaining = deadline.timeIntervalSinceNow
        guard remaining > 0 else { return nil }
        var timeout = timeval(tv_sec: Int(remaining), tv_usec: Int((remaining - floor(remaining)) * 1_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var buffer = [UInt8](repeating: 0, count: 9216)
        let count = recv(fd, &buffer, buffer.count, 0)
        return count > 0 ? Array(buffer[0..<count]) : nil
    }

    /// Sends a query and collects every reply for `seconds`, asking again 1, 3, 7 … s after the first (RFC 6762
    /// §5.2's doubling intervals): one lost multicast packet, common on Wi-Fi, must not hide every proxy.
    static func ask(
        _ query: [UInt8], from source: IPv4Address, to destination: IPv4Address, port: UInt16, seconds: Double,
        link: Link
    ) throws -> [[UInt8]] {
        let fd = try self.socket(bound: source, link: link)
        defer { close(fd) }
        let start = Date()
        let deadline = start.addingTimeInterval(seconds)
        var nextQuery = start
        var interval = 1.0
        var replies: [[UInt8]] = []
        while Date() < deadline, replies.count < Self.maximumReplies {
            if Date() >= nextQuery {
                self.send(fd, query, to: destination, port: port)
                nextQuery = nextQuery.addingTimeInterval(interval)
                interval *= 2
            }
            if let reply = self.receive(fd, until: min(deadline, nextQuery)) { replies.append(reply) }
        }
        return replies
    }

    /// Replies kept from one browse: a bound against a flood from the LAN; far more proxies than any network has.
    static let maximumReplies = 256

    /// Sends each part of a registration and waits for its reply (docs/protocol.md §2.5: a short timeout, a second
    /// try); returns the lease granted, or throws on silence or an error RCODE.
    static func exchange(_ parts: [[UInt8]], from source: IPv4Address, to proxy: IPv4Address, port: UInt16) throws
        -> UInt32
    {
        let fd = try self.socket(bound: source, link: nil)
        defer { close(fd) }
        var granted: UInt32 = 0
        for part in parts {
            let id = UInt16(part[0]) << 8 | UInt16(part[1])
            var answered = false
            for _ in 0..<2 where !answered {
                self.send(fd, part, to: proxy, port: port)
                let deadline = Date(timeIntervalSinceNow: 1.5)
                while !answered, let reply = self.receive(fd, until: deadline) {
                    guard let message = try? DNSMessage(decoding: reply), message.id == id, message.flags.isResponse
                    else { continue }
                    guard message.flags.responseCode == .noError else {
                        throw ClientError(description: "answered \(message.flags.responseCode)")
                    }
                    granted = message.ednsOptions?.updateLease?.lease ?? granted
                    answered = true
                }
            }
            guard answered else { throw ClientError(description: "no reply") }
        }
        return granted
    }

    /// Multicasts an mDNS packet from port 5353 (beside avahi-daemon: SO_REUSEPORT), `count` times.
    static func multicast(_ bytes: [UInt8], link: Link, count: Int, interval: Double) throws {
        guard let source = link.ipv4.first else { throw ClientError(description: "\(link.name) has no IPv4 address") }
        let fd = try self.socket(bound: source, link: link, port: 5353, reuse: true)
        defer { close(fd) }
        for attempt in 0..<count {
            if attempt > 0 { usleep(UInt32(interval * 1_000_000)) }
            self.send(fd, bytes, to: .mdnsGroup, port: 5353)
        }
    }
}
