import SleepProxyCore
import Testing

@testable import SleepProxyHomeAssistant

@Suite("Press budget")
struct PressBudgetTests {
    @Test func theBudgetIsActedOnAndTheNextPressIsDroppedOnce() {
        var budget = PressBudget()
        let start = Timestamp.seconds(100)
        for n in 0..<PressBudget.maximumPresses {
            #expect(budget.press(now: start + .milliseconds(Int64(n))) == .act)
        }
        #expect(budget.press(now: start + .seconds(1)) == .dropFirst)
        #expect(budget.press(now: start + .seconds(2)) == .drop)
        #expect(budget.dropped == 2)
        // A new window acts again.
        #expect(budget.press(now: start + PressBudget.window) == .act)
    }
}
