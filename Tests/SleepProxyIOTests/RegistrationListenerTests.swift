import Foundation
import Logging
import NIOCore
import SleepProxyTestSupport
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
        let (listener, directory) = try await Self.listener()
        defer { try? FileManager.default.removeItem(at: directory) }
        let originals = listener.channels.withLockedValue { $0 }
        #expect(!originals.isEmpty)
        let ports = originals.compactMap { $0.localAddress?.port }
        for channel in originals { try await channel.close() }

        _ = waitUntil(timeout: 5, interval: 0.01) { listener.reopened >= originals.count }
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

    /// A copy of the descriptor that outlives the close (a child being spawned at that instant, docs/linux.md §6)
    /// keeps the port taken for a moment: the listener tries again until it is free, and binds the same port.
    @Test func aPortStillHeldForAMomentIsBoundAgainOnceFree() async throws {
        let (listener, directory) = try await Self.listener()
        defer { try? FileManager.default.removeItem(at: directory) }
        let (original, port, copy) = try Self.heldIPv4Socket(of: listener)
        try await original.close()
        // The first attempt, made as the close future completes, meets the copy; let the port go once a retry has
        // met it too.
        #expect(waitUntil(timeout: 5) { listener.rebindsHeldBack >= 2 })
        #expect(listener.reopened == 0, "bound again while the port was still taken")
        close(copy)
        #expect(waitUntil(timeout: 5) { listener.reopened == 1 })
        let rebound = listener.channels.withLockedValue { $0 }
        #expect(rebound.contains { $0.isActive && $0.localAddress?.protocol == .inet && $0.localAddress?.port == port })
        #expect(!rebound.contains { $0 === original })
        await listener.close()
    }

    /// A port that stays taken (another program bound it) is tried `rebindAttempts` times and then reported, not
    /// retried for ever.
    @Test func aPortTakenForGoodIsTriedABoundedNumberOfTimes() async throws {
        let (listener, directory) = try await Self.listener()
        defer { try? FileManager.default.removeItem(at: directory) }
        let (original, _, copy) = try Self.heldIPv4Socket(of: listener)
        defer { close(copy) }
        try await original.close()
        #expect(waitUntil(timeout: 15) { listener.rebindsAbandoned == 1 })
        // N attempts: the first and N - 1 retries, each of which met the port taken.
        #expect(listener.rebindsHeldBack == RegistrationListener.rebindAttempts - 1)
        #expect(listener.reopened == 0)
        await listener.close()
    }

    /// A listener on ports of the system's choosing, with a state directory of its own (the caller removes it).
    static func listener() async throws -> (RegistrationListener, URL) {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "sleepproxy-listener-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        let engine = try EngineRunner(configuration: .init(stateDirectory: directory), logger: Logger(label: "test"))
        return (try await RegistrationListener.bind(port: 0, engine: engine, logger: Logger(label: "test")), directory)
    }

    /// The listener's IPv4 socket, its port, and a copy of its descriptor that keeps the port taken until closed.
    static func heldIPv4Socket(of listener: RegistrationListener) throws -> (Channel, Int, CInt) {
        let original = try #require(
            listener.channels.withLockedValue { $0.first { $0.localAddress?.protocol == .inet } })
        let port = try #require(original.localAddress?.port)
        let copy = try #require(Self.descriptor(ofUDPPort: port), "no descriptor found for UDP port \(port)")
        return (original, port, copy)
    }

    /// A duplicate of this process's IPv4 UDP socket bound on `port`, found through /proc (its inode in
    /// /proc/self/net/udp, then the descriptor naming that inode).
    static func descriptor(ofUDPPort port: Int) -> CInt? {
        guard let table = try? String(contentsOfFile: "/proc/self/net/udp", encoding: .utf8) else { return nil }
        let hexPort = String(format: ":%04X", port)
        var inode: String?
        for line in table.split(separator: "\n").dropFirst() {
            let fields = line.split(separator: " ")
            guard fields.count > 9, fields[1].hasSuffix(hexPort) else { continue }
            inode = String(fields[9])
        }
        guard let inode,
            let entries = try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")
        else { return nil }
        for entry in entries {
            guard let fd = CInt(entry),
                let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(entry)"),
                target == "socket:[\(inode)]"
            else { continue }
            let copy = dup(fd)
            return copy >= 0 ? copy : nil
        }
        return nil
    }
}
