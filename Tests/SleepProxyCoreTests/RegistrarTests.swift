import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

@Suite("Registrar")
struct RegistrarTests {
    func accept(
        _ registrar: inout Registrar, _ message: DNSMessage, from source: IPAddress = Lab.hostV4,
        now: Timestamp = Lab.t0
    ) throws -> Acceptance {
        let outcome = registrar.handle(
            datagram: message.encoded(options: .appleUpdate), from: source, on: Lab.eth0, now: now)
        guard case .accepted(let acceptance) = outcome else {
            Issue.record("expected acceptance, got \(outcome)")
            throw CancellationError()
        }
        return acceptance
    }

    // MARK: The real Apple registration

    @Test func appleVectorIsAcceptedWithApplesReply() throws {
        var registrar = Registrar()
        let bytes = try Lab.appleVectorBytes()
        let outcome = registrar.handle(datagram: bytes, from: Lab.hostV4, on: Lab.eth0, now: Lab.t0)
        guard case .accepted(let acceptance) = outcome else {
            Issue.record("\(outcome)")
            return
        }
        // docs/protocol.md §3.6, byte for byte after the ID.
        let expected: [UInt8] = [
            0xDC, 0x65, 0xA8, 0x00, 0, 0, 0, 0, 0, 0, 0, 1,
            0x00, 0x00, 0x29, 0x05, 0xA0, 0x00, 0x00, 0x11, 0x94, 0x00, 0x08,
            0x00, 0x02, 0x00, 0x04, 0x00, 0x00, 0x1C, 0x20,
        ]
        #expect(acceptance.reply == expected)
        #expect(acceptance.grantedLease == 7200)
        #expect(acceptance.startedNewEpoch)
        let registration = acceptance.registration
        #expect(registration.key == OwnerKey(interface: "eth0", primaryMAC: Lab.hostMAC))
        #expect(registration.records.count == 8)
        #expect(registration.leaseExpiry == Lab.t0 + .seconds(7200))
        let summary = registration.summary
        #expect(summary.hostName == "vm.local.")
        #expect(summary.addresses == [Lab.hostV4, Lab.hostV6])
        #expect(summary.unconfirmedAddresses.isEmpty)
        #expect(summary.services.count == 1)
        #expect(summary.services[0].port == 8080 && summary.services[0].transport == .tcp)
        #expect(summary.services[0].txt == [Array("path=/x".utf8)])
        #expect(registrar.store.hostCount == 1 && registrar.store.recordCount == 8)
        #expect(registrar.store.owner(claiming: Lab.hostV6, on: "eth0") == registration.key)
        #expect(registrar.store.records(named: "VM.LOCAL.", on: "eth0").count == 2)
        #expect(registrar.store.checkInvariants().isEmpty)
    }

    @Test func servicePortsAreTheSummarysServices() throws {
        // What the takeover derives for every registration must be what the summary says, transport included:
        // either case of `_tcp`/`_udp`, anything else (or too few labels) without one.
        let names: [(DNSName, UInt16)] = [
            ("Web._http._tcp.local.", 80), ("Stream._rtp._UDP.local.", 5004), ("Odd._x._sctp.local.", 9),
            ("short.local.", 1), ("Tcp._http._tcpx.local.", 8), ("Near._x._tcq.local.", 3),
            ("Mixed._smb._TcP.local.", 445), ("Plain._x.xtcp.local.", 4), ("Mixed._x._uDp.local.", 53),
        ]
        let records = names.map { name, port in
            ProxiedRecord(
                record: DNSResourceRecord(
                    name: name, cacheFlush: true, ttl: 120, rdata: .srv(SRVRecord(port: port, target: "h.local."))),
                registeredAt: Lab.t0)
        }
        let registration = OwnerRegistration(
            key: OwnerKey(interface: "eth0", primaryMAC: Lab.hostMAC),
            owner: OwnerOption(sequence: 0, primaryMAC: Lab.hostMAC), records: records, registeredAt: Lab.t0,
            updatedAt: Lab.t0, leaseExpiry: Lab.t0, grantedLease: 7200, lastMessageID: 1)
        let fromSummary = registration.summary.services.map { "\($0.transport.map(\.rawValue) ?? "-")/\($0.port)" }
        let direct = registration.servicePorts.map { "\($0.transport.map(\.rawValue) ?? "-")/\($0.port)" }
        #expect(direct.sorted() == fromSummary.sorted())
        #expect(direct.sorted() == ["-/1", "-/3", "-/4", "-/8", "-/9", "tcp/445", "tcp/80", "udp/5004", "udp/53"])
    }

