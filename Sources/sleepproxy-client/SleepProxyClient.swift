import ArgumentParser
import CSleepProxyLinux
import Foundation
import SleepProxyCore
import SleepProxyIO
import SleepProxyWire

#if canImport(Glibc)
import Glibc
#endif

/// The Linux sleep client (issue 7): finds sleep proxies, hands them this host's records before it suspends,
/// and takes them back on resume, in exactly the form Apple's clients use.
@main
struct SleepProxyClient: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sleepproxy-client",
        abstract: "Let this Linux host hand its mDNS records to a Bonjour Sleep Proxy before it suspends.",
        version: "0.3.0",
        subcommands: [Proxies.self, Register.self, Hook.self, Announce.self, Status.self]
    )
}

struct Options: ParsableArguments {
    @Option(name: .long, help: "The interface to register on (default: the first up, multicast-capable, non-loopback one with an IPv4 address).")
    var interface: String?

    @Option(name: .long, help: "This host's .local name without the domain (default: the system host name, as avahi-daemon uses it).")
    var hostName: String?

    @Option(name: .long, help: "Where the Owner sequence number and the last registration are kept.")
    var stateDirectory: String = "/var/lib/sleepproxy-client"

    @Option(name: .long, help: "Try this proxy first (its name, as `proxies` lists it, or part of it).")
    var prefer: String?

    @Option(name: .long, help: "How long to browse for proxies, in seconds.")
    var browseSeconds: Double = 2

    @Option(name: .long, help: "Lease to ask for, in seconds (the proxy may grant less).")
    var lease: UInt32 = 7200

    @Option(name: .long, help: "A service to register besides avahi-daemon's: NAME._type._tcp:PORT[:key=value,...]; repeat for several.")
    var service: [String] = []

    @Flag(name: .long, help: "Do not read the services avahi-daemon publishes for this host.")
    var noAvahi = false

    @Option(name: .long, help: "SecureOn password for the magic packet, six bytes as aa:bb:cc:dd:ee:ff.")
    var password: String?

    @Flag(name: .long, help: "Set an RTC wake alarm at 90 % of the granted lease, so the host wakes to renew it.")
    var rtcWake = false

    func validate() throws {
        if let hostName, hostName.isEmpty || hostName.utf8.count > 63 || hostName.contains(".") {
            throw ValidationError("--host-name takes one label of 1 to 63 bytes without dots, not \"\(hostName)\"")
        }
        if let password, SecureOnPassword(password) == nil { throw ValidationError("--password must be six bytes written as aa:bb:cc:dd:ee:ff") }
        for text in self.service where SleepRegistration.Service(specification: text) == nil {
            throw ValidationError("--service \"\(text)\": write it as NAME._type._tcp:PORT or NAME._type._udp:PORT[:key=value,...]")
        }
        guard self.lease > 0 else { throw ValidationError("--lease must be positive") }
    }
}

// MARK: - Commands

struct Proxies: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Browse for _sleep-proxy._udp and list the proxies, best first, as Apple's clients rank them.")
    @OptionGroup var options: Options

    func run() throws {
        let link = try Link.find(self.options.interface, hostName: self.options.hostName)
        let proxies = try Browser.proxies(on: link, seconds: self.options.browseSeconds, prefer: self.options.prefer)
        guard !proxies.isEmpty else {
            print("no sleep proxy answered on \(link.name)")
            throw ExitCode(1)
        }
        for proxy in proxies { print("\(proxy.label)  \(proxy.address):\(proxy.port)") }
    }
}

struct Register: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Register this host's records with the best proxy now and print the granted lease.")
    @OptionGroup var options: Options

    func run() throws {
        try Client.register(self.options)
    }
}

