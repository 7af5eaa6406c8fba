import CSleepProxyLinux
import Foundation
import SleepProxyCore
import SleepProxyIO
import SleepProxySystem
import SleepProxyTestSupport
import SleepProxyWire

#if canImport(Glibc)
    import Glibc
#endif

/// Figures for the registration side: in-process throughput, memory per host, restore time, and the round trip
/// over real sockets with the durable write, in a lab of network namespaces (needs root).
enum RegistrationBenchmarks {
    static let proxyInterface = InterfaceContext(
        name: "eth0", index: 2, macAddress: MACAddress("02:53:50:00:00:01")!,
        prefixes: [IPPrefix("192.0.2.1/24")!, IPPrefix("2001:db8::1/64")!]
    )

    /// A host with 25 records: 2 addresses (reverse PTR + AAAA each = 4), 5 services (TXT, _services PTR,
    /// service PTR, SRV each = 20) and a device-info TXT. Addresses are unique per host (2001:db8::/64 and
    /// link-local), as the registrar refuses a claim another host holds.
    static func registration(host n: Int, id: UInt16 = 1, sequence: UInt8 = 0) -> (bytes: [UInt8], source: IPAddress) {
        let v4 = IPAddress.v6(IPv6Address(high: 0x2001_0DB8_0000_0000, low: 0x1_0000 + UInt64(n)))
        let v4b = IPAddress.v6(IPv6Address(high: 0xFE80_0000_0000_0000, low: 0x1_0000 + UInt64(n)))
        let services = ["_http._tcp", "_ssh._tcp", "_smb._tcp", "_afpovertcp._tcp", "_sftp-ssh._tcp"].enumerated().map {
            ("Host \(n).\($0.element)", UInt16(8000 + $0.offset))
        }
        let message = SampleRegistration.message(
            id: id, mac: MACAddress(rawValue: 0x0253_5000_0000 + UInt64(n)), sequence: sequence,
            host: try! DNSName(parsing: "host\(n).local."),
            addresses: [v4, v4b], services: services,
            extra: [
                DNSResourceRecord(
                    name: try! DNSName(parsing: "host\(n)._device-info._tcp.local."), ttl: 4500,
                    rdata: .txt(try! TXTRecord(["model=Macmini9,1", "osxvers=21"])))
            ]
        )
        return (message.encoded(options: .appleUpdate), v4)
    }

    static func unlimited() -> RegistrationConfiguration {
        RegistrationConfiguration(
            maximumRecords: 1_000_000, maximumHosts: 100_000, requireSourceAmongClaimedAddresses: false,
            rateLimitBurst: 1 << 30, rateLimitPerSecond: 1 << 30)
    }

