import Testing

@testable import SleepProxyIO

@Suite("Frame queue byte budget")
struct ByteBudgetTests {
    @Test func takesUpToTheLimitAndNotOneByteMore() {
        let budget = ByteBudget(limit: PacketLinks.maximumQueuedBytes)
        #expect(budget.take(PacketLinks.maximumQueuedBytes - 60))
        #expect(budget.take(60), "exactly at the limit")
        #expect(!budget.take(1), "one byte past it")
        #expect(budget.inUse == PacketLinks.maximumQueuedBytes)
        budget.give(60)
        #expect(budget.take(60) && !budget.take(1))
        budget.give(PacketLinks.maximumQueuedBytes)
        #expect(budget.inUse == 0)
        budget.give(10)
        #expect(budget.inUse == 0, "giving back more than taken never goes negative")
    }
}