struct Hook: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "For systemd-sleep: `pre` registers before suspend, `post` announces the wake after resume.",
        discussion: "Installed as /usr/lib/systemd/system-sleep/sleepproxy-client, systemd runs it as `hook pre suspend` and `hook post suspend`.")
    @OptionGroup var options: Options
    @Argument(help: "pre or post") var phase: String
    @Argument(help: "What systemd is doing (suspend, hibernate, hybrid-sleep, suspend-then-hibernate); informational.") var what: String?

    func validate() throws {
        guard self.phase == "pre" || self.phase == "post" else { throw ValidationError("hook takes pre or post, not \"\(self.phase)\"") }
    }

    func run() throws {
        if self.phase == "pre" {
            let link = try Link.find(self.options.interface, hostName: self.options.hostName)
            switch csp_wol_magic_enabled(link.name) {
            case 1: break
            case 0: FileHandle.standardError.write(Data("sleepproxy-client: Wake-on-LAN (magic packet) is off on \(link.name), so the proxy cannot wake this host: enable it with `ethtool -s \(link.name) wol g`\n".utf8))
            default: FileHandle.standardError.write(Data("sleepproxy-client: cannot tell whether Wake-on-LAN is on for \(link.name) (the driver does not say); check `ethtool \(link.name)`\n".utf8))
            }
            // An announcer still running from the last wake would go on sending the old sequence number.
            Systemd.stopAnnouncer()
            do {
                try Client.register(self.options)
            } catch {
                // The host sleeps anyway; a failed registration must not block the suspend.
                FileHandle.standardError.write(Data("sleepproxy-client: \(error); suspending without a sleep proxy\n".utf8))
            }
        } else {
            let sequence = try Client.nextSequence(self.options)
            // Apple's client repeats the Owner option for 60 s (docs/protocol.md §3.5). A sleep hook must return
            // quickly, so under systemd the repeats run in a transient unit; elsewhere the hook announces for a
            // few seconds itself.
            if Systemd.startAnnouncer(self.options) {
                print("announcing the wake (Owner sequence \(sequence)) for \(WakeAnnouncement.window.wholeSeconds) s from the systemd unit \(Systemd.announcerUnit)")
            } else {
                let sent = try Client.announceWake(self.options, window: Hook.inlineWindow, addressWait: Hook.inlineAddressWait)
                print("announced the wake (Owner sequence \(sequence)) with \(sent) probes")
            }
        }
    }

    /// Without systemd the hook itself announces: a probe burst and two more, then it returns.
    static let inlineWindow: Duration = .seconds(4)
    /// ... after waiting at most this long for the interface's address to come back.
    static let inlineAddressWait: Duration = .seconds(10)
}

struct Announce: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Tell every sleep proxy this host is awake: probes carrying the Owner option with the current sequence number, for 60 s once the interface has its address back (`hook post` runs this).")
    @OptionGroup var options: Options
    @Option(name: .long, help: "How long to keep announcing, in seconds (Apple's client: 60).")
    var seconds: Int = Int(WakeAnnouncement.window.wholeSeconds)

    /// An hour: far past Apple's 60 s window, yet a typo cannot leave an announcer running for days.
    static let maximumSeconds = 3600

    func validate() throws {
        guard (0...Self.maximumSeconds).contains(self.seconds) else { throw ValidationError("--seconds must be 0 to \(Self.maximumSeconds), not \(self.seconds)") }
    }

    func run() throws {
        let sent = try Client.announceWake(self.options, window: .seconds(self.seconds), addressWait: WakeAnnouncement.addressWait)
        print("announced the wake (Owner sequence \(ClientState.load(self.options.stateDirectory).sequence)) with \(sent) probes")
    }
}

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "What was registered where, when, with which lease.")
    @OptionGroup var options: Options

    func run() throws {
        let state = ClientState.load(self.options.stateDirectory)
        print("Owner sequence: \(state.sequence)")
        guard let last = state.last else {
            print("no registration yet")
            return
        }
        let formatter = ISO8601DateFormatter()
        let ends = last.at.addingTimeInterval(TimeInterval(last.lease))
        print("registered with \(last.proxy) (\(last.address):\(last.port)) on \(last.interface) at \(formatter.string(from: last.at))")
        print("  \(last.records) records in \(last.parts) UPDATE\(last.parts == 1 ? "" : "s"), lease \(last.lease) s, \(ends > Date() ? "ends \(formatter.string(from: ends))" : "ended \(formatter.string(from: ends))")")
    }
}

// MARK: - State

struct ClientState: Codable {
    struct Registration: Codable {
        var proxy: String
        var address: String
        var port: UInt16
        var interface: String
        var at: Date
        var lease: UInt32
        var records: Int
        var parts: Int
    }

    /// The Owner option's sequence number: the same for every registration of one sleep, one more after each
    /// wake (docs/protocol.md §3.3, §5.1: a new number tells every proxy the host is back).
    var sequence: UInt8 = 0
    var last: Registration?

    static func url(_ directory: String) -> URL { URL(fileURLWithPath: directory).appendingPathComponent("state.json") }

