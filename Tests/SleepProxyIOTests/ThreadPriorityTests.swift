import CSleepProxyLinux
import Dispatch
import Foundation
import Testing

@testable import SleepProxyIO

/// The history's read at start yields to the restore by lowering its own thread's priority
/// (`HistoryRead.priorityDecrease`). Linux keeps a nice value per thread; were the drop to reach another thread (the
/// engine's, the packet readers'), the proxy would answer at nice +10 for as long as it runs.
@Suite("Thread priority")
struct ThreadPriorityTests {
    /// The nice value of the calling thread, as the kernel shows it (field 19 of /proc/thread-self/stat).
    static func niceOfThisThread() throws -> Int {
        let stat = try String(contentsOfFile: "/proc/thread-self/stat", encoding: .utf8)
        let afterName = try #require(stat.lastIndex(of: ")"))
        // Fields from the third (state) on; nice is the 19th field of the line, the 17th of these.
        let fields = stat[stat.index(after: afterName)...].split(separator: " ")
        return try #require(Int(fields[16]))
    }

    @Test func onlyTheCallingThreadIsLowered() throws {
        let before = try Self.niceOfThisThread()
        let measured = DispatchSemaphore(value: 0)
        nonisolated(unsafe) var inside: (before: Int, after: Int, result: Int32)? = nil
        try startThread(name: "nice-test") {
            let start = (try? Self.niceOfThisThread()) ?? -100
            let result = csp_lower_thread_priority(HistoryRead.priorityDecrease)
            inside = (start, (try? Self.niceOfThisThread()) ?? -100, result)
            measured.signal()
        }
        #expect(measured.wait(timeout: .now() + 10) == .success)
        let seen = try #require(inside)
        #expect(seen.result == 0)
        #expect(seen.after == min(19, seen.before + Int(HistoryRead.priorityDecrease)), "the thread that asked")
        #expect(try Self.niceOfThisThread() == before, "not the thread that started it")
    }
}
