import ArgumentParser
import CSleepProxyLinux
import Foundation
import SleepProxyClient
import SleepProxyCore
import SleepProxyWire

struct ClientError: Error, CustomStringConvertible {
    var description: String
}

enum Client {
    static func warn(_ message: String) {
        FileHandle.standardError.write(Data("sleepproxy-client: \(message)\n".utf8))
    }

    /// Says on stderr when the proxy could not wake this host: Wake-on-LAN off, or not known to be on.
    static func reportWakeOnLAN(_ link: Link) {
        switch csp_wol_magic_enabled(link.name) {
        case 1: break
        case 0:
            self.warn(
                "Wake-on-LAN (magic packet) is off on \(link.name), so the proxy cannot wake this host: enable it with `ethtool -s \(link.name) wol g`"
            )
        default:
            self.warn(
                "cannot tell whether Wake-on-LAN is on for \(link.name) (the driver does not say); check `ethtool \(link.name)`"
            )
        }
    }

    /// Registers with the best proxy that takes it. The records are this host's own, as its responder publishes
    /// them (the proxy must answer exactly what the host answered), plus any --service.
    static func register(
        link linkOptions: LinkOptions, state stateOptions: StateOptions, browse: BrowseOptions,
        options: RegistrationOptions
    ) throws {
        let link = try Link.find(linkOptions.interface, hostName: linkOptions.hostName)
        self.reportWakeOnLAN(link)
        guard let source = link.ipv4.first else {
            throw ClientError(description: "\(link.name) has no IPv4 address to register from")
        }

        var published = PublishedRecords(addresses: Set(link.addresses))
        var missing = "--no-avahi was given and no --service"
        if !options.noAvahi {
            published = try OwnResponder.published(on: link)
            if published.hostNames.isEmpty {
                missing = "no mDNS responder answered for this host on \(link.name) (is avahi-daemon running?)"
            } else if published.instances.isEmpty {
                missing = "this host's mDNS responder publishes no service on \(link.name)"
            }
        }
        let own = published.registrationRecords
        let hostName =
            linkOptions.hostName.flatMap { try? DNSName(labels: [$0, "local"]) } ?? published.hostNames.first
            ?? link.hostName
        let taken = Set(published.instances)
        let extra = options.service.compactMap { SleepRegistration.Service(specification: $0) }.filter {
            !taken.contains($0.instance)
        }
        let serviceCount = published.instances.count + extra.count
        if serviceCount == 0, !options.allowEmpty {
            self.warn(
                "nothing to register: \(missing); the proxy could not wake this host for any connection (--allow-empty registers its addresses anyway)"
            )
            throw ExitCode(ClientExit.nothingToRegister)
        }
        // Without the responder's own address records, the addresses are this client's to give: not the IPv6
        // link-local ones, which avahi-daemon does not publish for the host name either.
        let addresses = own.isEmpty ? link.addresses.filter { !$0.isLinkLocal } : []
        var state = ClientState.load(stateOptions.stateDirectory)
        let password = options.password.flatMap(SecureOnPassword.init)
        let registration = SleepRegistration(
            hostName: hostName, addresses: addresses, services: extra,
            owner: OwnerOption(
                sequence: state.sequence, primaryMAC: link.mac, wakeMAC: password == nil ? nil : link.mac,
                password: password),
            lease: options.lease)
        let messages = registration.messages(id: UInt16.random(in: 1 ... .max), extra: own)
        let recordCount = messages.reduce(0) { $0 + $1.authorities.count }
        let encoded = messages.map { $0.encoded(options: .appleUpdate) }
        let proxies = try Browser.proxies(on: link, seconds: browse.browseSeconds, prefer: browse.prefer)
        guard !proxies.isEmpty else { throw ClientError(description: "no sleep proxy answered on \(link.name)") }
        var problems: [String] = []
        for proxy in proxies {
            let granted: UInt32
            do {
                granted = try UDP.exchange(encoded, from: source, to: proxy.address, port: proxy.port)
            } catch {
                problems.append("\(proxy.label): \(error)")
                continue
            }
            print(
                "registered \(recordCount) records (\(serviceCount) services) with \(proxy.label) at \(proxy.address):\(proxy.port); lease \(granted) s"
            )
            // The proxy holds the registration now, whatever happens to the local record of it.
            state.last = ClientState.Registration(
                proxy: proxy.label, address: proxy.address.description, port: proxy.port, interface: link.name,
                at: Date(), lease: granted,
                records: recordCount, parts: messages.count)
            do {
                try state.save(stateOptions.stateDirectory)
            } catch {
                self.warn(
                    "the registration was accepted, but it could not be recorded in \(stateOptions.stateDirectory) (\(error)); `status` will not show it"
                )
            }
            if options.rtcWake { RTC.setAlarm(seconds: Int(Double(granted) * 0.9)) }
            return
        }
        throw ClientError(description: "no proxy took the registration (\(problems.joined(separator: "; ")))")
    }

