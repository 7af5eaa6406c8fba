import Foundation
import SleepProxyTestSupport
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The helper every lab test starts processes through: its time limit bounds the child, and what the child wrote
/// is all there whoever else holds the pipes.
@Suite("Running a command", .ownThread)
struct CommandTests {
    /// A process that outlives the command and holds its output pipe (what another test's daemon does when it
    /// inherits the pipe at the moment it is spawned) must not turn a finished command into a timed-out one.
    @Test func aCommandThatEndedIsNotKeptWaitingByWhoeverHoldsItsOutput() throws {
        let result = try Command.run(["sh", "-c", "sleep 30 & echo $!; echo done >&2"], timeout: .seconds(5))
        if let holder = Int32(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) { kill(holder, SIGKILL) }
        #expect(result.succeeded, "\(result)")
        #expect(result.stderr == "done\n", "\(result)")
    }

    @Test func aCommandPastItsTimeIsKilledAndSaysSo() throws {
        // 3 s: time enough for the shell to print before the limit even on a loaded machine.
        let result = try Command.run(["sh", "-c", "echo started; exec sleep 30"], timeout: .seconds(3))
        #expect(result.timedOut && result.status == 128 + SIGKILL && result.stdout == "started\n", "\(result)")
        #expect(!result.succeeded)
    }

    @Test func outputLargerThanAPipeAndInputArriveWhole() throws {
        // 1 MiB each way: more than a pipe holds, so both must be read while the child writes.
        let text = String(repeating: "a line of the input, 40 bytes long ....\n", count: 26_215)
        let result = try Command.run(["sh", "-c", "cat; head -c 1048576 /dev/zero >&2"], input: Data(text.utf8))
        #expect(result.succeeded)
        #expect(result.stdout == text)
        #expect(result.stderr.utf8.count == 1 << 20)
    }

    @Test func theExitStatusIsTheChilds() throws {
        #expect(try Command.run(["sh", "-c", "exit 3"]).status == 3)
        let killed = try Command.run(["sh", "-c", "kill -KILL $$"])
        #expect(killed.status == 128 + SIGKILL, "\(killed)")
    }
}
