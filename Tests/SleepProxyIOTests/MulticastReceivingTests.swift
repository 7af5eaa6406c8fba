import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import SleepProxyWire
import Testing

@testable import SleepProxyIO

#if canImport(Glibc)
    import Glibc
#endif

/// The engine thread's own reads of the multicast sockets, on real sockets over loopback: what reaches the engine
/// (with its interface and destination from packet info), what is dropped, and how much one look takes; and the
/// mailbox's wait in poll beside those sockets.
@Suite("Multicast sockets read by the engine thread", .ownThread)
struct MulticastReceivingTests {
    final class Sink: Sendable {
        let events = NIOLockedValueBox<[EngineRunner.Event]>([])
        func post(_ event: EngineRunner.Event) { self.events.withLockedValue { $0.append(event) } }
        var all: [EngineRunner.Event] { self.events.withLockedValue { $0 } }
    }

    /// A socket as the daemon makes them (`boundSocket`, packet info on), on a port of the system's choosing; a
    /// sender bound to 127.0.0.1; the receiving socket's port.
    static func sockets() throws -> (receiver: CInt, sender: CInt, port: UInt16) {
        let receiver = try MulticastSockets.boundSocket(family: .v4, port: 0)
        let sender = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        #expect(sender >= 0)
        return (receiver, sender, Self.port(of: receiver))
    }

