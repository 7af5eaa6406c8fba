import NIOCore
import SleepProxyCore
import SleepProxySystem
import SleepProxyWire
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The engine thread's sends: unicast and multicast straight from its own descriptor when the socket takes them at
/// once, the rest left to the channels' event loops (docs/scale.md, "The answer's way out").
extension MulticastSockets {
    /// Sends unicast datagrams at once from the calling thread (the engine's), and queues the rest on their
    /// sockets: one hop to each socket's event loop, one flush.
    ///
    /// Unicast is mostly the answer to a legacy query (RFC 6762 §6.7), which its asker waits for: the hop to an
    /// event loop was a wait of its own for a core, on a busy two-core box, and sending it here took the answers'
    /// p99 during a 10,000-host storm from 1.8-4.7 ms to 1.4-2.0 ms (docs/scale.md). Multicast stays on the event
    /// loops: announcements come in thousands, and their sends would keep the engine from the next question. A
    /// datagram the socket cannot take now (its buffer full) is queued like the others.
    func send(_ transmissions: [(destination: MDNSTransmission.Destination, bytes: [UInt8])]) {
        var queued = transmissions
        if !transmissions.isEmpty {
            let channels = self.channels.withLockedValue { $0 }
            queued.removeAll { transmission in
                // Multicast leaves from the same socket, to the group, whenever the kernel takes it at once, as
                // unicast does: a restart announcing 10,000 hosts again otherwise copied every announcement into a
                // buffer for the event loops in the same moment (restart peak 90.6-90.9 MB without this,
                // 88.2-89.9 MB with it, docs/memory.md). A full socket or any error goes to the event loop as
                // before (and may then leave after datagrams sent here later, as for unicast); only unicast is
                // counted.
                if case .multicast(let index, let family) = transmission.destination {
                    guard let socket = channels[Key(interfaceIndex: index, family: family)]?.replySocket, socket >= 0
                    else { return false }
                    let group = family == .v4 ? self.group4 : self.group6
                    var sent = -1
                    repeat {
                        sent = transmission.bytes.withUnsafeBytes { bytes in
                            PosixSocketAddress(group, port: self.profile.port, scope: index).withSockaddr {
                                address, length in
                                sendto(socket, bytes.baseAddress, bytes.count, CInt(MSG_DONTWAIT), address, length)
                            }
                        }
                    } while sent < 0 && errno == EINTR
                    return sent == transmission.bytes.count
                }
                guard case .unicast(let address, let port, let index) = transmission.destination,
                    let socket = channels[Key(interfaceIndex: index, family: IPFamily(address))]?.replySocket,
                    socket >= 0
                else { return false }
                var sent = -1
                var code: CInt = 0
                repeat {
                    sent = transmission.bytes.withUnsafeBytes { bytes in
                        PosixSocketAddress(address, port: port, scope: index).withSockaddr { address, length in
                            sendto(socket, bytes.baseAddress, bytes.count, CInt(MSG_DONTWAIT), address, length)
                        }
                    }
                    code = sent < 0 ? errno : 0
                } while sent < 0 && code == EINTR
                if sent == transmission.bytes.count { return true }
                // Only a full socket is worth waiting for: the event loop sends when it has room. Any other error
                // would come back there, and NIO closes the socket over it (docs/linux.md §1.10); the answer is
                // lost either way, so it is dropped here and counted.
                if sent < 0, code == EAGAIN || code == EWOULDBLOCK {
                    self.deferred.add(1, ordering: .relaxed)
                    return false
                }
                self.failed.add(1, ordering: .relaxed)
                return true
            }
        }
        for (channel, envelopes) in self.route(queued) {
            channel.eventLoop.execute {
                for envelope in envelopes { channel.write(envelope, promise: nil) }
                channel.flush()
            }
        }
    }

    /// Sends and waits until the kernel has the datagrams (at shutdown, so the goodbyes leave before the process
    /// does).
    func sendAndWait(_ transmissions: [(destination: MDNSTransmission.Destination, bytes: [UInt8])]) {
        var futures: [EventLoopFuture<Void>] = []
        for (channel, envelopes) in self.route(transmissions) {
            for envelope in envelopes { futures.append(channel.write(envelope)) }
            channel.flush()
        }
        for future in futures { try? future.wait() }
    }

    private func route(_ transmissions: [(destination: MDNSTransmission.Destination, bytes: [UInt8])]) -> [(
        Channel, [AddressedEnvelope<ByteBuffer>]
    )] {
        guard !transmissions.isEmpty else { return [] }
        let channels = self.channels.withLockedValue { $0 }
        var byChannel: [ObjectIdentifier: (Channel, [AddressedEnvelope<ByteBuffer>])] = [:]
        for transmission in transmissions {
            let key: Key
            let remote: SocketAddress
            switch transmission.destination {
            case .multicast(let index, let family):
                key = Key(interfaceIndex: index, family: family)
                remote = family == .v4 ? self.groupAddress4 : self.groupAddress6
            case .unicast(let address, let port, let index):
                key = Key(interfaceIndex: index, family: IPFamily(address))
                remote = Self.socketAddress(address, port: port, scope: index)
            }
            guard let found = channels[key] else { continue }
            let channel = found.sender ?? found.listener
            byChannel[ObjectIdentifier(channel), default: (channel, [])].1.append(
                AddressedEnvelope(remoteAddress: remote, data: ByteBuffer(bytes: transmission.bytes)))
        }
        return Array(byChannel.values)
    }

    var group4: IPAddress { IPAddress(self.profile.group4)! }
    var group6: IPAddress { IPAddress(self.profile.group6)! }

    var groupAddress4: SocketAddress {
        try! SocketAddress(ipAddress: self.profile.group4, port: Int(self.profile.port))
    }
    var groupAddress6: SocketAddress {
        try! SocketAddress(ipAddress: self.profile.group6, port: Int(self.profile.port))
    }
}
