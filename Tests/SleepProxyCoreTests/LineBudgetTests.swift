import Testing

@testable import SleepProxyCore

@Suite("Log lines the network can cause are bounded")
struct LineBudgetTests {
    @Test func twentyLinesAMinuteThenACountInTheNextWindow() {
        var budget = LineBudget()
        let start = Timestamp.seconds(100)
        var allowed = 0
        var lastFlags = 0
        for index in 0..<(LineBudget.linesPerWindow + 1) {
            let verdict = budget.admit("refused tooManyHosts", now: start + .milliseconds(index))
            if verdict.allowed { allowed += 1 }
            if verdict.last { lastFlags += 1 }
            #expect(verdict.leftOut == 0)
        }
        // N lines written, the N+1st counted; the N-th says it is the last.
        #expect(allowed == LineBudget.linesPerWindow && lastFlags == 1)
        for index in 0..<500 {
            _ = budget.admit("refused tooManyHosts", now: start + .seconds(1) + .milliseconds(index))
        }
        // Another kind has a budget of its own.
        #expect(budget.admit("malformed noOwner", now: start + .seconds(2)).allowed)
        // The next window: allowed again, and told how many were left out.
        let next = budget.admit("refused tooManyHosts", now: start + LineBudget.window)
        #expect(next.allowed && next.leftOut == 501)
        #expect(budget.admit("refused tooManyHosts", now: start + LineBudget.window + .seconds(1)).leftOut == 0)
    }
}
