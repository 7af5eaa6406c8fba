import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

extension RegistrarTests {
    // MARK: Epochs, merging and expiry, with explicit times

    @Test func partsOfOneRegistrationMergeAndAreEachAnswered() throws {
        var registrar = Registrar()
        let first = Lab.registration(id: 0x55, services: [("A._http._tcp", 80)])
        var second = Lab.registration(id: 0x55, services: [("B._ssh._tcp", 22)])
        second.updates.removeAll { ReverseMapping.address(from: $0.name) != nil }
        _ = try self.accept(&registrar, first)
        let merged = try self.accept(&registrar, second, now: Lab.t0 + .milliseconds(10)).registration
        #expect(merged.summary.services.map(\.port) == [80, 22])
        #expect(merged.registeredAt == Lab.t0)
        #expect(merged.updatedAt == Lab.t0 + .milliseconds(10))
        // The shared records of both parts (host name, _services PTR) are not duplicated.
        #expect(merged.records.count == Set(merged.records.map { "\($0.record.name)|\($0.record.rdata)" }).count)
        #expect(registrar.store.checkInvariants().isEmpty)
    }

    @Test func newSequenceReplacesTheWholeSet() throws {
        var registrar = Registrar()
        _ = try self.accept(&registrar, Lab.registration(sequence: 3, services: [("A._http._tcp", 80)]))
        let acceptance = try self.accept(
            &registrar, Lab.registration(id: 2, sequence: 4, services: [("B._ssh._tcp", 22)]),
            now: Lab.t0 + .seconds(3600))
        #expect(acceptance.startedNewEpoch)
        #expect(acceptance.replaced?.owner.sequence == 3)
        #expect(acceptance.registration.summary.services.map(\.port) == [22])
        #expect(acceptance.registration.registeredAt == Lab.t0 + .seconds(3600))
        #expect(registrar.store.records(named: "A._http._tcp.local.", on: "eth0").isEmpty)
    }

