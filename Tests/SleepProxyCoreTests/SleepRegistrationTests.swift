import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

/// The registration the Linux sleep client sends, checked against Apple's own and against the rules
/// Apple's proxy applies to what it receives (docs/protocol.md §3.1-3.3).
@Suite("Sleep client registration")
struct SleepRegistrationTests {
    static let vectorLike = SleepRegistration(
        hostName: "vm.local.", addresses: [Lab.hostV4, Lab.hostV6],
        services: [
            SleepRegistration.Service(
                instance: "TestSvc._http._tcp.local.", port: 8080, txt: try! TXTRecord(["path=/x"]))
        ],
        owner: OwnerOption(sequence: 0, primaryMAC: Lab.hostMAC), lease: 7200)

    @Test func theSameRecordsEncodeLikeApplesRegistrationFieldByField() throws {
        let messages = Self.vectorLike.messages(id: 0xDC65)
        #expect(messages.count == 1)
        let ours = messages[0].encoded(options: .appleUpdate)
        let apple = try Lab.appleVectorBytes()
        // Same size, same bytes but for where a compression pointer points (Apple's points at the latest copy of
        // "vm.local", ours at the first: both decode to the same name).
        #expect(ours.count == apple.count)
        #expect(zip(ours, apple).filter { $0 != $1 }.count <= 2)
        let theirs = try DNSMessage(decoding: apple)
        #expect(try DNSMessage(decoding: ours) == theirs)
        #expect(messages[0].updates == theirs.updates)
        #expect(messages[0].flags == theirs.flags && messages[0].zone.isEmpty && messages[0].opt == theirs.opt)
    }

    @Test func whatApplesProxyChecksHolds() throws {
        let password = try #require(SecureOnPassword(bytes: [1, 2, 3, 4, 5, 6]))
        for owner in [
            OwnerOption(sequence: 3, primaryMAC: Lab.hostMAC),
            OwnerOption(sequence: 3, primaryMAC: Lab.hostMAC, wakeMAC: Lab.hostMAC, password: password),
        ] {
            var registration = Self.vectorLike
            registration.owner = owner
            let bytes = registration.messages(id: 7)[0].encoded(options: .appleUpdate)
            let message = try DNSMessage(decoding: bytes)
            #expect(message.zone.isEmpty && message.flags.opcode == .update)
            guard case .opt(let opt) = message.opt?.rdata else { Issue.record("no OPT"); continue }
            // §3.1: OPT rdata ≥ 20 bytes; §3.2: Lease of exactly 4; §3.3: Owner of 8 or 14 (with password 20), version 0.
            let rdataLength = opt.options.reduce(0) { $0 + 4 + $1.data.count }
            #expect(rdataLength >= 20)
            #expect(opt.options.first { $0.code == 2 }?.data.count == 4)
            let ownerLength = opt.options.first { $0.code == 4 }?.data.count
            #expect(ownerLength == (owner.password == nil ? 8 : 20))
            #expect(message.ednsOptions?.owner?.version == 0 && message.ednsOptions?.owner?.sequence == 3)
            #expect(message.opt?.rrclass.rawValue == 1440)
            // Our own proxy accepts it.
            var registrar = Registrar(
                configuration: {
                    var c = RegistrationConfiguration(); c.requireSourceAmongClaimedAddresses = false; return c
                }())
            guard case .accepted = registrar.handle(datagram: bytes, from: Lab.hostV4, on: Lab.eth0, now: Lab.t0) else {
                Issue.record("not accepted")
                continue
            }
        }
    }

    @Test func aLargeRegistrationIsSplitIntoUpdatesWithOneID() throws {
        var registration = Self.vectorLike
        registration.services = (0..<40).map {
            SleepRegistration.Service(
                instance: try! DNSName(parsing: "Service number \($0)._http._tcp.local."), port: UInt16(8000 + $0),
                txt: try! TXTRecord(["k=\(String(repeating: "v", count: 40))"]))
        }
        let messages = registration.messages(id: 0x4242)
        #expect(messages.count > 1)
        for message in messages {
            #expect(message.id == 0x4242 && message.opt != nil)
            #expect(message.encoded(options: .appleUpdate).count <= SleepRegistration.maximumMessageSize)
        }
        #expect(messages.flatMap(\.updates) == registration.records)
        // The proxy merges the parts into one host.
        var registrar = Registrar(
            configuration: {
                var c = RegistrationConfiguration(); c.requireSourceAmongClaimedAddresses = false; return c
            }())
        for message in messages {
            guard
                case .accepted = registrar.handle(
                    datagram: message.encoded(options: .appleUpdate), from: Lab.hostV4, on: Lab.eth0, now: Lab.t0)
            else {
                Issue.record("part not accepted")
                return
            }
        }
        // One host holding every distinct record (the `_services` PTR repeats per service and is kept once).
        #expect(registrar.store.hostCount == 1 && registrar.store.recordCount == Set(registration.records).count)
    }
}
