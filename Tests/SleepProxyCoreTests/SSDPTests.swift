import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

/// What a minidlna server says of itself (its search response and announcements carry the same fields).
enum MediaServer {
    static let uuid = "uuid:4d696e69-444c-164e-9d41-b827eb000002"
    static let location = "http://192.0.2.2:8200/rootDesc.xml"
    static let server = "Debian DLNADOC/1.50 UPnP/1.0 MiniDLNA/1.3.0"
    static let types = [
        "upnp:rootdevice", uuid, "urn:schemas-upnp-org:device:MediaServer:1",
        "urn:schemas-upnp-org:service:ContentDirectory:1", "urn:schemas-upnp-org:service:ConnectionManager:1",
        "urn:microsoft.com:service:X_MS_MediaReceiverRegistrar:1",
    ]

    static func usn(_ type: String) -> String { type == uuid ? uuid : "\(uuid)::\(type)" }

    static func headers(_ type: String, maxAge: Int = 1810, location: String = location) -> [SSDPMessage.Header] {
        [
            .init("CACHE-CONTROL", "max-age=\(maxAge)"), .init("LOCATION", location), .init("SERVER", server),
            .init("USN", usn(type)), .init("BOOTID.UPNP.ORG", "7"), .init("CONFIGID.UPNP.ORG", "1337"),
        ]
    }

    static func alive(_ type: String, maxAge: Int = 1810) -> [UInt8] {
        SSDPMessage(
            kind: .notify,
            headers: [.init("HOST", "239.255.255.250:1900"), .init("NT", type), .init("NTS", "ssdp:alive")]
                + headers(type, maxAge: maxAge)
        ).encoded()
    }

    static func response(_ type: String) -> [UInt8] {
        SSDPMessage(kind: .response, headers: [.init("ST", type), .init("EXT", "")] + headers(type)).encoded()
    }

    static func byebye(_ type: String) -> [UInt8] {
        SSDPMessage(
            kind: .notify,
            headers: [
                .init("HOST", "239.255.255.250:1900"), .init("NT", type), .init("NTS", "ssdp:byebye"),
                .init("USN", usn(type)),
            ]
        ).encoded()
    }

    static func search(_ target: String, mx: String? = "2") -> [UInt8] {
        var headers: [SSDPMessage.Header] = [
            .init("HOST", "239.255.255.250:1900"), .init("MAN", "\"ssdp:discover\""), .init("ST", target),
        ]
        if let mx { headers.append(.init("MX", mx)) }
        return SSDPMessage(kind: .search, headers: headers).encoded()
    }
}

/// The SSDP machine alone: learning, answering, announcing, bounds.
@Suite("SSDP on behalf of sleeping hosts")
struct SSDPProxyTests {
    static let key = OwnerKey(interface: "eth0", primaryMAC: Lab.hostMAC)
    static let tv = IPAddress("192.0.2.30")!
    static let group = IPAddress("239.255.255.250")!

    /// A proxy that holds the media server, having heard everything it advertises.
    static func learned(speaking: Bool = true, now: Timestamp = Lab.t0) -> SSDPProxy {
        var proxy = SSDPProxy(seed: 3)
        proxy.setInterfaces([Lab.eth0])
        _ = proxy.registered(key, addresses: [Lab.hostV4, Lab.hostV6], search: false, now: now)
        for type in MediaServer.types { Self.receive(&proxy, MediaServer.response(type), from: Lab.hostV4, now: now) }
        if speaking { proxy.speak(for: key, now: now) }
        return proxy
    }

    @discardableResult
    static func receive(
        _ proxy: inout SSDPProxy, _ bytes: [UInt8], from source: IPAddress, port: UInt16 = 1900,
        destination: IPAddress? = IPAddress("192.0.2.1")!, owner: OwnerKey? = key, now: Timestamp
    ) -> [SSDPTransmission] {
        proxy.receive(
            bytes, from: source, port: port, destination: destination, interfaceIndex: Lab.eth0.index, owner: owner,
            now: now)
    }

    static func messages(_ transmissions: [SSDPTransmission]) -> [SSDPMessage] {
        transmissions.compactMap { try? SSDPMessage(decoding: $0.bytes) }
    }