    @Test func replyUsesTheLeaseFormOfTheRequestAndClamps() throws {
        var registrar = Registrar()
        var message = Lab.registration(lease: 200_000)
        message.additionals = [
            .opt(
                EDNSHeader(udpPayloadSize: 1440),
                options: [
                    .updateLease(UpdateLeaseOption(lease: 200_000, keyLease: 30 * 86_400)),
                    .owner(OwnerOption(sequence: 0, primaryMAC: Lab.hostMAC)),
                ])
        ]
        let acceptance = try self.accept(&registrar, message)
        #expect(acceptance.grantedLease == 86_400)
        let reply = try DNSMessage(decoding: acceptance.reply)
        #expect(reply.ednsOptions?.updateLease == UpdateLeaseOption(lease: 86_400, keyLease: 7 * 86_400))
        // Below the minimum: raised to 30 s (RFC 9664 §8).
        var short = Registrar()
        #expect(try self.accept(&short, Lab.registration(lease: 5)).grantedLease == 30)
    }

    @Test func zoneSectionOfDotOrLocalIsAccepted() throws {
        for zone in [DNSName.root, "local."] {
            var registrar = Registrar()
            var message = Lab.registration()
            message.zone = [DNSQuestion(name: zone, type: .soa)]
            _ = try self.accept(&registrar, message)
        }
    }

    // MARK: Malformed and refused variants leave the store unchanged

    /// Each variant is sent to a registrar that already holds one host, and must leave it exactly as it was.
    func expectUnchanged(
        _ bytes: [UInt8], source: IPAddress = Lab.hostV4,
        configuration: RegistrationConfiguration = RegistrationConfiguration(),
        sourceLocation: SourceLocation = #_sourceLocation, _ check: (RegistrationOutcome) -> Bool
    ) throws {
        var registrar = Registrar(configuration: configuration)
        let other = Lab.registration(mac: MACAddress("02:53:50:00:00:09")!, addresses: [IPAddress("192.0.2.9")!])
        _ = try self.accept(&registrar, other, from: IPAddress("192.0.2.9")!)
        let before = registrar.store.owners
        let outcome = registrar.handle(datagram: bytes, from: source, on: Lab.eth0, now: Lab.t0 + .seconds(1))
        #expect(check(outcome), "unexpected outcome \(outcome)", sourceLocation: sourceLocation)
        #expect(registrar.store.owners == before, sourceLocation: sourceLocation)
        #expect(registrar.store.checkInvariants().isEmpty)
    }

    func formErr(_ problem: RegistrationProblem) -> (RegistrationOutcome) -> Bool {
        { outcome in
            guard case .malformed(let actual, let reply) = outcome, actual == problem else { return false }
            // FORMERR: ID echoed, QR + UPDATE + RCODE 1, nothing else (docs/protocol.md §3.6: ADCOUNT 0 on error).
            return reply == [0x12, 0x34, 0xA8, 0x01, 0, 0, 0, 0, 0, 0, 0, 0]
        }
    }

    func withOptions(_ options: [EDNSOption]) -> [UInt8] {
        var message = Lab.registration()
        message.additionals = [.opt(EDNSHeader(udpPayloadSize: 1440), options: options)]
        return message.encoded()
    }

