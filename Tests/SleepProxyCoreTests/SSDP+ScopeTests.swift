import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

/// IPv6 scopes (docs/ssdp.md): a server gives searchers at its link-local address, and the group FF02::C, a
/// link-local LOCATION, and searchers at its global address a global one (rygel through GUPnP runs one client
/// per address). A GUPnP control point that meets a changed LOCATION for a known device fetches its description
/// and wakes the server, so the proxy answers and announces in each scope what the host said there.
@Suite("SSDP scopes over IPv6")
struct SSDPScopeTests {
    typealias T = SSDPProxyTests
    static let global = IPAddress("2001:db8::2")!
    static let linkLocalLocation = "http://[fe80::53:50ff:fe00:2]:8200/rootDesc.xml"
    static let globalLocation = "http://[2001:db8::2]:8200/rootDesc.xml"
    static let linkLocalTV = IPAddress("fe80::30")!
    static let globalTV = IPAddress("2001:db8::30")!
    static let v6Group = IPAddress("ff02::c")!

    static func alive(_ type: String, location: String) -> [UInt8] {
        SSDPMessage(
            kind: .notify,
            headers: [.init("HOST", "[FF02::C]:1900"), .init("NT", type), .init("NTS", "ssdp:alive")]
                + MediaServer.headers(type, location: location)
        ).encoded()
    }

    static func response(_ type: String, location: String) -> [UInt8] {
        SSDPMessage(
            kind: .response,
            headers: [.init("ST", type), .init("EXT", "")] + MediaServer.headers(type, location: location)
        ).encoded()
    }

    /// The server as the proxy hears it over IPv6: announcing on FF02::C from its link-local address, and
    /// answering the proxy's search at its global address from there, in `globalLast` order or the other.
    static func learned(globalLast: Bool) -> SSDPProxy {
        var proxy = SSDPProxy(seed: 5)
        proxy.setInterfaces([Lab.eth0])
        _ = proxy.registered(T.key, addresses: [Lab.hostV4, Self.global, Lab.hostV6], search: false, now: Lab.t0)
        let linkLocal = {
            for type in MediaServer.types {
                T.receive(
                    &proxy, Self.alive(type, location: Self.linkLocalLocation), from: Lab.hostV6,
                    destination: Self.v6Group, now: Lab.t0)
            }
        }
        let global = {
            for type in MediaServer.types {
                T.receive(
                    &proxy, Self.response(type, location: Self.globalLocation), from: Self.global,
                    destination: IPAddress("2001:db8::1")!, now: Lab.t0)
            }
        }
        if globalLast {
            linkLocal()
            global()
        } else {
            global()
            linkLocal()
        }
        proxy.speak(for: T.key, now: Lab.t0)
        return proxy
    }

    @Test(arguments: [true, false])
    func eachScopeGetsTheLocationTheServerGaveIt(globalLast: Bool) throws {
        var proxy = Self.learned(globalLast: globalLast)
        // Announced on FF02::C: the link-local LOCATION only, whichever came last.
        let announced = T.run(&proxy, from: Lab.t0, for: .seconds(5)).map(\.1).filter {
            $0.destination == .multicast(interfaceIndex: Lab.eth0.index, family: .v6)
        }
        #expect(announced.count == MediaServer.types.count)
        #expect(T.messages(announced).allSatisfy { $0.location == Self.linkLocalLocation })
        // Searched from a link-local address, through the group: link-local; from a global one: global.
        for (searcher, location) in [(Self.linkLocalTV, Self.linkLocalLocation), (Self.globalTV, Self.globalLocation)] {
            let now = Lab.t0 + .seconds(10)
            let immediate = T.receive(
                &proxy, MediaServer.search("ssdp:all", mx: nil), from: searcher, port: 41000,
                destination: Self.global, owner: nil, now: now)
            #expect(immediate.count == MediaServer.types.count, "\(searcher)")
            #expect(T.messages(immediate).allSatisfy { $0.location == location }, "\(searcher)")
        }
        // A byebye from either address withdraws the device in both scopes.
        T.receive(
            &proxy, MediaServer.byebye(MediaServer.uuid), from: Lab.hostV6, destination: Self.v6Group, now: Lab.t0)
        #expect(!proxy.entries(of: T.key).contains { $0.uniqueServiceName == MediaServer.uuid && $0.family == .v6 })
    }

    /// What the server told only searchers at its global address is never announced on the group.
    @Test func entriesHeardOnlyFromTheGlobalAddressAreNotAnnounced() {
        var proxy = SSDPProxy(seed: 5)
        proxy.setInterfaces([Lab.eth0])
        _ = proxy.registered(T.key, addresses: [Self.global], search: false, now: Lab.t0)
        T.receive(
            &proxy, Self.response("upnp:rootdevice", location: Self.globalLocation), from: Self.global,
            destination: IPAddress("2001:db8::1")!, now: Lab.t0)
        proxy.speak(for: T.key, now: Lab.t0)
        #expect(T.run(&proxy, from: Lab.t0, for: .seconds(60)).isEmpty)
        #expect(proxy.entries(of: T.key).map(\.scope) == [.global])
    }
}
