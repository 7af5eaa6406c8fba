import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

/// The machines heard on the link, for a person choosing which to keep present (docs/neighbours.md).
@Suite("Neighbour book")
struct NeighbourBookTests {
    static let nas = MACAddress("02:53:50:00:00:44")!
    static let nasV4 = IPAddress("192.0.2.44")!
    static let nasV6 = IPAddress("fe80::53:50ff:fe00:44")!
    static let t0 = Lab.t0

    /// What a NAS's avahi says of itself: its name's addresses, and a service on that name.
    static func announcement(ttl: UInt32 = 120) -> DNSMessage {
        var message = DNSMessage(
            answers: [
                DNSResourceRecord(
                    name: "nas.local.", cacheFlush: true, ttl: 120,
                    rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 44)))),
                DNSResourceRecord(
                    name: "Files._smb._tcp.local.", cacheFlush: true, ttl: ttl,
                    rdata: .srv(SRVRecord(priority: 0, weight: 0, port: 445, target: "nas.local."))),
            ])
        message.flags.isResponse = true
        return message
    }

    @Test func aMachineIsListedWithItsAddressesNamesAndServices() {
        var book = NeighbourBook()
        book.heard(Self.nas, at: Self.nasV4, on: "eth0", now: Self.t0)
        book.heard(Self.nas, at: Self.nasV6, on: "eth0", now: Self.t0 + .seconds(1))
        book.published(Self.announcement(), from: Self.nasV4, on: "eth0", now: Self.t0 + .seconds(2))
        let listed = book.neighbours(now: Self.t0 + .seconds(3))
        #expect(listed.count == 1)
        #expect(listed.first?.addresses == [Self.nasV6, Self.nasV4], "newest first")
        #expect(listed.first?.names == ["nas.local."] && listed.first?.services == ["Files._smb._tcp.local."])
        #expect(listed.first?.lastHeard == Self.t0 + .seconds(2))
        // Its goodbye for the service takes the service away.
        book.published(Self.announcement(ttl: 0), from: Self.nasV4, on: "eth0", now: Self.t0 + .seconds(4))
        #expect(book.neighbours(now: Self.t0 + .seconds(5)).first?.services == [])
    }

    /// Only what a machine says of itself: a sleep proxy answering for a sleeping host (its name at another
    /// address, its service on that name) is not credited with them; mDNS from an address no frame tied to a MAC
    /// is credited to nobody.
    @Test func onlyWhatAMachinePublishesForItselfIsCreditedToIt() {
        var book = NeighbourBook()
        let tv = MACAddress("02:53:50:00:00:55")!
        book.heard(tv, at: IPAddress("192.0.2.55")!, on: "eth0", now: Self.t0)
        book.published(Self.announcement(), from: IPAddress("192.0.2.55")!, on: "eth0", now: Self.t0)
        #expect(book.neighbours(now: Self.t0).first?.names == [] && book.neighbours(now: Self.t0).first?.services == [])
        book.published(Self.announcement(), from: IPAddress("192.0.2.66")!, on: "eth0", now: Self.t0)
        #expect(book.count == 1)
    }

    /// Zero, broadcast and group MACs, and unspecified, loopback and group addresses, are no machine's own.
    @Test func addressesAndMACsThatAreNoMachinesOwnAreIgnored() {
        var book = NeighbourBook()
        book.heard(.zero, at: Self.nasV4, on: "eth0", now: Self.t0)
        book.heard(.broadcast, at: Self.nasV4, on: "eth0", now: Self.t0)
        book.heard(MACAddress("01:00:5e:00:00:fb")!, at: Self.nasV4, on: "eth0", now: Self.t0)
        for address in ["0.0.0.0", "127.0.0.1", "224.0.0.251", "255.255.255.255", "::", "::1", "ff02::fb"] {
            book.heard(Self.nas, at: IPAddress(address)!, on: "eth0", now: Self.t0)
        }
        #expect(book.count == 0)
    }

    /// Bounds at N and N + 1: addresses per machine (the oldest goes), the day's memory, machines in all (the one
    /// heard from longest ago goes).
    @Test func everyBoundHoldsAtNAndNPlusOne() {
        var book = NeighbourBook()
        for n in 1...(NeighbourRules.maximumAddresses + 1) {
            book.heard(Self.nas, at: IPAddress("192.0.2.\(100 + n)")!, on: "eth0", now: Self.t0)
            let addresses = book.neighbours(now: Self.t0).first?.addresses ?? []
            #expect(addresses.count == min(n, NeighbourRules.maximumAddresses))
            #expect(addresses.first == IPAddress("192.0.2.\(100 + n)")!)
        }
        #expect(book.neighbours(now: Self.t0 + NeighbourRules.memory - .nanoseconds(1)).count == 1)
        #expect(book.neighbours(now: Self.t0 + NeighbourRules.memory).isEmpty)

        var full = NeighbourBook()
        for n in 0..<NeighbourRules.maximumNeighbours {
            full.heard(
                MACAddress(rawValue: 0x0253_5001_0000 + UInt64(n)), at: IPAddress("198.51.100.1")!, on: "eth0",
                now: Self.t0 + .milliseconds(Int64(n)))
        }
        #expect(full.count == NeighbourRules.maximumNeighbours)
        full.heard(Self.nas, at: Self.nasV4, on: "eth0", now: Self.t0 + .seconds(60))
        let evicted = NeighbourRules.maximumNeighbours / NeighbourRules.evictedShare
        #expect(full.count == NeighbourRules.maximumNeighbours - evicted + 1)
        let listed = full.neighbours(now: Self.t0 + .seconds(60))
        #expect(listed.contains { $0.mac == Self.nas })
        #expect(!listed.contains { $0.mac == MACAddress(rawValue: 0x0253_5001_0000 + UInt64(evicted - 1)) })
        #expect(
            listed.contains { $0.mac == MACAddress(rawValue: 0x0253_5001_0000 + UInt64(evicted)) },
            "the oldest eighth went")
    }
}