    @Test func missingOrInvalidEDNSIsFormErr() throws {
        let lease = EDNSOption.updateLease(UpdateLeaseOption(lease: 7200))
        let owner = EDNSOption.owner(OwnerOption(sequence: 0, primaryMAC: Lab.hostMAC))
        try self.expectUnchanged(self.withOptions([owner]), self.formErr(.missingLease))
        try self.expectUnchanged(self.withOptions([lease]), self.formErr(.missingOwner))
        try self.expectUnchanged(
            self.withOptions([.updateLease(UpdateLeaseOption(lease: 0)), owner]), self.formErr(.zeroLease))
        try self.expectUnchanged(
            self.withOptions([.unknown(code: 2, data: [0, 0, 0x1C, 0x20, 0, 0]), owner]), self.formErr(.badLease))
        try self.expectUnchanged(
            self.withOptions([lease, .owner(OwnerOption(version: 1, sequence: 0, primaryMAC: Lab.hostMAC))]),
            self.formErr(.ownerVersion))
        try self.expectUnchanged(
            self.withOptions([lease, .unknown(code: 4, data: [0, 0] + Lab.hostMAC.bytes + [0, 0, 0, 0])]),
            self.formErr(.badOwner))
        try self.expectUnchanged(
            self.withOptions([lease, .owner(OwnerOption(sequence: 0, primaryMAC: .zero))]), self.formErr(.ownerMAC))
        try self.expectUnchanged(
            self.withOptions([lease, .owner(OwnerOption(sequence: 0, primaryMAC: Lab.hostMAC, wakeMAC: .broadcast))]),
            self.formErr(.ownerMAC))
        var noOPT = Lab.registration()
        noOPT.additionals = []
        try self.expectUnchanged(noOPT.encoded(), self.formErr(.missingOPT))
        var twoOPTs = Lab.registration()
        twoOPTs.additionals += twoOPTs.additionals
        try self.expectUnchanged(twoOPTs.encoded(), self.formErr(.badOPT))
    }

    @Test func eightByteLeaseIsAcceptedUnlikeApple() throws {
        // Apple's proxy ignores the RFC 9664 8-byte form and answers FormErr; we accept it and answer in kind.
        var registrar = Registrar()
        var message = Lab.registration()
        message.additionals = [
            .opt(
                EDNSHeader(udpPayloadSize: 1440),
                options: [
                    .updateLease(UpdateLeaseOption(lease: 3600, keyLease: 3600)),
                    .owner(OwnerOption(sequence: 0, primaryMAC: Lab.hostMAC)),
                ])
        ]
        let reply = try DNSMessage(decoding: try self.accept(&registrar, message).reply)
        #expect(reply.ednsOptions?.updateLease?.keyLease == 3600)
    }

    @Test func sectionsAndOpcodeVariants() throws {
        var twoZones = Lab.registration()
        twoZones.zone = [DNSQuestion(name: .root, type: .soa), DNSQuestion(name: "local.", type: .soa)]
        try self.expectUnchanged(twoZones.encoded(), self.formErr(.badZone))
        var otherZone = Lab.registration()
        otherZone.zone = [DNSQuestion(name: "example.", type: .soa)]
        try self.expectUnchanged(otherZone.encoded(), self.formErr(.badZone))

        var deletion = Lab.registration()
        deletion.updates.append(
            DNSResourceRecord(
                name: "vm.local.", rrclass: .any, ttl: 0, rdata: .unknown(try UnknownRecord(type: .a, data: []))))
        try self.expectUnchanged(deletion.encoded(), self.formErr(.deletion))
        var deleteOne = Lab.registration()
        deleteOne.updates[0].rrclass = .none
        try self.expectUnchanged(deleteOne.encoded(), self.formErr(.deletion))
        var chaos = Lab.registration()
        chaos.updates[0].rrclass = DNSClass(rawValue: 3)
        try self.expectUnchanged(chaos.encoded(), self.formErr(.badClass))
        var empty = Lab.registration()
        empty.updates = []
        try self.expectUnchanged(empty.encoded(), self.formErr(.noRecords))
        var optInUpdates = Lab.registration()
        optInUpdates.updates.append(optInUpdates.additionals[0])
        try self.expectUnchanged(optInUpdates.encoded(), self.formErr(.optInUpdateSection))

        var query = Lab.registration()
        query.flags.opcode = .query
        try self.expectUnchanged(query.encoded()) { outcome in
            guard case .notImplemented(.query, let reply) = outcome else { return false }
            return reply == [0x12, 0x34, 0x80, 0x04, 0, 0, 0, 0, 0, 0, 0, 0]
        }
        var response = Lab.registration()
        response.flags.isResponse = true
        try self.expectUnchanged(response.encoded()) { $0 == .ignored(.response) }
        try self.expectUnchanged([0x12, 0x34, 0x28]) { $0 == .ignored(.tooShort) }
        let full = Lab.registration().encoded()
        for cut in [12, 20, full.count / 2, full.count - 1] {
            try self.expectUnchanged(Array(full[..<cut]), self.formErr(.undecodable))
        }
    }

