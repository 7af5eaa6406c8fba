import CSleepProxyLinux
import Foundation
import SleepProxyCore
import SleepProxyIO
import SleepProxySystem
import SleepProxyTestSupport
import SleepProxyWire

#if canImport(Glibc)
    import Glibc
#endif

/// When each host's registration was acknowledged (monotonic ns, 0 = not yet), shared with the query thread.
final class AcknowledgedTimes: @unchecked Sendable {
    // @unchecked: `order` is guarded by `lock`.
    private let lock = NSLock()
    /// (host, when) in the order acknowledged, so the times only grow.
    private var order: [(host: Int, time: UInt64)] = []

    init(count: Int) { self.order.reserveCapacity(count) }

    func set(_ n: Int, at time: UInt64) { self.lock.withLock { self.order.append((n, time)) } }

    /// A host acknowledged at least `age` ago, picked with `random`, if any.
    func old(_ age: UInt64, random: UInt64) -> Int? {
        let now = monotonicNanoseconds()
        return self.lock.withLock {
            // The acknowledged-early prefix, found by bisection.
            var low = 0
            var high = self.order.count
            while low < high {
                let middle = (low + high) / 2
                if now - self.order[middle].time >= age { low = middle + 1 } else { high = middle }
            }
            return low == 0 ? nil : self.order[Int(random % UInt64(low))].host
        }
    }
}

final class StopFlag: @unchecked Sendable {
    // @unchecked: guarded by `lock`.
    private let lock = NSLock()
    private var stopped = false
    func set() { self.lock.withLock { self.stopped = true } }
    var isSet: Bool { self.lock.withLock { self.stopped } }
}

/// Legacy SRV queries from the querier host, one every `queryInterval`, for hosts acknowledged long enough ago;
/// a query unanswered within half a second is a miss. Bounded: at most 100,000 queries.
final class QueryLoad: @unchecked Sendable {
    // @unchecked: the results are written by the thread and read after `done` is signalled.
    private let done = DispatchSemaphore(value: 0)
    private var rtts: [Double] = []
    private var missed = 0

    init(in querier: LabHost, acknowledged: AcknowledgedTimes, stop: StopFlag) {
        let namespace = querier.namespace
        Thread {
            defer { self.done.signal() }
            _ = try? namespace.inside { () throws -> Void in
                let fd = ScaleLabBenchmark.querySocket()
                defer { close(fd) }
                var generator = SplitMix64(seed: 16)
                var buffer = [UInt8](repeating: 0, count: 9000)
                var id: UInt16 = 0
                let began = monotonicNanoseconds()
                for _ in 0..<100_000 {
                    if stop.isSet { break }
                    usleep(ScaleLabBenchmark.queryInterval)
                    guard let host = acknowledged.old(ScaleLabBenchmark.queryAge, random: generator.next()) else {
                        continue
                    }
                    id &+= 1
                    let sent = realtimeNanoseconds()
                    ScaleLabBenchmark.sendQuery(fd, ScaleLabBenchmark.query(host: host, id: id))
                    let deadline = monotonicNanoseconds() + 500_000_000
                    var answered = false
                    while !answered, monotonicNanoseconds() < deadline {
                        var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                        guard poll(&descriptor, 1, 50) > 0, let arrival = receiveWithTimestamp(fd, &buffer) else {
                            continue
                        }
                        // Only the answer to this query counts (a late one to an earlier query is skipped).
                        if buffer[0] == UInt8(id >> 8), buffer[1] == UInt8(id & 0xFF) {
                            self.rtts.append(Double(arrival &- sent) / 1e6)
                            if ProcessInfo.processInfo.environment["BENCH_SCALE_DEBUG"] != nil,
                                Double(arrival &- sent) / 1e6 > 2
                            {
                                print(
                                    String(
                                        format: "      slow query at %.2f s (monotonic %.3f): %.2f ms",
                                        Double(monotonicNanoseconds() - began) / 1e9,
                                        Double(monotonicNanoseconds()) / 1e9, Double(arrival &- sent) / 1e6))
                            }
                            answered = true
                        }
                    }
                    if !answered { self.missed += 1 }
                }
            }
        }.start()
    }

    func wait() -> ([Double], Int) {
        self.done.wait()
        return (self.rtts, self.missed)
    }
}
