import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

extension SSDPProxyTests {
    @Test func entriesPerHostAreBoundedAtTheLimit() throws {
        var proxy = SSDPProxy(seed: 7)
        proxy.setInterfaces([Lab.eth0])
        _ = proxy.registered(Self.key, addresses: [Lab.hostV4], search: false, now: Lab.t0)
        for index in 0...SSDPRules.maximumEntriesPerHost {
            Self.receive(
                &proxy, MediaServer.response("urn:example-org:service:Thing\(index):1"), from: Lab.hostV4, now: Lab.t0)
        }
        #expect(proxy.entries(of: Self.key).count == SSDPRules.maximumEntriesPerHost)
        #expect(proxy.statistics.overLimit == 1)
        // A known entry is still refreshed at the bound.
        Self.receive(
            &proxy, MediaServer.response("urn:example-org:service:Thing0:1"), from: Lab.hostV4,
            now: Lab.t0 + .seconds(5))
        #expect(proxy.statistics.overLimit == 1)
    }

    @Test func overIPv6EachFamilyIsLearnedAnsweredAndAnnouncedOnItsOwn() throws {
        // A GUPnP-style server answering over both families, with a LOCATION of each family's own.
        var proxy = Self.learned(speaking: false)
        let v6Location = "http://[fe80::53:50ff:fe00:2]:49152/description.xml"
        let v6Response = SSDPMessage(
            kind: .response,
            headers: [.init("ST", "upnp:rootdevice"), .init("EXT", "")]
                + MediaServer.headers("upnp:rootdevice", location: v6Location)
        ).encoded()
        Self.receive(&proxy, v6Response, from: Lab.hostV6, now: Lab.t0)
        #expect(proxy.entries(of: Self.key).filter { $0.family == .v6 }.map(\.location) == [v6Location])
        #expect(proxy.wakePorts(of: Self.key) == [8200, 49152], "both description ports wake the host")
        proxy.speak(for: Self.key, now: Lab.t0)
        // An IPv6 searcher hears the IPv6 entry only; an IPv4 one the IPv4 entries only.
        let tv6 = IPAddress("fe80::53:50ff:fe00:30")!
        let v6Answers = Self.messages(
            Self.receive(
                &proxy, MediaServer.search("ssdp:all", mx: nil), from: tv6, port: 41010, owner: nil, now: Lab.t0))
        #expect(v6Answers.map(\.location) == [v6Location])
        let v4Answers = Self.messages(
            Self.receive(
                &proxy, MediaServer.search("ssdp:all", mx: nil), from: Self.tv, port: 41010, owner: nil, now: Lab.t0))
        #expect(
            v4Answers.count == MediaServer.types.count && v4Answers.allSatisfy { $0.location == MediaServer.location })
        // Announced to each family's group, FF02::C with its HOST in brackets.
        let sent = Self.run(&proxy, from: Lab.t0, for: .seconds(4))
        let v6Sent = sent.filter { $0.1.destination == .multicast(interfaceIndex: 2, family: .v6) }
        #expect(v6Sent.count == 1)
        #expect(Self.messages(v6Sent.map(\.1)).first?["HOST"] == "[FF02::C]:1900")
        #expect(sent.count - v6Sent.count == MediaServer.types.count)
    }

    @Test func learnedTextIsBoundedInAllAtTheLimit() throws {
        // A budget of exactly two entries: the third is refused, and refreshing a known one still works.
        let one = SSDPEntry(
            family: .v4, notificationType: "upnp:rootdevice", uniqueServiceName: MediaServer.usn("upnp:rootdevice"),
            location: MediaServer.location, server: MediaServer.server, maximumAge: 1810, bootID: 7, configID: 1337,
            refreshedAt: Lab.t0
        ).byteCount
        var proxy = SSDPProxy(seed: 10, maximumTotalBytes: 2 * one)
        proxy.setInterfaces([Lab.eth0])
        _ = proxy.registered(Self.key, addresses: [Lab.hostV4], search: false, now: Lab.t0)
        Self.receive(&proxy, MediaServer.response("upnp:rootdevice"), from: Lab.hostV4, now: Lab.t0)
        Self.receive(
            &proxy, MediaServer.alive("upnp:rootdevice"), from: IPAddress("192.0.2.9")!, owner: nil, now: Lab.t0)
        #expect(proxy.totalBytes == 2 * one && proxy.statistics.overLimit == 0)
        Self.receive(
            &proxy, MediaServer.alive("upnp:rootdevice"), from: IPAddress("192.0.2.10")!, owner: nil, now: Lab.t0)
        #expect(proxy.totalBytes == 2 * one && proxy.statistics.overLimit == 1 && proxy.unclaimedEntryCount == 1)
        Self.receive(&proxy, MediaServer.response("upnp:rootdevice"), from: Lab.hostV4, now: Lab.t0 + .seconds(9))
        #expect(proxy.entries(of: Self.key).first?.refreshedAt == Lab.t0 + .seconds(9))
        // Gone with its host, the budget is free again.
        _ = proxy.removed(Self.key, byebye: true)
        #expect(proxy.totalBytes == one)
    }

    @Test func addressesNotRegisteredAreRememberedUpToTheLimitAndAdoptedOnRegistration() throws {
        var proxy = SSDPProxy(seed: 8)
        // 257 distinct on-link sources: IPv4 link-local, on the link through a 169.254 prefix.
        var link = Lab.eth0
        link.prefixes.append(IPPrefix("169.254.0.1/16")!)
        proxy.setInterfaces([link])
        for index in 0...SSDPRules.maximumUnclaimedSources {
            let source = IPAddress.v4(IPv4Address(169, 254, UInt8(1 + index / 250), UInt8(1 + index % 250)))
            Self.receive(
                &proxy, MediaServer.alive("upnp:rootdevice"), from: source, destination: Self.group, owner: nil,
                now: Lab.t0 + .milliseconds(Int64(index)))
        }
        #expect(proxy.unclaimed.count == SSDPRules.maximumUnclaimedSources)
        #expect(proxy.unclaimed[.init(interface: "eth0", address: IPAddress("169.254.1.1")!)] == nil, "oldest gone")
        // The last one registers: what it announced before is its own now.
        let last = IPAddress.v4(
            IPv4Address(
                169, 254, UInt8(1 + SSDPRules.maximumUnclaimedSources / 250),
                UInt8(1 + SSDPRules.maximumUnclaimedSources % 250)))
        _ = proxy.registered(Self.key, addresses: [last], search: false, now: Lab.t0 + .seconds(1))
        #expect(proxy.entries(of: Self.key).map(\.notificationType) == ["upnp:rootdevice"])
        #expect(proxy.unclaimed.count == SSDPRules.maximumUnclaimedSources - 1)
    }

    @Test func theDescriptionPortIsAWakePortOnlyWhenTheURLIsTheHostsOwn() throws {
        let proxy = Self.learned()
        #expect(proxy.wakePorts(of: Self.key) == [8200])
        var elsewhere = SSDPProxy(seed: 9)
        elsewhere.setInterfaces([Lab.eth0])
        _ = elsewhere.registered(Self.key, addresses: [Lab.hostV4], search: false, now: Lab.t0)
        let foreign = SSDPMessage(
            kind: .response,
            headers: [.init("ST", "upnp:rootdevice")]
                + MediaServer.headers("upnp:rootdevice", location: "http://192.0.2.99:49152/desc.xml")
        ).encoded()
        Self.receive(&elsewhere, foreign, from: Lab.hostV4, now: Lab.t0)
        #expect(elsewhere.entries(of: Self.key).count == 1)
        #expect(elsewhere.wakePorts(of: Self.key).isEmpty)
    }

    @Test func locationsParseStrictly() {
        #expect(SSDPLocation("http://192.0.2.2:8200/rootDesc.xml") == SSDPLocation("HTTP://192.0.2.2:8200"))
        #expect(SSDPLocation("http://192.0.2.2/desc")?.port == 80)
        #expect(SSDPLocation("http://[fe80::2%25eth0]:49152/x")?.address == IPAddress("fe80::2"))
        #expect(SSDPLocation("http://[fe80::2]:49152/x")?.port == 49152)
        #expect(SSDPLocation("http://nas.local:8200/x")?.address == nil)
        #expect(SSDPLocation("http://nas.local:8200/x")?.isUsable == true)
        for unusable in [
            "http://0.0.0.0:8200/x", "http://127.0.0.1:8200/", "http://[::]:80/", "http://[::1]/",
            "http://239.255.255.250:1900/", "http://255.255.255.255/",
        ] {
            #expect(SSDPLocation(unusable)?.isUsable == false, "\(unusable)")
        }
        for bad in [
            "ftp://192.0.2.2/x", "http://", "http://:80/x", "http://192.0.2.2:0/", "http://192.0.2.2:99999/",
            "http://[fe80::2/x", "http://192.0.2.2:80a/",
        ] {
            #expect(SSDPLocation(bad) == nil, "\(bad)")
        }
    }
}