    /// After resume: the Owner sequence goes up by one, on disk before anything is sent (docs/protocol.md §3.3:
    /// a new number is how every proxy tells that the host woke); the last registration is marked handed back.
    static func nextSequence(_ options: StateOptions) throws -> UInt8 {
        var state = ClientState.load(options.stateDirectory)
        state.sequence &+= 1
        state.last?.handedBackAt = Date()
        try state.save(options.stateDirectory)
        return state.sequence
    }

    /// Probes for the host name carrying the Owner option with the current sequence number, on
    /// `WakeAnnouncement`'s schedule, counted from the moment the interface has an IPv4 address again (waiting at
    /// most `addressWait`). Each probe is built from the addresses the interface has when it is sent, since a
    /// DHCP renewal after resume may change them. Returns how many probes went out.
    static func announceWake(
        link linkOptions: LinkOptions, state: StateOptions, window: Duration, addressWait: Duration
    ) throws -> Int {
        let clock = ContinuousClock()
        let waitUntil = clock.now + addressWait
        // The interface itself may be missing for a while too: a USB NIC is enumerated again after resume.
        var link = try? Link.find(linkOptions.interface, hostName: linkOptions.hostName)
        while link?.ipv4.isEmpty ?? true, clock.now < waitUntil {
            usleep(200_000)
            link = (try? Link.find(linkOptions.interface, hostName: linkOptions.hostName)) ?? link
        }
        guard let link, !link.ipv4.isEmpty else {
            let name = link?.name ?? linkOptions.interface ?? "the interface"
            throw ClientError(
                description:
                    "\(name) has no IPv4 address \(addressWait.wholeSeconds) s after resume; nothing announced (proxies still hand back on this host's next mDNS packet)"
            )
        }
        let sequence = ClientState.load(state.stateDirectory).sequence
        let start = clock.now
        var sent = 0
        for offset in WakeAnnouncement.schedule(window: window) {
            let due = start + offset
            let wait = clock.now.duration(to: due)
            if wait > .zero { usleep(UInt32(clamping: wait.nanosecondsClamped / 1000)) }
            let current = (try? Link.find(linkOptions.interface, hostName: linkOptions.hostName)) ?? link
            guard !current.ipv4.isEmpty else { continue }
            let owner = OwnerOption(sequence: sequence, primaryMAC: current.mac)
            var authorities: [DNSResourceRecord] = current.ipv4.map {
                DNSResourceRecord(name: current.hostName, cacheFlush: true, ttl: 120, rdata: .a(ARecord(address: $0)))
            }
            authorities += current.ipv6.filter { !$0.isLinkLocal }.map {
                DNSResourceRecord(
                    name: current.hostName, cacheFlush: true, ttl: 120, rdata: .aaaa(AAAARecord(address: $0)))
            }
            // A probe for the host name, as a waking Mac sends, with the Owner option in its OPT record.
            let probe = DNSMessage(
                questions: [DNSQuestion(name: current.hostName, type: .any, unicastResponse: true)],
                authorities: authorities,
                additionals: [.opt(EDNSHeader(udpPayloadSize: 1440), options: [.owner(owner)])])
            if (try? UDP.multicast(probe.encoded(options: .mdns), link: current, count: 1, interval: 0)) != nil {
                sent += 1
            }
        }
        return sent
    }
}
