import Foundation
import Logging
import NIOCore
import Testing

@testable import SleepProxyIO

#if canImport(Glibc)
    import Glibc
#endif

/// The registration sockets outlive a closure they did not ask for. Bound on ports of the system's choosing and
/// never sent to: no packet leaves.
@Suite("Registration listener", .ownThread)
struct RegistrationListenerTests {
    /// NIO closes a datagram channel over most write errors (a local firewall's EPERM on a reply, say): the
    /// listener binds each socket again on its own port (with port 0 the two families got different ones), and
    /// after `close()` it does not.
    @Test func aSocketClosedUnderUsIsBoundAgainOnItsPort() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "sleepproxy-listener-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        defer { try? FileManager.default.removeItem(at: directory) }
        let engine = try EngineRunner(
            configuration: .init(stateDirectory: directory), logger: Logger(label: "test"))
        let listener = try await RegistrationListener.bind(port: 0, engine: engine, logger: Logger(label: "test"))
        let originals = listener.channels.withLockedValue { $0 }
        #expect(!originals.isEmpty)
        let ports = originals.compactMap { $0.localAddress?.port }
        for channel in originals { try await channel.close() }

        let deadline = Date(timeIntervalSinceNow: 5)
        while listener.reopened < originals.count, Date() < deadline { try await Task.sleep(for: .milliseconds(10)) }
        let rebound = listener.channels.withLockedValue { $0 }
        #expect(listener.reopened == originals.count)
        #expect(rebound.allSatisfy { fresh in fresh.isActive && !originals.contains { $0 === fresh } })
        #expect(rebound.compactMap { $0.localAddress?.port }.sorted() == ports.sorted())

        // Closed by us: nothing is bound again.
        await listener.close()
        // Every closure watcher (registered before) has run once each close future has completed.
        for channel in listener.channels.withLockedValue({ $0 }) { try await channel.closeFuture.get() }
        #expect(listener.reopened == originals.count)
        #expect(listener.channels.withLockedValue { $0.allSatisfy { !$0.isActive } })
    }
}