    static func load(_ directory: String) -> ClientState {
        guard let data = try? Data(contentsOf: self.url(directory)) else { return ClientState() }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        return (try? decoder.decode(ClientState.self, from: data)) ?? ClientState()
    }

    func save(_ directory: String) throws {
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        try encoder.encode(self).write(to: Self.url(directory), options: .atomic)
    }
}

// MARK: - Registering

struct ClientError: Error, CustomStringConvertible {
    var description: String
}

enum Client {
    static func register(_ options: Options) throws {
        let link = try Link.find(options.interface, hostName: options.hostName)
        guard let source = link.ipv4.first else { throw ClientError(description: "\(link.name) has no IPv4 address to register from") }
        var services = options.service.compactMap { SleepRegistration.Service(specification: $0) }
        if !options.noAvahi { services += Avahi.publishedServices(hostName: link.hostName, interface: link.name) }
        var seen: Set<DNSName> = []
        services = services.filter { seen.insert($0.instance).inserted }
        var state = ClientState.load(options.stateDirectory)
        let password = options.password.flatMap(SecureOnPassword.init)
        let registration = SleepRegistration(
            hostName: link.hostName, addresses: link.ipv4.map(IPAddress.v4) + link.ipv6.map(IPAddress.v6), services: services,
            owner: OwnerOption(sequence: state.sequence, primaryMAC: link.mac, wakeMAC: password == nil ? nil : link.mac, password: password),
            lease: options.lease)
        let id = UInt16.random(in: 1 ... .max)
        let messages = registration.messages(id: id).map { $0.encoded(options: .appleUpdate) }
        let proxies = try Browser.proxies(on: link, seconds: options.browseSeconds, prefer: options.prefer)
        guard !proxies.isEmpty else { throw ClientError(description: "no sleep proxy answered on \(link.name)") }
        var problems: [String] = []
        for proxy in proxies {
            do {
                let granted = try UDP.exchange(messages, from: source, to: proxy.address, port: proxy.port)
                state.last = ClientState.Registration(
                    proxy: proxy.label, address: proxy.address.description, port: proxy.port, interface: link.name, at: Date(), lease: granted,
                    records: registration.records.count, parts: messages.count)
                try state.save(options.stateDirectory)
                print("registered \(registration.records.count) records (\(services.count) services) with \(proxy.label) at \(proxy.address):\(proxy.port); lease \(granted) s")
                if options.rtcWake { RTC.setAlarm(seconds: Int(Double(granted) * 0.9)) }
                return
            } catch {
                problems.append("\(proxy.label): \(error)")
            }
        }
        throw ClientError(description: "no proxy took the registration (\(problems.joined(separator: "; ")))")
    }

    /// After resume: the Owner sequence goes up by one, on disk before anything is sent (docs/protocol.md §3.3:
    /// a new number is how every proxy tells that the host woke).
    static func nextSequence(_ options: Options) throws -> UInt8 {
        var state = ClientState.load(options.stateDirectory)
        state.sequence &+= 1
        try state.save(options.stateDirectory)
        return state.sequence
    }

    /// Probes for the host name carrying the Owner option with the current sequence number, on
    /// `WakeAnnouncement`'s schedule, counted from the moment the interface has an IPv4 address again (waiting at
    /// most `addressWait`). Each probe is built from the addresses the interface has when it is sent, since a
    /// DHCP renewal after resume may change them. Returns how many probes went out.
    static func announceWake(_ options: Options, window: Duration, addressWait: Duration) throws -> Int {
        let clock = ContinuousClock()
        let waitUntil = clock.now + addressWait
        // The interface itself may be missing for a while too: a USB NIC is enumerated again after resume.
        var link = try? Link.find(options.interface, hostName: options.hostName)
        while link?.ipv4.isEmpty ?? true, clock.now < waitUntil {
            usleep(200_000)
            link = (try? Link.find(options.interface, hostName: options.hostName)) ?? link
        }
        guard let link, !link.ipv4.isEmpty else {
            let name = link?.name ?? options.interface ?? "the interface"
            throw ClientError(description: "\(name) has no IPv4 address \(addressWait.wholeSeconds) s after resume; nothing announced (proxies still hand back on this host's next mDNS packet after their 60 s grace)")
        }
        let sequence = ClientState.load(options.stateDirectory).sequence
        let start = clock.now
        var sent = 0
        for offset in WakeAnnouncement.schedule(window: window) {
            let due = start + offset
            let wait = clock.now.duration(to: due)
            if wait > .zero { usleep(UInt32(clamping: wait.nanosecondsClamped / 1000)) }
            let current = (try? Link.find(options.interface, hostName: options.hostName)) ?? link
            guard !current.ipv4.isEmpty else { continue }
            let owner = OwnerOption(sequence: sequence, primaryMAC: current.mac)
            var authorities: [DNSResourceRecord] = current.ipv4.map { DNSResourceRecord(name: current.hostName, cacheFlush: true, ttl: 120, rdata: .a(ARecord(address: $0))) }
            authorities += current.ipv6.map { DNSResourceRecord(name: current.hostName, cacheFlush: true, ttl: 120, rdata: .aaaa(AAAARecord(address: $0))) }
            // A probe for the host name, as a waking Mac sends, with the Owner option in its OPT record.
            let probe = DNSMessage(
                questions: [DNSQuestion(name: current.hostName, type: .any, unicastResponse: true)], authorities: authorities,
                additionals: [.opt(EDNSHeader(udpPayloadSize: 1440), options: [.owner(owner)])])
            if (try? UDP.multicast(probe.encoded(options: .mdns), link: current, count: 1, interval: 0)) != nil { sent += 1 }
        }
        return sent
    }
}

