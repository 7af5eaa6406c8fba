import CSleepProxyLinux
import SleepProxyCore
import SleepProxyWire

extension HomeMonth {
    // MARK: - Calls into the engine, timed

    mutating func frame(_ bytes: [UInt8]) {
        let began = self.clock.now
        let actions = self.engine.receiveFrame(
            bytes, interfaceIndex: HomeDevices.interface.index, outgoing: false, now: self.now)
        self.report.engineTime += self.clock.now - began
        self.handle(actions)
    }

    mutating func mdns(_ bytes: [UInt8], from source: IPAddress, port: UInt16 = 5353) {
        let began = self.clock.now
        let actions = self.engine.receiveMDNS(
            bytes, from: source, port: port, destination: port == 5353 ? .v4(.mdnsGroup) : nil,
            interfaceIndex: HomeDevices.interface.index, now: self.now)
        self.report.engineTime += self.clock.now - began
        self.handle(actions)
    }

    mutating func ssdp(_ bytes: [UInt8], from source: IPAddress) {
        let began = self.clock.now
        let actions = self.engine.receiveSSDP(
            bytes, from: source, port: 1900, destination: .v4(IPv4Address(239, 255, 255, 250)),
            interfaceIndex: HomeDevices.interface.index, now: self.now)
        self.report.engineTime += self.clock.now - began
        self.handle(actions)
    }

    mutating func register(_ host: Int) {
        let messages = HomeDevices.registration(
            host, sequence: self.hosts[host].sequence, id: self.hosts[host].messageID, lease: self.configuration.lease)
        self.hosts[host].messageID &+= 1
        for message in messages {
            let began = self.clock.now
            let actions = self.engine.receiveRegistration(
                message, from: .v4(HomeDevices.v4(host)), on: HomeDevices.interface, now: self.now)
            self.report.engineTime += self.clock.now - began
            self.handle(actions)
        }
    }

    // MARK: - Events

    mutating func perform(_ event: Event) {
        switch event {
        case .hostUp(let host): self.comeUp(host)
        case .sleep(let host, let epoch):
            guard self.hosts[host].epoch == epoch else { return }
            self.fallAsleep(host)
        case .dozeOff(let host, let epoch):
            guard self.hosts[host].epoch == epoch else { return }
            self.hosts[host].awake = false
        case .wakeByItself(let host, let epoch):
            guard self.hosts[host].epoch == epoch, !self.hosts[host].awake, !self.hosts[host].wakePending else {
                return
            }
            self.comeUp(host)
        case .personConnects(let host, let epoch):
            guard self.hosts[host].epoch == epoch, !self.hosts[host].awake else { return }
            self.connect(host)
        case .personRetries(let host, let epoch, let attempt, let port):
            guard self.hosts[host].epoch == epoch, !self.hosts[host].awake else { return }
            self.personSends(host, attempt: attempt, port: port)
        case .renew(let host, let epoch):
            guard self.hosts[host].epoch == epoch, !self.hosts[host].awake else { return }
            self.report.renewals += 1
            self.register(host)
            self.schedule(.renew(host, epoch: epoch), after: self.configuration.renewalInterval)
        case .answer(let host):
            self.hosts[host].answerPending = false
            guard self.hosts[host].awake else { return }
            let announcement = HomeDevices.announcement(host, owner: nil)
            self.frame(HomeDevices.mdnsFrame(host, announcement))
            self.mdns(announcement, from: .v4(HomeDevices.v4(host)))
        case .arpReply(let host, let request):
            guard self.hosts[host].awake || self.hosts[host].nicAnswers else { return }
            let reply = ARPPacket(
                operation: .reply, senderMAC: HomeDevices.mac(host), senderIP: HomeDevices.v4(host),
                targetMAC: request.senderMAC, targetIP: request.senderIP)
            self.frame(reply.frame(destination: request.senderMAC, source: HomeDevices.mac(host)).bytes)
        case .device(let device, let tick): self.chatter(device, tick: tick)
        case .scan: self.scan()
        case .frame(let bytes):
            self.report.scanFrames += 1
            self.frame(bytes)
        case .query: self.query()
        case .census:
            self.takeCensus()
            self.schedule(.census, after: .seconds(3600))
        case .dayEnd:
            self.endDay()
            self.schedule(.dayEnd, after: .seconds(86_400))
        }
    }