    /// Runs the machine's timers for `duration`, returning what it sent with when.
    static func run(_ proxy: inout SSDPProxy, from start: Timestamp, for duration: Duration) -> [(
        Timestamp, SSDPTransmission
    )] {
        var sent: [(Timestamp, SSDPTransmission)] = []
        while let deadline = proxy.nextDeadline(), deadline <= start + duration {
            sent += proxy.tick(now: deadline).map { (deadline, $0) }
        }
        return sent
    }

    @Test func aRegistrationAsksTheHostDirectlyForEverythingItAdvertises() throws {
        var proxy = SSDPProxy(seed: 1)
        proxy.setInterfaces([Lab.eth0])
        let searches = proxy.registered(Self.key, addresses: [Lab.hostV4, Lab.hostV6], search: true, now: Lab.t0)
        #expect(searches.map(\.destination).contains(.unicast(address: Lab.hostV4, port: 1900, interfaceIndex: 2)))
        let search = try SSDPMessage(decoding: try #require(searches.first).bytes)
        #expect(search.kind == .search && search.isDiscover && search.searchTarget == "ssdp:all")
        #expect(search["HOST"] == "192.0.2.2:1900")
        #expect(searches.filter { !$0.destination.isMulticast }.count == 2, "one per family the interface has")
        // minidlna hears only searches sent to the group: one goes there too, per family...
        let group = searches.filter(\.destination.isMulticast)
        #expect(group.count == 2)
        #expect(try SSDPMessage(decoding: group[0].bytes)["HOST"] == "239.255.255.250:1900")
        // ...and a burst of registrations makes one more group search 10 s later, not one each.
        let other = OwnerKey(interface: "eth0", primaryMAC: MACAddress("02:53:50:00:00:07")!)
        for second in 1...5 {
            let more = proxy.registered(
                other, addresses: [IPAddress("192.0.2.7")!], search: true, now: Lab.t0 + .seconds(Int64(second)))
            #expect(more.count == 1 && !more[0].destination.isMulticast)
        }
        #expect(proxy.nextDeadline() == Lab.t0 + SSDPRules.groupSearchInterval)
        let later = proxy.tick(now: Lab.t0 + SSDPRules.groupSearchInterval)
        #expect(later.count == 2 && later.allSatisfy(\.destination.isMulticast))
        #expect(proxy.nextDeadline() == nil)
    }

    @Test func aSleepingHostsSearchResponsesAreItsOwnAfterARandomDelayWithinMX() throws {
        var proxy = Self.learned()
        let immediate = Self.receive(
            &proxy, MediaServer.search("ssdp:all", mx: "2"), from: Self.tv, port: 41000, destination: Self.group,
            owner: nil, now: Lab.t0)
        #expect(immediate.isEmpty, "a multicast search waits for its random delay")
        let sent = Self.run(&proxy, from: Lab.t0, for: .seconds(3)).filter {
            $0.1.destination == .unicast(address: Self.tv, port: 41000, interfaceIndex: 2)
        }
        #expect(sent.count == MediaServer.types.count)
        #expect(sent.allSatisfy { $0.0 - Lab.t0 <= .seconds(2) })
        let responses = Self.messages(sent.map(\.1))
        #expect(Set(responses.compactMap(\.searchTarget)) == Set(MediaServer.types))
        for response in responses {
            #expect(response.kind == .response)
            #expect(response.location == MediaServer.location)
            #expect(response.server == MediaServer.server)
            #expect(response.uniqueServiceName == MediaServer.usn(response.searchTarget!))
            #expect(response.bootID == 7 && response.configID == 1337 && response.maxAge == 1810)
            #expect(response["EXT"] == "")
        }
    }

    @Test func searchTargetsMatchAsUDASays() throws {
        var proxy = Self.learned()
        func answer(_ target: String) -> [SSDPMessage] {
            // Unicast searches (no MX) are answered at once.
            Self.messages(
                Self.receive(
                    &proxy, MediaServer.search(target, mx: nil), from: Self.tv, port: 41001, owner: nil, now: Lab.t0))
        }
        #expect(answer("upnp:rootdevice").map(\.uniqueServiceName) == [MediaServer.usn("upnp:rootdevice")])
        #expect(answer(MediaServer.uuid).map(\.uniqueServiceName) == [MediaServer.uuid])
        #expect(answer("URN:schemas-upnp-org:device:MediaServer:1").count == 1, "targets compare without case")
        // A version 1 device answers a search for version 1 only; a search for a lower version of a newer type is
        // answered with the version asked for.
        #expect(answer("urn:schemas-upnp-org:device:MediaServer:2").isEmpty)
        #expect(answer("urn:schemas-upnp-org:device:MediaRenderer:1").isEmpty)
        #expect(answer("ssdp:all").count == MediaServer.types.count)
        var v2 = SSDPProxy(seed: 2)
        v2.setInterfaces([Lab.eth0])
        _ = v2.registered(Self.key, addresses: [Lab.hostV4], search: false, now: Lab.t0)
        Self.receive(
            &v2, MediaServer.response("urn:schemas-upnp-org:device:MediaServer:2"), from: Lab.hostV4, now: Lab.t0)
        v2.speak(for: Self.key, now: Lab.t0)
        let older = Self.messages(
            Self.receive(
                &v2, MediaServer.search("urn:schemas-upnp-org:device:MediaServer:1", mx: nil), from: Self.tv,
                port: 41002, owner: nil, now: Lab.t0))
        #expect(older.map(\.searchTarget) == ["urn:schemas-upnp-org:device:MediaServer:1"])
        #expect(older.map(\.uniqueServiceName) == ["\(MediaServer.uuid)::urn:schemas-upnp-org:device:MediaServer:1"])
    }

    @Test func nothingIsSaidForAHostThatIsNotAsleep() throws {
        var proxy = Self.learned(speaking: false)
        #expect(
            Self.receive(
                &proxy, MediaServer.search("ssdp:all", mx: nil), from: Self.tv, port: 41003, owner: nil, now: Lab.t0
            ).isEmpty)
        #expect(Self.run(&proxy, from: Lab.t0, for: .seconds(4000)).isEmpty, "no announcements for an awake host")
        // Asleep, then awake again: responses queued while it slept are dropped.
        proxy.speak(for: Self.key, now: Lab.t0)
        Self.receive(
            &proxy, MediaServer.search("ssdp:all", mx: "5"), from: Self.tv, port: 41003, destination: Self.group,
            owner: nil, now: Lab.t0)
        proxy.silence(Self.key)
        #expect(Self.run(&proxy, from: Lab.t0, for: .seconds(4000)).isEmpty)
    }

