import Foundation
import Testing

/// Runs each test of a suite on a thread of its own, for tests that block: they spawn daemons, wait for
/// namespaces and sockets, and sleep between steps. Run on the cooperative pool (two threads on a two-core
/// machine), two such tests held every other test of the run, the unit tests included, until they finished
/// (docs/linux.md §7). On their own threads they wait without holding anyone, and at most
/// `BlockingTestSlots.limit` of them run at once so the lab's timing stays that of a lightly loaded machine.
struct OwnThreadTrait: SuiteTrait, TestTrait, TestScoping {
    var isRecursive: Bool { true }

    func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        // The suite itself gets a scope too; only its test cases need a thread.
        guard testCase != nil else { return try await function() }
        await BlockingTestSlots.shared.acquire()
        let executor = DedicatedThreadExecutor(name: "test: \(test.name)")
        defer {
            executor.finish()
            Task { await BlockingTestSlots.shared.release() }
        }
        try await withTaskExecutorPreference(executor) { try await function() }
    }
}

extension Trait where Self == OwnThreadTrait {
    /// Each test on a thread of its own, a bounded number at a time (`OwnThreadTrait`).
    static var ownThread: Self { OwnThreadTrait() }
}

/// How many blocking tests run at once. Each lab test mostly waits (for timers of the protocols it exercises,
/// and for its children, without spinning: `Command`), so eight fit on two cores, which stay about half idle;
/// `SLEEPPROXY_LAB_PARALLEL` overrides it (1 runs them one by one, for a bisection).
actor BlockingTestSlots {
    static let defaultLimit = 8
    static let shared = BlockingTestSlots(
        limit: ProcessInfo.processInfo.environment["SLEEPPROXY_LAB_PARALLEL"].flatMap(Int.init).map { max(1, $0) }
            ?? defaultLimit)

    private var available: Int
    private var waiting: [CheckedContinuation<Void, Never>] = []

    init(limit: Int) { self.available = limit }

    func acquire() async {
        if self.available > 0 {
            self.available -= 1
            return
        }
        await withCheckedContinuation { self.waiting.append($0) }
    }

    func release() {
        if self.waiting.isEmpty {
            self.available += 1
        } else {
            self.waiting.removeFirst().resume()
        }
    }
}

/// A task executor with one thread of its own: jobs run there one after another, in the order they came.
final class DedicatedThreadExecutor: TaskExecutor, @unchecked Sendable {
    // @unchecked: `jobs` and `finished` are guarded by `condition`.
    private let condition = NSCondition()
    private var jobs: [UnownedJob] = []
    private var finished = false

    init(name: String) {
        let thread = Thread { [self] in self.run() }
        thread.name = String(name.prefix(15))
        thread.start()
    }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        self.condition.lock()
        defer { self.condition.unlock() }
        guard !self.finished else {
            // A task that outlived its test (it should not): it still runs, on a thread of its own.
            Thread.detachNewThread { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
            return
        }
        self.jobs.append(job)
        self.condition.signal()
    }

    /// Lets the thread end once the jobs it has are done.
    func finish() {
        self.condition.lock()
        self.finished = true
        self.condition.signal()
        self.condition.unlock()
    }

    private func run() {
        while true {
            self.condition.lock()
            while self.jobs.isEmpty && !self.finished { self.condition.wait() }
            guard !self.jobs.isEmpty else {
                self.condition.unlock()
                return
            }
            let job = self.jobs.removeFirst()
            self.condition.unlock()
            job.runSynchronously(on: self.asUnownedTaskExecutor())
        }
    }
}