    /// The host is up: it says so on every address, and an adopted one publishes what it serves.
    mutating func comeUp(_ host: Int) {
        self.hosts[host].awake = true
        self.hosts[host].wakePending = false
        self.hosts[host].epoch += 1
        let address = HomeDevices.v4(host)
        self.frame(TestFrames.arpAnnouncement(from: HomeDevices.mac(host), for: address))
        if self.hosts[host].adopted {
            let announcement = HomeDevices.announcement(host, owner: nil)
            self.frame(HomeDevices.mdnsFrame(host, announcement))
            self.mdns(announcement, from: .v4(address))
            if self.hosts[host].mediaServer {
                for notify in HomeDevices.ssdpNotifies(host, at: address) {
                    self.frame(
                        TestFrames.udp(
                            from: HomeDevices.mac(host), to: MACAddress("01:00:5e:7f:ff:fa")!, source: .v4(address),
                            destination: .v4(IPv4Address(239, 255, 255, 250)), sourcePort: 1900, port: 1900,
                            payload: notify))
                    self.ssdp(notify, from: .v4(address))
                }
            }
        } else {
            // A new wake, a new Owner sequence (docs/protocol.md §2.4).
            self.hosts[host].sequence &+= 1
            self.mdns(HomeDevices.announcement(host, owner: self.hosts[host].sequence), from: .v4(address))
        }
        let cycle = 86_400.0 / Double(max(self.configuration.cyclesPerDay, 1))
        self.schedule(
            .sleep(host, epoch: self.hosts[host].epoch), after: self.seconds(cycle * 0.07, cycle * 0.35))
    }

    mutating func fallAsleep(_ host: Int) {
        self.hosts[host].epoch += 1
        let epoch = self.hosts[host].epoch
        if !self.hosts[host].adopted {
            // A registering host is still up when it registers (it answers the proxy's first probes) and sleeps a
            // moment later, as a Mac does once its sleep proxy has replied.
            self.register(host)
            self.schedule(.dozeOff(host, epoch: epoch), after: .seconds(1))
            self.schedule(.renew(host, epoch: epoch), after: self.configuration.renewalInterval)
        } else {
            self.hosts[host].awake = false
        }
        let cycle = 86_400.0 / Double(max(self.configuration.cyclesPerDay, 1))
        let asleep = self.seconds(cycle * 0.4, cycle * 1.2)
        if self.random.next() & 1 == 0 {
            self.schedule(.wakeByItself(host, epoch: epoch), after: asleep)
        } else {
            self.schedule(.personConnects(host, epoch: epoch), after: asleep)
        }
    }

    /// A person opens the host's share: the app resolves it (the proxy answers), then connects.
    mutating func connect(_ host: Int) {
        self.hosts[host].wantedSince = self.now
        let resolve = DNSMessage(questions: [
            DNSQuestion(name: HomeDevices.instance(host, "_smb"), type: .srv),
            DNSQuestion(name: HomeDevices.name(host), type: .a),
        ])
        self.mdns(resolve.encoded(options: .mdns), from: HomeDevices.person)
        self.personSends(host, attempt: 0, port: UInt16(truncatingIfNeeded: 49152 + self.random.next() % 16000))
    }

    /// The person's laptop asks for the address, then sends its SYN (retransmitted identically at 1, 3 and 7 s, as
    /// Linux does); a NIC that answers ARP in sleep takes the SYN itself, so the proxy sees only the request.
    mutating func personSends(_ host: Int, attempt: Int, port: UInt16) {
        let address = HomeDevices.v4(host)
        self.frame(
            TestFrames.arpRequest(from: HomeDevices.personMAC, senderIP: IPv4Address(192, 0, 2, 200), for: address))
        if !self.hosts[host].nicAnswers {
            self.frame(
                TestFrames.tcp(
                    from: HomeDevices.personMAC, to: HomeDevices.interface.macAddress, source: HomeDevices.person,
                    destination: .v4(address), sourcePort: port, port: 445, sequence: UInt32(port) << 8,
                    window: 64240, options: TestFrames.kernelSYNOptions))
        }
        guard attempt < 3 else { return }
        self.schedule(
            .personRetries(host, epoch: self.hosts[host].epoch, attempt: attempt + 1, port: port),
            after: .seconds(1 << attempt))
    }

    /// Once a minute each device of the house: a browse, an ARP for the router; every other minute its own
    /// announcement and a neighbour solicitation; UPnP devices notify every five minutes, control points search
    /// every ten (the rates of docs/busy-lan.md).
    mutating func chatter(_ device: Int, tick: Int) {
        let address = HomeDevices.deviceAddress(device)
        let mac = HomeDevices.deviceMAC(device)
        let type = HomeDevices.browsedTypes[(device + tick) % HomeDevices.browsedTypes.count]
        let known = device % 2 == 0 && type == "_airplay._tcp.local." ? HomeDevices.deviceInstance(device) : nil
        self.mdns(HomeDevices.browse(type, knownAnswer: known), from: address)
        self.frame(
            TestFrames.arpRequest(
                from: mac, senderIP: IPv4Address(192, 0, 2, UInt8(100 + device)), for: HomeDevices.router))
        if tick % 2 == 0 {
            self.mdns(HomeDevices.deviceAnnouncement(device), from: address)
            let linkLocal = IPv6Address(high: 0xFE80_0000_0000_0000, low: 0x0053_50FF_FE00_2000 + UInt64(device))
            self.frame(TestFrames.neighbourSolicitation(from: mac, source: linkLocal, for: HomeDevices.routerLinkLocal))
        }
        if device % 5 == 0 && tick % 5 == 0 {
            for notify in HomeDevices.ssdpNotifies(1000 + device, at: IPv4Address(192, 0, 2, UInt8(100 + device))) {
                self.ssdp(notify, from: address)
            }
        }
        if device % 10 == 1 && tick % 10 == 0 { self.ssdp(HomeDevices.search(), from: address) }
        self.schedule(.device(device, tick: tick + 1), after: .seconds(60))
    }

