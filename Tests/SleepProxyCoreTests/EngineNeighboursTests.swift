import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

/// The engine lists the machines on the link from what the packet side and the responder hear.
@Suite("Neighbours through the engine")
struct EngineNeighboursTests {
    typealias H = EngineHarness
    typealias B = NeighbourBookTests

    @Test func anARPRequestAndTheMachinesOwnMDNSListIt() throws {
        var h = H()
        _ = h.frame(
            TestFrames.arpRequest(from: B.nas, senderIP: IPv4Address(192, 0, 2, 44), for: IPv4Address(192, 0, 2, 1)))
        _ = h.mdns(B.announcement(), from: B.nasV4)
        let listed = try #require(h.engine.neighbours(now: h.now))
        let nas = try #require(listed.first { $0.mac == B.nas })
        #expect(nas.addresses == [B.nasV4] && nas.names == ["nas.local."] && nas.services == ["Files._smb._tcp.local."])
        // Its responder's answer from a port other than 5353 is no mDNS response (RFC 6762 §6.7): nothing learned.
        var other = H()
        _ = other.frame(
            TestFrames.arpRequest(from: B.nas, senderIP: IPv4Address(192, 0, 2, 44), for: IPv4Address(192, 0, 2, 1)))
        _ = other.mdns(B.announcement(), from: B.nasV4, port: 40000)
        #expect(other.engine.neighbours(now: other.now)?.first?.names == [])
        // Without the packet side there is no list: MACs are not known.
        #expect(H(takeover: false).engine.neighbours(now: h.now) == nil)
    }
}
