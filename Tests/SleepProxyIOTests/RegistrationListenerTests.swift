import Foundation
import Logging
import NIOCore
import Testing

@testable import SleepProxyIO

#if canImport(Glibc)
    import Glibc
#endif

/// The registration sockets outlive a closure they did not ask for. Bound on a port of the system's choosing and
/// never sent to: no packet leaves.
@Suite("Registration listener", .ownThread)
struct RegistrationListenerTests {
    /// NIO closes a datagram channel over most write errors (a local firewall's EPERM on a reply, say): the
    /// listener binds the same port again, and after `close()` it does not.
    @Test func aSocketClosedUnderUsIsBoundAgainOnItsPort() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "sleepproxy-listener-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        defer { try? FileManager.default.removeItem(at: directory) }
        let engine = try RegistrationEngine(
            configuration: .init(stateDirectory: directory), logger: Logger(label: "test"))
        let listener = try await RegistrationListener.bind(port: 0, engine: engine, logger: Logger(label: "test"))
        let ipv4: (Channel) -> Bool = { if case .v4 = $0.localAddress { true } else { false } }
        let first = try #require(listener.channels.withLockedValue { $0.first(where: ipv4) })
        try await first.close()

        var rebound: Channel? = nil
        let deadline = Date(timeIntervalSinceNow: 5)
        while rebound == nil, Date() < deadline {
            rebound = listener.channels.withLockedValue { $0.first { ipv4($0) && $0 !== first } }
            if rebound == nil { try await Task.sleep(for: .milliseconds(10)) }
        }
        #expect(listener.reopened == 1)
        #expect(rebound?.isActive == true && rebound?.localAddress?.port == listener.port)
        #expect(listener.channels.withLockedValue { $0.contains { $0 === first } } == false)

        // Closed by us: nothing is bound again.
        await listener.close()
        try await Task.sleep(for: .milliseconds(200))
        #expect(listener.reopened == 1)
        #expect(listener.channels.withLockedValue { $0.allSatisfy { !$0.isActive } })
    }
}
