import Foundation
import NIOConcurrencyHelpers
import Testing

@testable import SleepProxyIO

/// Events posted as routine (`Mailbox.post(_:prompt:)`) wait for the consumer's next wake-up instead of causing
/// one, keep their order, and wait `routineDelay` at most.
@Suite("Mailbox: routine events")
struct MailboxTests {
    /// Runs `body` on another thread once the consumer waits in poll (a bounded look, a millisecond apart).
    static func whenWaiting(_ mailbox: Mailbox<Int>, _ body: @escaping @Sendable () -> Void) {
        Thread {
            for _ in 0..<30_000 where !mailbox.consumer.waiting { usleep(1000) }
            body()
        }.start()
    }

    @Test func aRoutinePostLeavesTheConsumerWaitingAndGoesWithTheNextPromptOne() throws {
        let mailbox = try Mailbox<Int>(capacity: 8, lanes: 2, routineDelay: .seconds(3600), lane: { $0 % 2 })
        let seen = NIOLockedValueBox<(waiting: Bool, wakeUps: Int)?>(nil)
        Self.whenWaiting(mailbox) {
            mailbox.post(1, prompt: false)
            mailbox.post(3, prompt: false)
            mailbox.wakeIfRoutineOverdue()
            seen.withLockedValue { $0 = mailbox.consumer }
            mailbox.post(2)
        }
        let started = Date()
        let (events, stopped) = mailbox.take(timeout: 60)
        #expect(events == [1, 3, 2] && !stopped, "in their order, across lanes")
        #expect(seen.withLockedValue { $0 }! == (true, 0), "still waiting after two routine posts")
        #expect(mailbox.consumer.wakeUps == 1)
        #expect(Date().timeIntervalSince(started) < 30)
    }

    @Test func aRoutinePostThatWaitedItsDelayWakesTheConsumer() throws {
        // A delay of zero: the first routine post only notes when it came; the next look finds it overdue.
        for byPost in [true, false] {
            let mailbox = try Mailbox<Int>(capacity: 8, routineDelay: .zero)
            Self.whenWaiting(mailbox) {
                mailbox.post(1, prompt: false)
                if byPost { mailbox.post(2, prompt: false) } else { mailbox.wakeIfRoutineOverdue() }
            }
            let started = Date()
            let (events, _) = mailbox.take(timeout: 60)
            #expect(events == (byPost ? [1, 2] : [1]))
            #expect(mailbox.consumer.wakeUps == 1)
            #expect(Date().timeIntervalSince(started) < 30)
        }
    }

    @Test func aRoutineEventQueuedWhileTheConsumerWorksIsTakenWithoutWaiting() throws {
        let mailbox = try Mailbox<Int>(capacity: 8, routineDelay: .seconds(3600))
        mailbox.post(1, prompt: false)
        let started = Date()
        let (events, _) = mailbox.take(timeout: 60)
        #expect(events == [1] && Date().timeIntervalSince(started) < 30)
        #expect(mailbox.consumer.wakeUps == 0)
    }

    @Test func aFullLaneRefusesRoutineEventsToo() throws {
        let mailbox = try Mailbox<Int>(capacity: 2, routineDelay: .seconds(3600))
        #expect(mailbox.post(1, prompt: false) && mailbox.post(2, prompt: false))
        #expect(!mailbox.post(3, prompt: false))
        #expect(mailbox.dropped == 1)
    }
}