    @Test func invalidSearchesAreNotAnswered() throws {
        var proxy = Self.learned()
        let before = proxy.statistics.malformed
        // A multicast search without MX, with MX 0, or without MAN (UDA §1.3.2).
        for bytes in [
            MediaServer.search("ssdp:all", mx: nil), MediaServer.search("ssdp:all", mx: "0"),
            SSDPMessage(kind: .search, headers: [.init("ST", "ssdp:all"), .init("MX", "1")]).encoded(),
            Array("M-SEARCH * HTTP/1.1\r\nST: ssdp:all\r\n".utf8), Array(repeating: 0x41, count: 5000),
        ] {
            Self.receive(&proxy, bytes, from: Self.tv, port: 41004, destination: Self.group, owner: nil, now: Lab.t0)
        }
        #expect(proxy.statistics.malformed == before + 5)
        #expect(Self.run(&proxy, from: Lab.t0, for: .seconds(6)).allSatisfy { $0.1.destination.isMulticast })
        // From off the link, or from the proxy itself: ignored.
        for source in [IPAddress("198.51.100.7")!, IPAddress("192.0.2.1")!] {
            #expect(
                Self.receive(
                    &proxy, MediaServer.search("ssdp:all", mx: nil), from: source, port: 41004, owner: nil, now: Lab.t0
                ).isEmpty)
        }
    }

    @Test func aSearchFloodCostsOneResponsePerEntryAndSearcherAndIsBounded() throws {
        var proxy = Self.learned()
        for _ in 0..<500 {
            Self.receive(
                &proxy, MediaServer.search("ssdp:all", mx: "5"), from: Self.tv, port: 41005, destination: Self.group,
                owner: nil, now: Lab.t0)
        }
        #expect(proxy.pending.count == MediaServer.types.count)
        #expect(proxy.statistics.repeatedSearches == 499, "a repeat within MX is not matched again")
        // Distinct searchers fill the queue to its bound exactly, then each further response is refused.
        let searchers = SSDPRules.maximumPendingResponses / MediaServer.types.count + 1
        for port in 0..<searchers {
            Self.receive(
                &proxy, MediaServer.search("ssdp:all", mx: "5"), from: Self.tv, port: UInt16(42000 + port),
                destination: Self.group, owner: nil, now: Lab.t0)
        }
        #expect(proxy.pending.count == SSDPRules.maximumPendingResponses)
        #expect(proxy.statistics.overLimit > 0)
        let sent = Self.run(&proxy, from: Lab.t0, for: .seconds(6)).filter { !$0.1.destination.isMulticast }
        #expect(sent.count == SSDPRules.maximumPendingResponses)
        // Drained: room again.
        Self.receive(
            &proxy, MediaServer.search("ssdp:all", mx: "5"), from: Self.tv, port: 41005, destination: Self.group,
            owner: nil, now: Lab.t0 + .seconds(10))
        #expect(proxy.pending.count == MediaServer.types.count)
    }

    @Test func announcementsKeepTheHostsOwnCadence() throws {
        var proxy = SSDPProxy(seed: 4)
        proxy.setInterfaces([Lab.eth0])
        _ = proxy.registered(Self.key, addresses: [Lab.hostV4], search: false, now: Lab.t0)
        // The host announces at 0 s (three times, as UDA suggests, 100 ms apart) and again at 895 s.
        for offset in [0, 100, 200] {
            Self.receive(
                &proxy, MediaServer.alive("upnp:rootdevice"), from: Lab.hostV4, destination: Self.group,
                now: Lab.t0 + .milliseconds(Int64(offset)))
        }
        let second = Lab.t0 + .seconds(895)
        Self.receive(
            &proxy, MediaServer.alive("upnp:rootdevice"), from: Lab.hostV4, destination: Self.group, now: second)
        let asleep = second + .seconds(10)
        proxy.speak(for: Self.key, now: asleep)
        let sent = Self.run(&proxy, from: asleep, for: .seconds(2000))
        // A first set within 1-3 s of the takeover (its control points' caches run from its last one), then one
        // every 894.8 s (its interval runs from the last repeat of its first set).
        let times = sent.map { $0.0 - asleep }
        #expect(times.count == 3)
        #expect(times[0] >= .seconds(1) && times[0] <= .seconds(3))
        #expect(zip(times.dropFirst(), times).allSatisfy { $0 - $1 == .milliseconds(894_800) })
        let alive = try #require(Self.messages(sent.map(\.1)).first)
        #expect(alive.kind == .notify && alive.notificationSubtype == "ssdp:alive")
        #expect(alive["HOST"] == "239.255.255.250:1900" && alive.notificationType == "upnp:rootdevice")
        #expect(alive.location == MediaServer.location && alive.bootID == 7 && alive.configID == 1337)
        #expect(sent.allSatisfy { $0.1.destination == .multicast(interfaceIndex: 2, family: .v4) })
    }

    @Test func withoutAnObservedIntervalAnnouncementsComeAtJustUnderHalfTheMaxAge() throws {
        var proxy = SSDPProxy(seed: 5)
        proxy.setInterfaces([Lab.eth0])
        _ = proxy.registered(Self.key, addresses: [Lab.hostV4], search: false, now: Lab.t0)
        Self.receive(&proxy, MediaServer.response("upnp:rootdevice"), from: Lab.hostV4, now: Lab.t0)
        // Never seen announcing: a first set soon, then every 0.45 × 1810 s.
        let later = Lab.t0 + .seconds(1000)
        proxy.speak(for: Self.key, now: later)
        let sent = Self.run(&proxy, from: later, for: .seconds(2000)).map { $0.0 - later }
        #expect(sent.count == 3)
        #expect(sent[0] >= .seconds(1) && sent[0] <= .seconds(3))
        #expect(sent[1] - sent[0] == .milliseconds(814_500))
        // A max-age below the bound is clamped, and so is the cadence (never an announcement a second).
        var short = SSDPProxy(seed: 6)
        short.setInterfaces([Lab.eth0])
        _ = short.registered(Self.key, addresses: [Lab.hostV4], search: false, now: Lab.t0)
        Self.receive(&short, MediaServer.alive("upnp:rootdevice", maxAge: 1), from: Lab.hostV4, now: Lab.t0)
        #expect(short.entries(of: Self.key).first?.maximumAge == SSDPRules.maximumAgeRange.lowerBound)
        short.speak(for: Self.key, now: Lab.t0)
        let times = Self.run(&short, from: Lab.t0, for: .seconds(300)).map(\.0)
        #expect(zip(times.dropFirst(), times).allSatisfy { $0 - $1 == SSDPRules.minimumAnnouncementInterval })
        // A host announcing every 10 s with a max-age of 30 (minidlna with notify_interval = 10) is repeated at
        // its own interval, inside its max-age.
        var quick = SSDPProxy(seed: 12)
        quick.setInterfaces([Lab.eth0])
        _ = quick.registered(Self.key, addresses: [Lab.hostV4], search: false, now: Lab.t0)
        for offset: Int64 in [0, 10, 20] {
            Self.receive(
                &quick, MediaServer.alive("upnp:rootdevice", maxAge: 30), from: Lab.hostV4,
                now: Lab.t0 + .seconds(offset))
        }
        #expect(quick.entries(of: Self.key).first?.maximumAge == 30)
        quick.speak(for: Self.key, now: Lab.t0 + .seconds(25))
        let quickTimes = Self.run(&quick, from: Lab.t0 + .seconds(25), for: .seconds(100)).map(\.0)
        #expect(zip(quickTimes.dropFirst(), quickTimes).allSatisfy { $0 - $1 == .seconds(10) })
        #expect(quickTimes.first.map { $0 - Lab.t0 <= .seconds(28) } == true, "within 30 s of its last")
    }

    @Test func aResumingServersMomentaryZeroLocationDoesNotReplaceItsRealOne() throws {
        var proxy = Self.learned(speaking: false)
        let before = proxy.statistics.malformed
        let zero = SSDPMessage(
            kind: .notify,
            headers: [
                .init("HOST", "239.255.255.250:1900"), .init("NT", "upnp:rootdevice"), .init("NTS", "ssdp:alive"),
            ]
                + MediaServer.headers("upnp:rootdevice", location: "http://0.0.0.0:8200/rootDesc.xml")
        ).encoded()
        Self.receive(&proxy, zero, from: Lab.hostV4, destination: Self.group, now: Lab.t0 + .seconds(1))
        #expect(proxy.statistics.malformed == before + 1)
        #expect(proxy.entries(of: Self.key).allSatisfy { $0.location == MediaServer.location })
    }

    @Test func byebyeAndUpdateFromTheHostChangeWhatIsKept() throws {
        var proxy = Self.learned(speaking: false)
        Self.receive(
            &proxy, MediaServer.byebye("upnp:rootdevice"), from: Lab.hostV4, destination: Self.group, now: Lab.t0)
        #expect(proxy.entries(of: Self.key).count == MediaServer.types.count - 1)
        let update = SSDPMessage(
            kind: .notify,
            headers: [
                .init("HOST", "239.255.255.250:1900"), .init("NT", MediaServer.uuid), .init("NTS", "ssdp:update"),
                .init("LOCATION", MediaServer.location), .init("USN", MediaServer.uuid),
                .init("BOOTID.UPNP.ORG", "7"), .init("NEXTBOOTID.UPNP.ORG", "8"), .init("CONFIGID.UPNP.ORG", "1337"),
            ])
        Self.receive(&proxy, update.encoded(), from: Lab.hostV4, destination: Self.group, now: Lab.t0)
        #expect(proxy.entries(of: Self.key).first { $0.uniqueServiceName == MediaServer.uuid }?.bootID == 8)
    }
}

extension MDNSTransmission.Destination {
    var isMulticast: Bool { if case .multicast = self { return true } else { return false } }
}