    // MARK: Security rules, each both ways

    func refused(_ refusal: RegistrationRefusal) -> (RegistrationOutcome) -> Bool {
        { $0 == .refused(refusal, reply: nil) }
    }

    @Test func sourceMustBeOnLink() throws {
        try self.expectUnchanged(
            Lab.registration().encoded(), source: IPAddress("198.51.100.7")!, self.refused(.sourceNotOnLink))
        // An IPv6 link-local source is on-link, and accepted when it is one of the claims.
        var registrar = Registrar()
        _ = try self.accept(&registrar, Lab.registration(), from: Lab.hostV6)
    }

    @Test func claimsMustLieOnTheInterface() throws {
        let offLink = Lab.registration(addresses: [Lab.hostV4, IPAddress("198.51.100.2")!])
        try self.expectUnchanged(offLink.encoded(), self.refused(.claimOutsideInterface))
        var registrar = Registrar()
        _ = try self.accept(&registrar, Lab.registration(addresses: [Lab.hostV4, IPAddress("2001:db8::2")!]))
    }

    @Test func sourceMustBeAClaimUnlessConfiguredForPeerProxies() throws {
        let message = Lab.registration()
        try self.expectUnchanged(message.encoded(), source: IPAddress("192.0.2.50")!, self.refused(.sourceNotClaimed))
        var peer = Registrar(configuration: RegistrationConfiguration(requireSourceAmongClaimedAddresses: false))
        _ = try self.accept(&peer, message, from: IPAddress("192.0.2.50")!)
    }

    @Test func claimsMustNotBeTheProxysOrAnotherHosts() throws {
        let proxyAddress = Lab.registration(addresses: [IPAddress("192.0.2.1")!])
        try self.expectUnchanged(
            proxyAddress.encoded(), source: IPAddress("192.0.2.1")!, self.refused(.claimsProxyAddress))
        // 192.0.2.9 is held by the host expectUnchanged registers first.
        let stolen = Lab.registration(addresses: [Lab.hostV4, IPAddress("192.0.2.9")!])
        try self.expectUnchanged(stolen.encoded(), self.refused(.claimsOtherHostAddress))
        // The same host re-registering the address it holds is fine.
        var registrar = Registrar()
        _ = try self.accept(&registrar, Lab.registration())
        _ = try self.accept(&registrar, Lab.registration(id: 9))
    }

    @Test func refusalsCanBeAnsweredWithREFUSED() throws {
        let configuration = RegistrationConfiguration(refusalReply: .refused)
        try self.expectUnchanged(
            Lab.registration().encoded(), source: IPAddress("198.51.100.7")!, configuration: configuration
        ) { outcome in
            outcome == .refused(.sourceNotOnLink, reply: [0x12, 0x34, 0xA8, 0x05, 0, 0, 0, 0, 0, 0, 0, 0])
        }
    }

    // MARK: Limits at N and N+1

    /// A registration with exactly `count` records (the standard 10 plus TXT padding records).
    func registration(records count: Int, mac: MACAddress = Lab.hostMAC, address: IPAddress = Lab.hostV4) -> DNSMessage
    {
        let base = Lab.registration(mac: mac, addresses: [address])
        let padding = (0..<max(0, count - base.updates.count)).map { index in
            DNSResourceRecord(
                name: try! DNSName(parsing: "pad\(index).vm.local."), cacheFlush: true, ttl: 4500, rdata: .txt(.empty))
        }
        var message = base
        message.updates += padding
        precondition(message.updates.count == count)
        return message
    }

    @Test func perHostRecordLimit() throws {
        let configuration = RegistrationConfiguration(maximumRecordsPerHost: 20)
        var registrar = Registrar(configuration: configuration)
        _ = try self.accept(&registrar, self.registration(records: 20))
        try self.expectUnchanged(
            self.registration(records: 21).encoded(), configuration: configuration, self.refused(.tooManyRecordsForHost)
        )
    }