    /// Home Assistant: its zeroconf browses (which the proxy answers, so it has resolved every sleeping host), then
    /// its nmap tracker (`-F -T4`): an ARP sweep of the /24, then raw SYNs to every host that answered, ten ports
    /// in the first 50 ms, each retried 250 ms later from the source port plus two (docs/waking.md §2).
    mutating func scan() {
        self.report.scans += 1
        for type in ["_smb._tcp.local.", "_http._tcp.local."] as [DNSName] {
            self.mdns(HomeDevices.browse(type, knownAnswer: nil), from: HomeDevices.scanner)
        }
        let scannerV4 = IPv4Address(192, 0, 2, 250)
        for last in 1...min(254, max(1, self.configuration.sweepAddresses)) {
            let target = IPv4Address(192, 0, 2, UInt8(last))
            self.schedule(
                .frame(TestFrames.arpRequest(from: HomeDevices.scannerMAC, senderIP: scannerV4, for: target)),
                after: .milliseconds(Int64(last) * 8))
        }
        let ports = HomeDevices.scanPorts(self.configuration.scanPorts)
        for host in self.hosts.indices {
            // The proxy sees the SYNs of the hosts it answers ARP for; the others' go to their own MACs.
            guard let state = self.engine.state(of: self.key(host)), state == .asleep || state == .waking,
                !self.hosts[host].nicAnswers
            else { continue }
            let base = UInt16(truncatingIfNeeded: 40000 + self.random.next() % 20000)
            let begin = 2500 + Int64(host) * 100
            for (index, port) in ports.shuffled(using: &self.random).enumerated() {
                let offset = begin + (index < 10 ? Int64(index) * 5 : 50 + Int64(index) * 10)
                for retry in 0..<2 {
                    let syn = TestFrames.tcp(
                        from: HomeDevices.scannerMAC, to: HomeDevices.interface.macAddress, source: HomeDevices.scanner,
                        destination: .v4(HomeDevices.v4(host)), sourcePort: base &+ UInt16(retry * 2), port: port,
                        sequence: UInt32(truncatingIfNeeded: self.random.next()), window: 1024,
                        options: TestFrames.nmapSYNOptions)
                    self.schedule(.frame(syn), after: .milliseconds(offset + Int64(retry) * 250))
                }
            }
        }
        self.schedule(.scan, after: self.configuration.scanInterval)
    }

    /// Every half hour, a legacy unicast question (as dig asks) for each host the proxy holds asleep: each must be
    /// answered.
    mutating func query() {
        for host in self.hosts.indices where self.engine.state(of: self.key(host)) == .asleep {
            self.report.questions += 1
            let question = DNSMessage(id: 99, questions: [DNSQuestion(name: HomeDevices.name(host), type: .a)])
            let began = self.clock.now
            let actions = self.engine.receiveMDNS(
                question.encoded(options: .mdns), from: HomeDevices.person, port: 40000, destination: nil,
                interfaceIndex: HomeDevices.interface.index, now: self.now)
            self.report.engineTime += self.clock.now - began
            self.handle(actions)
            let answered = actions.contains {
                guard case .transmit(let transmission) = $0 else { return false }
                return transmission.message.answers.contains { $0.name == HomeDevices.name(host) && $0.type == .a }
            }
            if !answered { self.report.unanswered += 1 }
        }
        self.schedule(.query, after: .seconds(1800))
    }

    mutating func takeCensus() {
        for (path, count) in EngineCensus.count(self.engine) {
            self.today[path] = max(self.today[path] ?? 0, count)
        }
        let day = self.report.daysRun
        if self.report.heapBytes.indices.contains(day) {
            self.report.heapBytes[day] = max(self.report.heapBytes[day], Int(csp_heap_bytes_in_use()))
        }
    }

    /// Files the day's largest counts into its window, and starts the next day with the same keys at zero.
    mutating func endDay() {
        let day = self.report.daysRun
        if let windows = self.report.windows {
            for (path, count) in self.today {
                if windows.early.contains(day) { self.report.earlyLargest[path, default: 0] += count }
                if windows.late.contains(day) { self.report.lateLargest[path, default: 0] += count }
            }
        }
        for (path, count) in self.today { self.report.lastDay[path] = count }
        for path in self.today.keys { self.today[path] = 0 }
        self.report.daysRun += 1
    }
}