/// The announcer as a transient systemd unit, so `hook post` returns at once while the announcements go on.
enum Systemd {
    static let announcerUnit = "sleepproxy-client-announce"

    static var isRunning: Bool { FileManager.default.fileExists(atPath: "/run/systemd/system") }

    static func tool(_ name: String) -> String? {
        ["/usr/bin/\(name)", "/bin/\(name)"].first(where: FileManager.default.isExecutableFile(atPath:))
    }

    /// Starts `sleepproxy-client announce` with the hook's interface, host name and state directory in a
    /// transient unit (replacing one still running); false when systemd is not running or refuses.
    static func startAnnouncer(_ options: Options) -> Bool {
        guard self.isRunning, let run = self.tool("systemd-run"), let me = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") else { return false }
        self.stopAnnouncer()
        var arguments = ["--no-block", "--collect", "--quiet", "--unit", self.announcerUnit, "--description", "sleepproxy-client: wake announcements", "--", me, "announce", "--state-directory", options.stateDirectory]
        if let interface = options.interface { arguments += ["--interface", interface] }
        if let hostName = options.hostName { arguments += ["--host-name", hostName] }
        return self.run(run, arguments) == 0
    }

    static func stopAnnouncer() {
        guard self.isRunning, let systemctl = self.tool("systemctl") else { return }
        _ = self.run(systemctl, ["stop", "--quiet", "\(self.announcerUnit).service"])
    }

    private static func run(_ tool: String, _ arguments: [String]) -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return -1 }
        process.waitUntilExit()
        return process.terminationStatus
    }
}

// MARK: - The network side

struct Link {
    var name: String
    var index: Int
    var mac: MACAddress
    var ipv4: [IPv4Address]
    var ipv6: [IPv6Address]
    var hostName: DNSName

    static func find(_ name: String?, hostName override: String? = nil) throws -> Link {
        let inventory = try InterfaceInventory.read()
        let candidates = name.map { wanted in inventory.interfaces.filter { $0.context.name == wanted } } ?? inventory.defaultServed
        guard let interface = candidates.first(where: { $0.context.prefixes.contains { if case .v4 = $0.address { return true } else { return false } } }) ?? candidates.first else {
            throw ClientError(description: name.map { "no interface named \($0) (see `ip link`)" } ?? "no up, multicast-capable interface with an address")
        }
        var ipv4: [IPv4Address] = []
        var ipv6: [IPv6Address] = []
        for prefix in interface.context.prefixes {
            switch prefix.address {
            case .v4(let a): ipv4.append(a)
            case .v6(let a): ipv6.append(a)
            }
        }
        var buffer = [UInt8](repeating: 0, count: 256)
        _ = buffer.withUnsafeMutableBufferPointer { gethostname(UnsafeMutableRawPointer($0.baseAddress!).assumingMemoryBound(to: CChar.self), 255) }
        let short = String(decoding: buffer.prefix { $0 != 0 }, as: UTF8.self).split(separator: ".").first.map(String.init) ?? ""
        let hostName = try DNSName(labels: [override ?? (short.isEmpty ? "linux" : short), "local"])
        return Link(name: interface.context.name, index: interface.context.index, mac: interface.context.macAddress, ipv4: ipv4, ipv6: ipv6, hostName: hostName)
    }
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
        guard let source = link.ipv4.first else { throw ClientError(description: "\(link.name) has no IPv4 address to browse from") }
        let query = DNSMessage(id: UInt16.random(in: 1 ... .max), questions: [DNSQuestion(name: Self.serviceType, type: .ptr)])
        let replies = try UDP.ask(query.encoded(), from: source, to: IPv4Address.mdnsGroup, port: 5353, seconds: seconds, link: link)
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
            guard let label = instance.labelStrings.first, let srv = services[instance], let address = addresses[srv.target] else { continue }
            proxies.append(Proxy(label: label, address: address, port: srv.port))
        }
        let ranked = SleepProxyName.rank(proxies.map(\.label))
        proxies.sort { (ranked.firstIndex(of: $0.label) ?? .max, $0.address.isLinkLocal ? 1 : 0) < (ranked.firstIndex(of: $1.label) ?? .max, $1.address.isLinkLocal ? 1 : 0) }
        if let prefer, let index = proxies.firstIndex(where: { $0.label.localizedCaseInsensitiveContains(prefer) }) {
            proxies.insert(proxies.remove(at: index), at: 0)
        }
        return proxies
    }
}