    @Test func totalRecordLimit() throws {
        let configuration = RegistrationConfiguration(maximumRecords: 6 + 20)  // expectUnchanged's host holds 6
        var registrar = Registrar(configuration: configuration)
        _ = try self.accept(
            &registrar, Lab.registration(mac: MACAddress("02:53:50:00:00:09")!, addresses: [IPAddress("192.0.2.9")!]),
            from: IPAddress("192.0.2.9")!)
        _ = try self.accept(&registrar, self.registration(records: 20))
        try self.expectUnchanged(
            self.registration(records: 21).encoded(), configuration: configuration, self.refused(.tooManyRecords))
    }

    @Test func hostLimit() throws {
        let configuration = RegistrationConfiguration(maximumHosts: 2)
        var registrar = Registrar(configuration: configuration)
        for n in 1...2 {
            let address = IPAddress("192.0.2.\(10 + n)")!
            _ = try self.accept(
                &registrar,
                Lab.registration(mac: MACAddress(rawValue: 0x0253_5000_0100 + UInt64(n)), addresses: [address]),
                from: address)
        }
        let third = IPAddress("192.0.2.13")!
        let outcome = registrar.handle(
            datagram: Lab.registration(mac: MACAddress(rawValue: 0x0253_5000_0103), addresses: [third]).encoded(),
            from: third, on: Lab.eth0, now: Lab.t0)
        #expect(outcome == .refused(.tooManyHosts, reply: nil))
        #expect(registrar.store.hostCount == 2)
        // An existing host may still renew at the limit.
        let first = IPAddress("192.0.2.11")!
        _ = try self.accept(
            &registrar, Lab.registration(id: 77, mac: MACAddress(rawValue: 0x0253_5000_0101), addresses: [first]),
            from: first)
    }

    @Test func rateLimitAllowsTheBurstThenRefuses() throws {
        var registrar = Registrar(configuration: RegistrationConfiguration(rateLimitBurst: 5, rateLimitPerSecond: 1))
        let bytes = Lab.registration().encoded()
        for _ in 0..<5 {
            guard case .accepted = registrar.handle(datagram: bytes, from: Lab.hostV4, on: Lab.eth0, now: Lab.t0) else {
                Issue.record("within the burst")
                return
            }
        }
        #expect(
            registrar.handle(datagram: bytes, from: Lab.hostV4, on: Lab.eth0, now: Lab.t0)
                == .refused(.rateLimited, reply: nil))
        // Another source is not affected; one second later one more is allowed.
        #expect(
            registrar.handle(datagram: bytes, from: IPAddress("192.0.2.77")!, on: Lab.eth0, now: Lab.t0)
                == .refused(.sourceNotClaimed, reply: nil))
        guard
            case .accepted = registrar.handle(
                datagram: bytes, from: Lab.hostV4, on: Lab.eth0, now: Lab.t0 + .seconds(1))
        else {
            Issue.record("refilled")
            return
        }
        #expect(registrar.statistics.refused[.rateLimited] == 1)
    }

    @Test func rateLimiterTracksABoundedNumberOfSources() {
        var limiter = RateLimiter(burst: 2, perSecond: 1)
        let now = Lab.t0
        for n in 0..<RateLimiter.maximumTrackedSources {
            let allowed = limiter.allow(.v6(IPv6Address(high: 0x2001_0DB8_0000_0000, low: UInt64(n))), now: now)
            #expect(allowed)
        }
        #expect(limiter.trackedSources == RateLimiter.maximumTrackedSources)
        // One more source while every bucket is in use: the longest-idle one is forgotten, the table stays at N.
        let newcomer = limiter.allow(.v6(IPv6Address(high: 0x2001_0DB8_0000_0001, low: 0)), now: now)
        #expect(newcomer)
        #expect(limiter.trackedSources == RateLimiter.maximumTrackedSources)
        // A second later every bucket has refilled: forgetting them loses nothing, and they all go.
        let later = limiter.allow(.v6(IPv6Address(high: 0x2001_0DB8_0000_0002, low: 0)), now: now + .seconds(1))
        #expect(later)
        #expect(limiter.trackedSources == 1)
    }
}