    /// The port a socket is bound to (after a first send, for one the system bound then).
    static func port(of socket: CInt) -> UInt16 {
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(socket, $0, &length) }
        }
        return UInt16(bigEndian: address.sin_port)
    }

    static func send(_ count: Int, of size: Int, from sender: CInt, to port: UInt16) {
        var destination = sockaddr_in()
        destination.sin_family = sa_family_t(AF_INET)
        destination.sin_port = port.bigEndian
        destination.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
        let bytes = [UInt8](repeating: 0xAB, count: size)
        for _ in 0..<count {
            let sent = withUnsafePointer(to: &destination) { pointer in
                pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    sendto(sender, bytes, bytes.count, 0, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            #expect(sent == size)
        }
    }

    /// Waits (bounded) until `socket` has something to read.
    static func readable(_ socket: CInt) -> Bool {
        var entry = pollfd(fd: socket, events: Int16(POLLIN), revents: 0)
        return poll(&entry, 1, 2000) == 1
    }

    @Test func datagramsReachTheEngineWithTheirInterfaceAndDestinationUpToTheLargestDNSMessage() throws {
        let (receiver, sender, port) = try Self.sockets()
        defer {
            close(receiver)
            close(sender)
        }
        let sink = Sink()
        let sockets = MulticastSockets(.mdns, logger: Logger(label: "test"), sink: { sink.post($0) })
        Self.send(1, of: 100, from: sender, to: port)
        let senderPort = Self.port(of: sender)
        Self.send(1, of: DNSMessage.maximumSize, from: sender, to: port)
        Self.send(1, of: DNSMessage.maximumSize + 1, from: sender, to: port)
        #expect(Self.readable(receiver))
        #expect(sockets.receive(from: receiver) == 3, "all three read, the one past 9,000 bytes among them")
        #expect(sockets.receive(from: receiver) == 0)
        let events = sink.all
        #expect(events.count == 2, "the one past RFC 6762's 9,000 bytes is dropped")
        let loopback = Int(if_nametoindex("lo"))
        for (event, size) in zip(events, [100, DNSMessage.maximumSize]) {
            guard case .mdns(let bytes, let source, let port, let index, let destination) = event else {
                Issue.record("not an mDNS packet: \(event)")
                continue
            }
            #expect(bytes.count == size && bytes.allSatisfy { $0 == 0xAB })
            #expect(source == .v4(IPv4Address(127, 0, 0, 1)) && port == senderPort && index == loopback)
            #expect(destination == .v4(IPv4Address(127, 0, 0, 1)))
            #expect(event.lane == EngineRunner.Event.mdnsLane)
        }
    }

    @Test func anIPv6SourceKeepsItsAddressAndPortAndLosesItsScope() throws {
        var address = sockaddr_in6()
        address.sin6_family = sa_family_t(AF_INET6)
        address.sin6_port = UInt16(5353).bigEndian
        address.sin6_scope_id = 7
        let bytes: [UInt8] = [0xFE, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xFF, 0xFE, 0x33, 0x44, 0x55]
        withUnsafeMutableBytes(of: &address.sin6_addr) { $0.copyBytes(from: bytes) }
        var storage = sockaddr_storage()
        withUnsafeMutableBytes(of: &storage) { target in
            withUnsafeBytes(of: address) { target.copyMemory(from: $0) }
        }
        let endpoint = try #require(MulticastSockets.endpoint(storage))
        #expect(endpoint.address == .v6(try #require(IPv6Address(bytes: bytes))) && endpoint.port == 5353)
        #expect(MulticastSockets.endpoint(sockaddr_storage()) == nil, "no family, no address")
    }

    @Test func oneLookReadsAtMostABurstAndLeavesTheRestForTheNext() throws {
        let (receiver, sender, port) = try Self.sockets()
        defer {
            close(receiver)
            close(sender)
        }
        let sink = Sink()
        let sockets = MulticastSockets(.ssdp, logger: Logger(label: "test"), sink: { sink.post($0) })
        // Loopback delivers within the send: all N + 1 wait when the first look comes.
        Self.send(MulticastSockets.receiveBurst + 1, of: 40, from: sender, to: port)
        #expect(Self.readable(receiver))
        #expect(sockets.receive(from: receiver) == MulticastSockets.receiveBurst, "N at one look")
        #expect(sockets.receive(from: receiver) == 1, "the N + 1st at the next")
        #expect(sockets.receive(from: receiver) == 0)
        #expect(sink.all.count == MulticastSockets.receiveBurst + 1)
        #expect(sink.all.allSatisfy { $0.lane == EngineRunner.Event.ssdpLane })
        #expect(sockets.droppedByKernel == 0)
    }

    @Test func aReadableDescriptorWakesTheWaitingConsumerAndItsDatagramsAreTakenInTheSameBatch() throws {
        let (receiver, sender, port) = try Self.sockets()
        defer {
            close(receiver)
            close(sender)
        }
        let mailbox = try Mailbox<EngineRunner.Event>(
            capacity: EngineRunner.mailboxCapacity, lanes: EngineRunner.Event.lanes, lane: { $0.lane })
        let sockets = MulticastSockets(.mdns, logger: Logger(label: "test"), sink: { mailbox.post($0) })
        Self.send(2, of: 60, from: sender, to: port)
        var seen: [CInt] = []
        let (events, stopped) = mailbox.take(timeout: 60, watching: [receiver]) { readable in
            seen = readable
            for socket in readable { sockets.receive(from: socket) }
        }
        #expect(seen == [receiver] && events.count == 2 && !stopped)
        // Events queued already: the descriptor is still looked at, without waiting.
        mailbox.post(.linksChanged)
        Self.send(1, of: 60, from: sender, to: port)
        let (more, _) = mailbox.take(timeout: 60, watching: [receiver]) { readable in
            for socket in readable { sockets.receive(from: socket) }
        }
        #expect(more.count == 2)
    }

    @Test func aPostWakesTheConsumerWaitingInPoll() throws {
        let mailbox = try Mailbox<Int>(capacity: 8, lanes: 1)
        let (receiver, sender, _) = try Self.sockets()
        defer {
            close(receiver)
            close(sender)
        }
        let started = Date()
        let poster = Thread { mailbox.post(7) }
        poster.start()
        // Nothing ever comes on `receiver`: only the post (or its having come first) ends the wait before a minute.
        let (events, _) = mailbox.take(timeout: 60, watching: [receiver]) { _ in Issue.record("nothing to read") }
        #expect(events == [7] && Date().timeIntervalSince(started) < 30)
        let stopper = Thread { mailbox.stop() }
        stopper.start()
        let (none, stopped) = mailbox.take(timeout: 60, watching: [receiver])
        #expect(none.isEmpty && stopped && Date().timeIntervalSince(started) < 30)
    }
}