enum Avahi {
    /// The services avahi-daemon publishes for this host on `interface`, read with `avahi-browse -arpt`.
    static func publishedServices(hostName: DNSName, interface: String) -> [SleepRegistration.Service] {
        guard let tool = ["/usr/bin/avahi-browse", "/bin/avahi-browse"].first(where: FileManager.default.isExecutableFile(atPath:)) else { return [] }
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        // -k: raw service types (`_http._tcp`), not the names of avahi's service database ("Web Site").
        process.arguments = ["-a", "-r", "-p", "-t", "-k"]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return [] }
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return AvahiBrowseOutput.services(in: String(decoding: data, as: UTF8.self), hostName: hostName, interface: interface)
    }
}

enum UDP {
    /// A UDP socket bound to `source` (and to the interface), with a receive timeout.
    static func socket(bound source: IPv4Address, link: Link?, port: UInt16 = 0, reuse: Bool = false) throws -> Int32 {
        let fd = Glibc.socket(AF_INET, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw ClientError(description: "cannot open a UDP socket: \(String(cString: strerror(errno)))") }
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
            _ = link.name.withCString { setsockopt(fd, SOL_SOCKET, SO_BINDTODEVICE, $0, socklen_t(link.name.utf8.count + 1)) }
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = port == 0 ? source.rawValue.bigEndian : 0
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0 else {
            close(fd)
            throw ClientError(description: "cannot bind to \(source): \(String(cString: strerror(errno)))")
        }
        return fd
    }

    static func send(_ fd: Int32, _ bytes: [UInt8], to address: IPv4Address, port: UInt16) {
        var destination = sockaddr_in()
        destination.sin_family = sa_family_t(AF_INET)
        destination.sin_port = port.bigEndian
        destination.sin_addr.s_addr = address.rawValue.bigEndian
        _ = bytes.withUnsafeBytes { raw in
            withUnsafePointer(to: &destination) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { sendto(fd, raw.baseAddress, raw.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        }
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
    static func ask(_ query: [UInt8], from source: IPv4Address, to destination: IPv4Address, port: UInt16, seconds: Double, link: Link) throws -> [[UInt8]] {
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
    static func exchange(_ parts: [[UInt8]], from source: IPv4Address, to proxy: IPv4Address, port: UInt16) throws -> UInt32 {
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
                    guard let message = try? DNSMessage(decoding: reply), message.id == id, message.flags.isResponse else { continue }
                    guard message.flags.responseCode == .noError else { throw ClientError(description: "answered \(message.flags.responseCode)") }
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

enum RTC {
    /// Writes a relative wake alarm to the first RTC (cleared first, as the kernel requires).
    static func setAlarm(seconds: Int) {
        let path = "/sys/class/rtc/rtc0/wakealarm"
        do {
            try "0".write(toFile: path, atomically: false, encoding: .utf8)
            try "+\(seconds)".write(toFile: path, atomically: false, encoding: .utf8)
            print("RTC wake alarm set in \(seconds) s to renew the lease")
        } catch {
            FileHandle.standardError.write(Data("sleepproxy-client: cannot set the RTC wake alarm (\(path)): \(error)\n".utf8))
        }
    }
}