    static func run() throws {
        print("Registration")
        // Three workloads: a new sleep epoch each time (the whole record set replaced: the slow path), an exact
        // retransmission (Apple sends every registration up to three times), and Apple's mix of the two, one new
        // registration then two retransmissions.
        let epochs = (0..<2).map { sequence in (0..<1000).map { self.registration(host: $0, sequence: UInt8(sequence)) }
        }
        var registrar = Registrar(configuration: self.unlimited())
        var now = Timestamp.seconds(1)
        var index = 0
        func handle(_ bytes: [UInt8], _ source: IPAddress) -> Int {
            now = now + .microseconds(10)
            guard
                case .accepted(let acceptance) = registrar.handle(
                    datagram: bytes, from: source, on: self.proxyInterface, now: now)
            else { fatalError("refused") }
            return acceptance.reply.count
        }
        _ = measure("process registration, new sleep epoch (25 records)", iterations: 20_000) {
            let (bytes, source) = epochs[(index / 1000) % 2][index % 1000]
            index += 1
            return handle(bytes, source)
        }
        _ = measure("process registration, retransmission", iterations: 20_000) {
            let (bytes, source) = epochs[0][index % 1000]
            index += 1
            return handle(bytes, source)
        }
        index = 0
        _ = measure("process registration, Apple's mix (1 new + 2 repeats)", iterations: 30_000) {
            // Host h gets a new epoch, then the same bytes twice.
            let host = (index / 3) % 1000
            let sequence = (index / 3000) % 2
            index += 1
            let (bytes, source) = epochs[sequence][host]
            return handle(bytes, source)
        }

        // The registration the issue and the vectors are about: the shape of Apple's (8 records: one service,
        // one IPv4 and one IPv6 address), from 1000 hosts, in Apple's mix of one new epoch and two retransmissions.
        let appleShaped = (0..<2).map { sequence in
            (0..<1000).map { n -> ([UInt8], IPAddress) in
                let v6 = IPAddress.v6(IPv6Address(high: 0xFE80_0000_0000_0000, low: 0x2_0000 + UInt64(n)))
                let g6 = IPAddress.v6(IPv6Address(high: 0x2001_0DB8_0000_0000, low: 0x2_0000 + UInt64(n)))
                let message = SampleRegistration.message(
                    id: 1, mac: MACAddress(rawValue: 0x0253_5100_0000 + UInt64(n)), sequence: UInt8(sequence),
                    host: try! DNSName(parsing: "vm\(n).local."), addresses: [g6, v6])
                precondition(message.updates.count == 8)
                return (message.encoded(options: .appleUpdate), g6)
            }
        }
        index = 0
        _ = measure("process Apple-shaped registration (8 records), mix", iterations: 60_000, target: 50_000) {
            let (bytes, source) = appleShaped[(index / 3000) % 2][(index / 3) % 1000]
            index += 1
            return handle(bytes, source)
        }

        // Memory per host: heap growth while 10,000 hosts of 25 records each are held.
        let count = 10_000
        let registrations = (0..<count).map { self.registration(host: $0) }
        let before = csp_heap_bytes_in_use()
        var big = Registrar(configuration: self.unlimited())
        // Registered "now" on the boot clock: the restore below reads the journal with the real clock, and a
        // fixed early time would have expired once the machine had been up for more than the lease.
        let base = SystemClock.now()
        for (n, (bytes, source)) in registrations.enumerated() {
            _ = big.handle(datagram: bytes, from: source, on: self.proxyInterface, now: base + .microseconds(Int64(n)))
        }
        let after = csp_heap_bytes_in_use()
        let perHost = Double(after - before) / Double(count)
        print(
            "  memory per registered host (25 records, \(count) hosts held)      \(format(perHost)) bytes  target ≤ 8,192: \(perHost <= 8192 ? "met" : "NOT MET")"
        )
        precondition(big.store.recordCount == count * 25)

        // Restoring 10,000 hosts from the journal at start.
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sleepproxy-bench-\(getpid())")
        try? FileManager.default.removeItem(at: directory)
        let timeBase = SystemClock.timeBase()
        do {
            let (journal, _) = try JournalFile.open(directory: directory, timeBase: timeBase)
            try journal.append(big.store.owners.values.map { .put($0) }, timeBase: timeBase)
        }
        let clock = ContinuousClock()
        var restoreTimes: [Duration] = []
        var journalBytes = 0
        for _ in 0..<5 {
            let start = clock.now
            let (journal, replay) = try JournalFile.open(directory: directory, timeBase: SystemClock.timeBase())
            var restored = Registrar(configuration: self.unlimited())
            for registration in replay.registrations { restored.restore(registration) }
            restoreTimes.append(clock.now - start)
            journalBytes = journal.size
            precondition(restored.store.hostCount == count, "restored \(restored.store.hostCount)")
        }
        try? FileManager.default.removeItem(at: directory)
        let restore = restoreTimes.sorted()[restoreTimes.count / 2]
        print(
            "  restore \(count) hosts from the journal (\(journalBytes / 1024) KiB), median of 5   \(restore.formattedMilliseconds)  target ≤ 1,000 ms: \(restore <= .seconds(1) ? "met" : "NOT MET")"
        )
    }

    // MARK: - Over real sockets

