import Glibc
import SleepProxyControl
import SleepProxyCore
import SleepProxySystem
import SleepProxyWire

/// `sleepproxyctl release-all --transfer` (docs/several-proxies.md): each host is offered to
/// the best other proxy on its link with the host's own Owner option, as Apple's proxy does before it sleeps.
/// The exchanges block for up to seconds, so they run on a thread of their own; the engine learns the outcome
/// from the mailbox, drops the hosts taken silently and wakes the rest.
extension EngineRunner {
    /// Tries per host and how long each waits for the answer: Apple's client tries a proxy three times, a second
    /// apart.
    static let transferTries = 3
    static let transferWait: Double = 1

    func startTransfers(reply: @escaping @Sendable (ControlResponse) -> Void, now: Timestamp) {
        let plan = self.engine.transferPlan(now: now)
        let mailbox = self.mailbox
        let logger = self.logger
        do {
            try startThread(name: "transfers") {
                var taken: [OwnerKey: String] = [:]
                for transfer in plan where Self.exchange(transfer) { taken[transfer.key] = transfer.peer.label }
                if !mailbox.post(.transfersDone(taken: taken, reply: reply)) {
                    logger.warning("admin: release-all --transfer finished but the engine's queue was full")
                }
            }
        } catch {
            // No thread: nothing was handed over; every host is woken as by a plain release-all.
            _ = self.mailbox.post(.transfersDone(taken: [:], reply: reply))
        }
    }

    /// Sends one host's UPDATEs from `source` to the proxy and waits for a NOERROR answer with the same ID to
    /// each of them; a refusal or silence after every try is a no.
    static func exchange(_ transfer: ProxyEngine.HostTransfer) -> Bool {
        guard case .v4(let from) = transfer.source, case .v4(let to) = transfer.peer.address,
            let port = transfer.peer.port
        else { return false }
        let fd = socket(AF_INET, PosixSocket.datagram | PosixSocket.closeOnExec, 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var timeout = timeval(tv_sec: Int(Self.transferWait), tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        guard PosixSocketAddress(.v4(from), port: 0).bind(fd) else { return false }
        // Connected: the kernel passes on only datagrams from the proxy asked, so nobody else can answer for it.
        guard PosixSocketAddress(.v4(to), port: port).connect(fd) else { return false }
        for _ in 0..<Self.transferTries {
            for message in transfer.messages {
                _ = message.withUnsafeBytes { raw in send(fd, raw.baseAddress, raw.count, 0) }
            }
            var acknowledged = 0
            var buffer = [UInt8](repeating: 0, count: 1500)
            while acknowledged < transfer.messages.count {
                let count = recv(fd, &buffer, buffer.count, 0)
                guard count >= 12 else { break }  // the wait ran out (or an error): try again
                let id = UInt16(buffer[0]) << 8 | UInt16(buffer[1])
                // A response (QR set) to our ID; RCODE 0 is NOERROR, anything else a refusal.
                guard id == transfer.id, buffer[2] & 0x80 != 0 else { continue }
                guard buffer[3] & 0x0F == 0 else { return false }
                acknowledged += 1
            }
            if acknowledged == transfer.messages.count { return true }
        }
        return false
    }
}
