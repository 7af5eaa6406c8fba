import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

/// Names a host repeats, and names other hosts hold, share one buffer; spellings are kept.
@Suite("Shared names")
struct NameInternerTests {
    static let eth0 = Lab.eth0

    static func accept(_ registrar: inout Registrar, _ message: DNSMessage, from source: IPAddress) throws
        -> OwnerRegistration
    {
        guard
            case .accepted(let acceptance) = registrar.handle(
                datagram: message.encoded(options: .appleUpdate), from: source, on: Self.eth0, now: Lab.t0)
        else { throw CommandError("not accepted") }
        return acceptance.registration
    }

    /// A registrar that takes hosts from any address, holding the first host (the Apple vector's `vm.local.`).
    static func registrarWithFirstHost() throws -> (Registrar, OwnerRegistration) {
        var configuration = RegistrationConfiguration()
        configuration.requireSourceAmongClaimedAddresses = false
        var registrar = Registrar(configuration: configuration)
        let first = try Self.accept(&registrar, Lab.registration(), from: Lab.hostV4)
        return (registrar, first)
    }

    /// Another host, `name`, from 192.0.2.`number` with a MAC ending in `number`.
    static func acceptOther(
        _ registrar: inout Registrar, number: UInt8, host name: DNSName,
        services: [(String, UInt16)] = [("TestSvc._http._tcp", 8080)]
    ) throws -> OwnerRegistration {
        let address = IPAddress("192.0.2.\(number)")!
        return try Self.accept(
            &registrar,
            Lab.registration(
                mac: MACAddress(rawValue: 0x0253_5000_0000 + UInt64(number)), host: name, addresses: [address],
                services: services),
            from: address)
    }

    @Test func aHostsRepeatedNamesAndOtherHostsNamesShareOneBuffer() throws {
        var (registrar, first) = try Self.registrarWithFirstHost()
        let hostName: DNSName = "vm.local."
        let named = first.records.map(\.record).filter { $0.name == hostName }
        let srvTargets = first.records.compactMap { record -> DNSName? in
            if case .srv(let srv) = record.record.rdata { return srv.target } else { return nil }
        }
        let all = named.map(\.name) + srvTargets
        #expect(all.count >= 3)
        #expect(all.allSatisfy { $0.sharesStorage(with: all[0]) }, "the host name is one buffer")
        // A second host: the shared service-type names are the first host's buffers.
        let second = try Self.acceptOther(&registrar, number: 9, host: "other.local.")
        let type: DNSName = "_http._tcp.local."
        let a = try #require(first.records.first { $0.record.name == type }?.record.name)
        let b = try #require(second.records.first { $0.record.name == type }?.record.name)
        #expect(a.sharesStorage(with: b))
        // The store holds exactly what was returned.
        #expect(registrar.store[second.key] == second)
    }

    @Test func theStoreSharesOnlyNamesSpelledAlikeAndFilesBothSpellingsTogether() throws {
        var (registrar, first) = try Self.registrarWithFirstHost()
        // The second host spells the service type and its instance's type in capitals.
        let second = try Self.acceptOther(
            &registrar, number: 9, host: "other.local.", services: [("Other._HTTP._tcp", 80)])
        let lower: DNSName = "_http._tcp.local."
        let mine = try #require(first.records.first { $0.record.name == lower }?.record.name)
        let theirs = try #require(second.records.first { $0.record.name == lower }?.record.name)
        #expect(mine.description == "_http._tcp.local." && theirs.description == "_HTTP._tcp.local.")
        #expect(!theirs.sharesStorage(with: mine), "a host's own spelling is what it gets back")
        // One index entry for both spellings (names compare without case), both hosts' PTRs under it.
        #expect(
            Set(registrar.store.records(named: "_Http._TCP.local.", on: "eth0").map(\.0)) == [first.key, second.key])
        #expect(registrar.store.checkInvariants().isEmpty)
        // A third host spelling it as the first did gets the first host's buffer.
        let third = try Self.acceptOther(&registrar, number: 10, host: "third.local.")
        let thirds = try #require(third.records.first { $0.record.name == lower }?.record.name)
        #expect(thirds.sharesStorage(with: mine))
        #expect(registrar.store[third.key] == third)
    }

    @Test func aNameSpelledDifferentlyKeepsItsOwnSpelling() throws {
        var interner = NameInterner()
        let lower: DNSName = "nas.local."
        let upper: DNSName = "NAS.local."
        #expect(interner.canonical(lower).sharesStorage(with: lower))
        let other = interner.canonical(upper)
        #expect(other.description == "NAS.local." && !other.sharesStorage(with: lower))
        // Already shared: the registration comes back as it was, not copied.
        let registration = OwnerRegistration(
            key: OwnerKey(interface: "eth0", primaryMAC: Lab.hostMAC),
            owner: OwnerOption(sequence: 0, primaryMAC: Lab.hostMAC),
            records: [
                ProxiedRecord(
                    record: DNSResourceRecord(
                        name: lower, cacheFlush: true, ttl: 120, rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 2)))),
                    registeredAt: Lab.t0)
            ], registeredAt: Lab.t0, updatedAt: Lab.t0, leaseExpiry: Lab.t0, grantedLease: 7200, lastMessageID: 1)
        let again = interner.intern(registration)
        #expect(again.records[0].record.name.sharesStorage(with: lower))
        #expect(again == registration)
    }

    @Test func aReplayedJournalSharesNamesAcrossHosts() throws {
        var (registrar, first) = try Self.registrarWithFirstHost()
        let second = try Self.acceptOther(&registrar, number: 9, host: "other.local.")
        let base = TimeBase(bootID: Array(repeating: 7, count: 16), now: Lab.t0, wallNanoseconds: 1_000_000_000)
        let bytes =
            RegistrationJournal.encode(.put(first), timeBase: base)
            + RegistrationJournal.encode(.put(second), timeBase: base)
        let replay = RegistrationJournal.replay(bytes, timeBase: base)
        #expect(replay.registrations.count == 2)
        let type: DNSName = "_http._tcp.local."
        let names = replay.registrations.compactMap { $0.records.first { $0.record.name == type }?.record.name }
        #expect(names.count == 2 && names[0].sharesStorage(with: names[1]))
        #expect(replay.registrations.map(\.records) == [first, second].sorted { $0.key < $1.key }.map(\.records))
    }
}