    /// `flood`: a third lab host sends ARP requests as fast as one core can while the hosts register, to show
    /// that a flood of frames does not crowd registrations out of the engine (its mailbox lanes).
    static func runLab(daemon: URL, flood: Bool = false) throws {
        guard labCanRun("Registration round trip", daemon: daemon) else { return }
        print(
            "Registration round trip over UDP in a lab, durable write included\(flood ? ", under an ARP flood" : "") (daemon: \(daemon.path))"
        )
        let lab = try LabNetwork()
        defer { lab.close() }
        let proxy = try lab.addHost("proxy", mac: MACAddress("02:53:50:00:00:01")!, ipv4: ["192.0.2.1/24"])
        let clients = try lab.addHost("clients", mac: MACAddress("02:53:50:00:00:02")!, ipv4: ["192.0.2.2/24"])
        let hostCount = 100
        for n in 0..<hostCount { try clients.addAddress("192.0.2.\(100 + n)/24") }
        // BENCH_DAEMON_ARGS adds daemon flags, e.g. "--no-takeover" to see what the packet side costs.
        let process = try proxy.spawn(
            [
                daemon.path, "--interface", "eth0", "--state-directory",
                lab.directory.appendingPathComponent("state").path, "--control-socket",
                lab.directory.appendingPathComponent("control.sock").path, "--log-level", "warning",
            ]
                + (ProcessInfo.processInfo.environment["BENCH_DAEMON_ARGS"].map {
                    $0.split(separator: " ").map(String.init)
                } ?? []), logName: "bench")
        defer { process.stop() }
        usleep(300_000)
        let flooder =
            flood
            ? try ARPFlooder(in: lab.addHost("flooder", mac: MACAddress("02:53:50:00:00:03")!, ipv4: ["192.0.2.3/24"]))
            : nil
        defer { flooder?.stop() }

        let rounds = 30
        let samples = try clients.namespace.inside { () throws -> [Double] in
            var sockets: [Int32] = []
            defer { for fd in sockets { close(fd) } }
            for n in 0..<hostCount {
                let fd = socket(AF_INET, PosixSocket.datagram | PosixSocket.nonBlocking, 0)
                // 192.0.2.100 + n
                let address = PosixSocketAddress(.v4(IPv4Address(rawValue: 0xC000_0264 + UInt32(n))), port: 0)
                let bound: Int32 = address.bind(fd) ? 0 : -1
                guard fd >= 0, bound == 0 else {
                    throw CommandError("client socket: \(String(cString: strerror(errno)))")
                }
                // The kernel stamps each reply as it arrives (CLOCK_REALTIME), so the figure does not include
                // the time this one thread spends sending the other 99 before it reads.
                var on: Int32 = 1
                setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, 4)
                sockets.append(fd)
            }
            let proxyAddress = PosixSocketAddress(.v4(IPv4Address(192, 0, 2, 1)), port: 5599)
            var latencies: [Double] = []
            for round in 0..<rounds {
                let payloads = (0..<hostCount).map { n -> [UInt8] in
                    let v4 = IPAddress.v4(IPv4Address(rawValue: 0xC000_0264 + UInt32(n)))
                    return SampleRegistration.message(
                        id: UInt16(round * hostCount + n), mac: MACAddress(rawValue: 0x0253_5000_1000 + UInt64(n)),
                        host: try! DNSName(parsing: "host\(n).local."), addresses: [v4]
                    ).encoded(options: .appleUpdate)
                }
                var sent = [UInt64](repeating: 0, count: hostCount)
                var received = [UInt64](repeating: 0, count: hostCount)
                // All hosts register at once.
                for n in 0..<hostCount {
                    sent[n] = realtimeNanoseconds()
                    proxyAddress.send(payloads[n], on: sockets[n])
                }
                var pending = Set(0..<hostCount)
                var descriptors = sockets.map { pollfd(fd: $0, events: Int16(POLLIN), revents: 0) }
                let deadline = monotonicNanoseconds() + 3_000_000_000
                var buffer = [UInt8](repeating: 0, count: 2048)
                while !pending.isEmpty, monotonicNanoseconds() < deadline {
                    guard poll(&descriptors, nfds_t(descriptors.count), 100) > 0 else { continue }
                    for n in pending where descriptors[n].revents & Int16(POLLIN) != 0 {
                        if let arrival = receiveWithTimestamp(sockets[n], &buffer) {
                            received[n] = arrival
                            pending.remove(n)
                        }
                    }
                }
                guard pending.isEmpty else {
                    throw CommandError("\(pending.count) registrations unanswered in round \(round)")
                }
                latencies += (0..<hostCount).map { Double(received[$0] - sent[$0]) / 1e6 }
                usleep(50_000)
            }
            return latencies
        }
        if let flooder {
            let (frames, seconds) = flooder.stop()
            print(
                String(
                    format: "  ARP flood: %d requests in %.1f s (%.0f frames/s) from a third host", frames, seconds,
                    Double(frames) / max(seconds, 0.001)))
        }
        let sorted = samples.sorted()
        print("  \(hostCount) hosts registering at once, \(rounds) rounds (\(sorted.count) round trips, all answered)")
        print(
            String(
                format: "  round trip p50 %.2f ms, p99 %.2f ms, max %.2f ms  target p99 ≤ 5 ms: %@",
                percentile(samples, 0.5), percentile(samples, 0.99), sorted.last!,
                percentile(samples, 0.99) <= 5 ? "met" : "NOT MET"))
    }
}

