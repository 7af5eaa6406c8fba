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

    /// Two hosts (the first host and `other.local.`) written to a journal and replayed.
    static func replayOfTwoHosts() throws -> (Registrar, [OwnerRegistration], RegistrationJournal.Replay) {
        var (registrar, first) = try Self.registrarWithFirstHost()
        let second = try Self.acceptOther(&registrar, number: 9, host: "other.local.")
        let base = TimeBase(bootID: Array(repeating: 7, count: 16), now: Lab.t0, wallNanoseconds: 1_000_000_000)
        let bytes =
            RegistrationJournal.encode(.put(first), timeBase: base)
            + RegistrationJournal.encode(.put(second), timeBase: base)
        return (registrar, [first, second], RegistrationJournal.replay(bytes, timeBase: base))
    }

    @Test func aReplayedJournalSharesNamesAcrossHosts() throws {
        let (_, hosts, replay) = try Self.replayOfTwoHosts()
        #expect(replay.registrations.count == 2)
        let type: DNSName = "_http._tcp.local."
        let names = replay.registrations.compactMap { $0.records.first { $0.record.name == type }?.record.name }
        #expect(names.count == 2 && names[0].sharesStorage(with: names[1]))
        #expect(replay.registrations.map(\.records) == hosts.sorted { $0.key < $1.key }.map(\.records))
    }

    /// Restored from the journal, hosts keep the replay's shared buffers as they are (the store does not look their
    /// names up again), and a host registered live after them shares those same buffers.
    @Test func restoredHostsKeepTheReplaysSharedNames() throws {
        let (registrar, _, replay) = try Self.replayOfTwoHosts()
        var engine = ProxyEngine(registrar: Registrar(configuration: registrar.configuration))
        _ = engine.restore(replay.registrations, now: Lab.t0)
        #expect(engine.registrar.store.checkInvariants().isEmpty)
        let type: DNSName = "_http._tcp.local."
        func typeName(_ registration: OwnerRegistration?) -> DNSName? {
            registration?.records.first { $0.record.name == type }?.record.name
        }
        let replayed = try #require(typeName(replay.registrations.first))
        for registration in replay.registrations {
            let stored = try #require(engine.registrations[registration.key])
            #expect(stored == registration)
            #expect(try #require(typeName(stored)).sharesStorage(with: replayed))
        }
        let third = try Self.acceptOther(&engine.registrar, number: 10, host: "third.local.")
        #expect(try #require(typeName(third)).sharesStorage(with: replayed))
    }

    /// A host's own names are shared among its records but not remembered for later hosts; the names hosts have in
    /// common are, and a later host gets their buffers.
    @Test func onlyNamesHostsHaveInCommonAreRemembered() throws {
        var (registrar, first) = try Self.registrarWithFirstHost()
        let second = try Self.acceptOther(&registrar, number: 9, host: "other.local.")
        var interner = NameInterner()
        let a = interner.intern(first)
        let remembered = interner.rememberedCount
        let b = interner.intern(second)
        #expect(interner.rememberedCount == remembered, "the second host's own names are not remembered")
        // What it remembers: every name the first host holds or points at, but for its unique records' names.
        var spellings = Set(a.records.map(\.record.name.description))
        for record in a.records {
            switch record.record.rdata {
            case .ptr(let ptr): spellings.insert(ptr.target.description)
            case .srv(let srv): spellings.insert(srv.target.description)
            default: break
            }
        }
        let own = Set(a.records.filter(\.record.cacheFlush).map(\.record.name.description))
        #expect(remembered == spellings.subtracting(own).count && remembered >= 1)
        // Within a host: its host name is one buffer, SRV target included.
        let hostName: DNSName = "vm.local."
        let named = a.records.map(\.record).filter { $0.name == hostName }.map(\.name)
        let targets = a.records.compactMap { record -> DNSName? in
            if case .srv(let srv) = record.record.rdata { return srv.target } else { return nil }
        }
        #expect(!named.isEmpty && !targets.isEmpty)
        #expect((named + targets).allSatisfy { $0.sharesStorage(with: named[0]) })
        // Across hosts: the service type is the first host's buffer.
        let type: DNSName = "_http._tcp.local."
        let mine = try #require(a.records.first { $0.record.name == type }?.record.name)
        let theirs = try #require(b.records.first { $0.record.name == type }?.record.name)
        #expect(mine.sharesStorage(with: theirs))
    }

    /// The same spelling in a buffer of its own (`Array(storage)` would share the buffer).
    static func copy(_ name: DNSName) -> DNSName { DNSName(uncheckedStorage: name.storage.map { $0 }) }

    /// Shared, a host keeps what its records claim without deriving it again: the same addresses, and its host name
    /// in the buffer its records now use.
    @Test func sharingKeepsTheClaimsWithTheHostNameShared() throws {
        let (_, first) = try Self.registrarWithFirstHost()
        // A copy whose names are all buffers of their own, as the journal's decoding gives them.
        let copied = first.records.map { proxied -> ProxiedRecord in
            var record = proxied.record
            record.name = Self.copy(record.name)
            switch record.rdata {
            case .srv(var srv):
                srv.target = Self.copy(srv.target)
                record.rdata = .srv(srv)
            case .ptr(var ptr):
                ptr.target = Self.copy(ptr.target)
                record.rdata = .ptr(ptr)
            default:
                break
            }
            return ProxiedRecord(record: record, registeredAt: proxied.registeredAt)
        }
        var decoded = first
        decoded.records = copied
        // Derived from the copies, the host name is a reverse mapping's target: not the buffer the records keep.
        #expect(decoded.hostName.map { name in !copied.contains { $0.record.name.sharesStorage(with: name) } } == true)
        var interner = NameInterner()
        let shared = interner.intern(decoded)
        #expect(shared == decoded)
        let derived = OwnerSummary.claims(of: shared.records.map(\.record))
        #expect(shared.addresses == derived.addresses && shared.hostName == derived.hostName)
        let hostName = try #require(shared.hostName)
        let aRecord = try #require(shared.records.first { $0.record.name == hostName }?.record.name)
        #expect(hostName.sharesStorage(with: aRecord), "the claimed host name is the records' buffer")
    }

    /// A host's names are scanned up to `linearLimit`, then kept in a hash table: found alike on both sides, each
    /// spelling kept once, case told apart.
    @Test(arguments: [NameInterner.HostNames.linearLimit, NameInterner.HostNames.linearLimit + 1])
    func aHostsTableFindsEveryNameAtAndPastItsScanLimit(count: Int) throws {
        var table = NameInterner.HostNames()
        let names = try (0..<count).map { try DNSName(parsing: "host-\($0).local.") }
        for name in names {
            #expect(table.find(name) == nil)
            table.add(name)
        }
        #expect(table.count == count)
        for name in names {
            let copy = Self.copy(name)
            let found = try #require(table.find(copy))
            #expect(found.sharesStorage(with: name) && !found.sharesStorage(with: copy))
        }
        #expect(table.find(try DNSName(parsing: "HOST-0.local.")) == nil, "another spelling is another name")
        #expect(table.find(try DNSName(parsing: "host-\(count).local.")) == nil)
    }
}