    @Test func keepaliveRecordsAreReplacedByEachNewRegistration() throws {
        func keepalive(_ n: Int) -> DNSResourceRecord {
            let text = Array("t=7200 h=192.0.2.2 d=192.0.2.50 l=\(1000 + n) r=443 s=1 a=1 w=100".utf8) + [0]
            return DNSResourceRecord(
                name: try! DNSName(parsing: "\(n)._keepalive._dns-sd._udp.local."), cacheFlush: true, ttl: 4500,
                rdata: .null(try! NULLRecord(data: [UInt8(text.count)] + text)))
        }
        var registrar = Registrar()
        _ = try self.accept(&registrar, Lab.registration(id: 1, extra: [keepalive(1)]))
        // A second part with the same ID keeps the first part's keepalive.
        #expect(
            try self.accept(&registrar, Lab.registration(id: 1, extra: [keepalive(2)])).registration.summary.keepalives
                .count == 2)
        // A renewal (new ID, same sequence) replaces them.
        let renewed = try self.accept(
            &registrar, Lab.registration(id: 2, extra: [keepalive(3)]), now: Lab.t0 + .seconds(600)
        ).registration
        #expect(renewed.summary.keepalives.map(\.localPort) == [1003])
        #expect(renewed.summary.keepalives[0].isComplete)
        #expect(renewed.summary.keepalives[0].remoteAddress == IPAddress("192.0.2.50"))
    }

    @Test func ttlsAreCappedAndZeroGetsTheDefault() throws {
        var registrar = Registrar()
        var message = Lab.registration()
        message.updates = message.updates.map { record in
            var record = record
            record.ttl = record.type == .txt ? 0 : (record.type == .a ? 0 : 100_000)
            return record
        }
        let records = try self.accept(&registrar, message).registration.records.map(\.record)
        #expect(records.first { $0.type == .txt }?.ttl == 4500)
        #expect(records.first { $0.type == .a }?.ttl == 120)
        #expect(records.first { $0.type == .srv }?.ttl == 4500)
    }

    @Test func leasesExpireInOrderAtTheirTime() throws {
        var registrar = Registrar()
        let hostA = IPAddress("192.0.2.11")!
        let hostB = IPAddress("192.0.2.12")!
        _ = try self.accept(
            &registrar, Lab.registration(mac: MACAddress(rawValue: 0x0253_5000_0011), lease: 600, addresses: [hostA]),
            from: hostA)
        _ = try self.accept(
            &registrar, Lab.registration(mac: MACAddress(rawValue: 0x0253_5000_0012), lease: 300, addresses: [hostB]),
            from: hostB)
        #expect(registrar.nextDeadline() == Lab.t0 + .seconds(300))
        #expect(registrar.expire(now: Lab.t0 + .seconds(299)).isEmpty)
        let expired = registrar.expire(now: Lab.t0 + .seconds(300))
        #expect(expired.map(\.registration.addresses) == [[hostB]])
        #expect(expired.map(\.action) == [.wake])
        #expect(registrar.nextDeadline() == Lab.t0 + .seconds(600))
        // A renewal pushes the expiry out; the old heap entry must not expire the host early.
        _ = try self.accept(
            &registrar,
            Lab.registration(id: 9, mac: MACAddress(rawValue: 0x0253_5000_0011), lease: 600, addresses: [hostA]),
            from: hostA, now: Lab.t0 + .seconds(500))
        #expect(registrar.expire(now: Lab.t0 + .seconds(600)).isEmpty)
        #expect(registrar.nextDeadline() == Lab.t0 + .seconds(1100))
        #expect(registrar.expire(now: Lab.t0 + .seconds(1100)).count == 1)
        #expect(registrar.store.hostCount == 0 && registrar.store.recordCount == 0)
        #expect(registrar.nextDeadline() == nil)
        #expect(registrar.store.checkInvariants().isEmpty)
    }

    @Test func expiryActionIsConfigurable() throws {
        var registrar = Registrar(configuration: RegistrationConfiguration(expiryAction: .dropWithGoodbyes))
        _ = try self.accept(&registrar, Lab.registration(lease: 60))
        let expired = registrar.expire(now: Lab.t0 + .seconds(60))
        #expect(expired.map(\.action) == [.dropWithGoodbyes])
        // The records travel with the expiry, for the goodbyes, and the wake MAC for a magic packet.
        #expect(expired.first?.registration.records.count == 8)
        #expect(expired.first?.registration.owner.effectiveWakeMAC == Lab.hostMAC)
    }

    @Test func reverseMappingNames() {
        #expect(ReverseMapping.address(from: "2.2.0.192.in-addr.arpa.") == IPAddress("192.0.2.2"))
        #expect(ReverseMapping.address(from: "2.2.0.192.IN-ADDR.ARPA.") == IPAddress("192.0.2.2"))
        #expect(ReverseMapping.address(from: "x.2.2.0.192.in-addr.arpa.") == nil)
        #expect(ReverseMapping.address(from: "256.2.0.192.in-addr.arpa.") == nil)
        #expect(ReverseMapping.address(from: "02.2.0.192.in-addr.arpa.") == nil)
        let v6 = ReverseMapping.name(for: Lab.hostV6)
        #expect(v6.labelStrings[0] == "2" && v6.labelStrings[6] == "E")
        #expect(ReverseMapping.address(from: v6) == Lab.hostV6)
        #expect(ReverseMapping.address(from: v6.lowercased) == Lab.hostV6)
        #expect(
            ReverseMapping.address(from: ReverseMapping.name(for: IPAddress("198.51.100.200")!))
                == IPAddress("198.51.100.200"))
    }

    /// The store files each owner of a name as unique or shared, so conflict checks (unique records only, RFC 6762
    /// §9) look at one host for a host's own names and at none for a service type that a thousand hosts share.
    @Test func namesAreFiledByUniqueAndSharedOwners() throws {
        var registrar = Registrar(
            configuration: RegistrationConfiguration(
                maximumRecords: 100_000, maximumHosts: 10_000, requireSourceAmongClaimedAddresses: false,
                rateLimitBurst: 1 << 30, rateLimitPerSecond: 1 << 30))
        for n in 0..<1_000 {
            let message = Lab.registration(
                id: UInt16(n), mac: MACAddress(rawValue: 0x0253_5000_3000 + UInt64(n)),
                host: try! DNSName(parsing: "h\(n).local."),
                addresses: [.v6(IPv6Address(high: 0x2001_0DB8_0000_0000, low: 0x3000 + UInt64(n)))],
                services: [("Host \(n)._http._tcp", 80)])
            _ = registrar.handle(
                datagram: message.encoded(options: .appleUpdate), from: Lab.hostV4, on: Lab.eth0,
                now: Lab.t0 + .milliseconds(Int64(n)))
        }
        let store = registrar.store
        #expect(store.hostCount == 1_000)
        #expect(store.records(named: "_http._tcp.local.", on: "eth0").count == 1_000)
        #expect(store.records(named: "_http._tcp.local.", on: "eth0", uniqueOnly: true).isEmpty)
        let own = store.records(named: "Host 7._http._tcp.local.", on: "eth0", uniqueOnly: true)
        #expect(own.count == 2 && own.allSatisfy { $0.0.primaryMAC == MACAddress(rawValue: 0x0253_5000_3007) })
        #expect(store.records(named: "h7.local.", on: "eth0", uniqueOnly: true).count == 1)
        #expect(store.records(named: "h7.local.", on: "eth1").isEmpty)
        #expect(store.checkInvariants().isEmpty)

        // The same names with the cache-flush bit turned off: filed as shared now, not left behind as unique.
        var flipped = store
        var owner = flipped[OwnerKey(interface: "eth0", primaryMAC: MACAddress(rawValue: 0x0253_5000_3007))]!
        owner.records = owner.records.map { record in
            var record = record
            record.record.cacheFlush = false
            return record
        }
        flipped.upsert(owner)
        #expect(flipped.records(named: "Host 7._http._tcp.local.", on: "eth0", uniqueOnly: true).isEmpty)
        #expect(flipped.records(named: "Host 7._http._tcp.local.", on: "eth0").count == 2)
        #expect(flipped.checkInvariants().isEmpty)
        let services = DNSResourceRecord(
            name: "_services._dns-sd._udp.local.", ttl: 4500, rdata: .ptr(PTRRecord(target: "_http._tcp.local.")))
        let seven = DNSResourceRecord(
            name: "_http._tcp.local.", ttl: 4500, rdata: .ptr(PTRRecord(target: "Host 7._http._tcp.local.")))
        #expect(flipped.holdsIdentical(services, on: "eth0") && flipped.holdsIdentical(seven, on: "eth0"))
        #expect(!flipped.holdsIdentical(services, on: "eth1"))
        let eight = try #require(flipped.records(named: "h8.local.", on: "eth0").first?.1.record)
        var notEight = eight
        notEight.rdata = .a(ARecord(address: IPv4Address(192, 0, 2, 99)))
        #expect(flipped.holdsIdentical(eight, on: "eth0") && !flipped.holdsIdentical(notEight, on: "eth0"))
        flipped.remove(owner.key)
        #expect(!flipped.holdsIdentical(seven, on: "eth0") && flipped.holdsIdentical(services, on: "eth0"))
        #expect(flipped.records(named: "Host 7._http._tcp.local.", on: "eth0").isEmpty)
        #expect(flipped.records(named: "_http._tcp.local.", on: "eth0").count == 999)
        #expect(flipped.checkInvariants().isEmpty)
    }
}