/// Broadcast ARP requests for an unused documentation address from one lab host, as fast as one thread can send
/// them, until stopped; bounded at 20 million frames and two minutes whatever happens.
final class ARPFlooder: @unchecked Sendable {
    // @unchecked: `stopping` and `sent` are guarded by `lock`; `done` is a semaphore.
    static let maximumFrames = 20_000_000
    static let maximumSeconds: UInt64 = 120
    private let lock = NSLock()
    private var stopping = false
    private var sent = 0
    private var seconds = 0.0
    private let done = DispatchSemaphore(value: 0)

    init(in host: LabHost) throws {
        let request = ARPPacket(
            operation: .request, senderMAC: host.mac, senderIP: IPv4Address(192, 0, 2, 3), targetMAC: .zero,
            targetIP: IPv4Address(192, 0, 2, 250))
        let frame = request.frame(destination: .broadcast, source: host.mac).bytes
        let namespace = host.namespace
        Thread {
            defer { self.done.signal() }
            _ = try? namespace.inside { () throws -> Void in
                let fd = socket(AF_PACKET, PosixSocket.raw | PosixSocket.closeOnExec, 0)
                guard fd >= 0 else { return }
                defer { close(fd) }
                var address = sockaddr_ll()
                address.sll_family = UInt16(AF_PACKET)
                address.sll_ifindex = Int32(if_nametoindex("eth0"))
                address.sll_halen = 6
                let start = monotonicNanoseconds()
                let end = start + ARPFlooder.maximumSeconds * 1_000_000_000
                var count = 0
                while count < ARPFlooder.maximumFrames {
                    if count % 1024 == 0 {
                        let stop = self.lock.withLock { self.stopping }
                        if stop || monotonicNanoseconds() > end { break }
                    }
                    let result = frame.withUnsafeBytes { raw in
                        withUnsafePointer(to: &address) {
                            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                                sendto(fd, raw.baseAddress, raw.count, 0, $0, socklen_t(MemoryLayout<sockaddr_ll>.size))
                            }
                        }
                    }
                    if result > 0 { count += 1 }
                }
                let elapsed = Double(monotonicNanoseconds() - start) / 1e9
                self.lock.withLock { (self.sent, self.seconds) = (count, elapsed) }
            }
        }.start()
    }

    /// Stops the flood (once; later calls return the same figures) and says how much was sent over how long.
    @discardableResult
    func stop() -> (frames: Int, seconds: Double) {
        let first = self.lock.withLock { () -> Bool in
            defer { self.stopping = true }
            return !self.stopping
        }
        if first { self.done.wait() }
        return self.lock.withLock { (self.sent, self.seconds) }
    }
}

func realtimeNanoseconds() -> UInt64 {
    var spec = timespec()
    clock_gettime(CLOCK_REALTIME, &spec)
    return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
}

/// Reads one datagram and returns the kernel's arrival time (SCM_TIMESTAMPNS), or nil when nothing was read.
func receiveWithTimestamp(_ fd: Int32, _ buffer: inout [UInt8]) -> UInt64? {
    var control = [UInt8](repeating: 0, count: 64)
    return buffer.withUnsafeMutableBytes { data -> UInt64? in
        control.withUnsafeMutableBytes { controlBytes -> UInt64? in
            var vector = iovec(iov_base: data.baseAddress, iov_len: data.count)
            return withUnsafeMutablePointer(to: &vector) { vectorPointer -> UInt64? in
                var header = msghdr()
                header.msg_iov = vectorPointer
                header.msg_iovlen = 1
                header.msg_control = controlBytes.baseAddress
                header.msg_controllen = controlBytes.count
                guard recvmsg(fd, &header, 0) > 0 else { return nil }
                // struct cmsghdr { size_t len; int level; int type; } then struct timespec.
                guard header.msg_controllen >= 16 + MemoryLayout<timespec>.size else { return realtimeNanoseconds() }
                let base = controlBytes.baseAddress!
                guard base.loadUnaligned(fromByteOffset: 8, as: Int32.self) == SOL_SOCKET,
                    base.loadUnaligned(fromByteOffset: 12, as: Int32.self) == SO_TIMESTAMPNS
                else { return realtimeNanoseconds() }
                let stamp = base.loadUnaligned(fromByteOffset: 16, as: timespec.self)
                return UInt64(stamp.tv_sec) * 1_000_000_000 + UInt64(stamp.tv_nsec)
            }
        }
    }
}

func monotonicNanoseconds() -> UInt64 {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
}

extension Duration {
    var formattedMilliseconds: String {
        String(format: "%.1f ms", Double(self.components.seconds) * 1000 + Double(self.components.attoseconds) / 1e15)
    }
}
