import Testing

@testable import SleepProxyHomeAssistant

@Suite("Retained topics")
struct RetainedTopicsTests {
    func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

    @Test func changesGoOutOnceAndRemovalsAreClearedOnce() {
        var topics = RetainedTopics()
        topics.reconnected()
        topics.want(["a": self.bytes("1"), "b": self.bytes("2")])
        #expect(topics.next(10).map(\.topic).sorted() == ["a", "b"])
        topics.want(["a": self.bytes("1"), "b": self.bytes("2")])
        #expect(topics.next(10).isEmpty, "nothing changed")
        topics.want(["a": self.bytes("1")])
        let removal = topics.next(10)
        #expect(removal.count == 1 && removal[0].topic == "b" && removal[0].payload.isEmpty)
        topics.want(["a": self.bytes("1")])
        #expect(topics.next(10).isEmpty, "a removal carried is forgotten")
        #expect(topics.held == 1)
    }

    @Test func theNewestStateWinsAndWhatItReplacedIsCounted() {
        var topics = RetainedTopics()
        topics.reconnected()
        topics.want(["host": self.bytes("asleep")])
        topics.want(["host": self.bytes("waking")])
        topics.want(["host": self.bytes("awake")])
        #expect(topics.waiting == 1)
        let sent = topics.next(10)
        #expect(sent.count == 1 && sent[0].payload == self.bytes("awake"))
        #expect(topics.superseded == 2)
    }

    @Test func aReconnectionCarriesEverythingAgainInOrder() {
        var topics = RetainedTopics()
        topics.want(["homeassistant/x": self.bytes("c"), "sleepproxy/y": self.bytes("s")])
        _ = topics.next(10)
        topics.reconnected()
        #expect(topics.next(1).map(\.topic) == ["homeassistant/x"], "configurations before states")
        #expect(topics.next(1).map(\.topic) == ["sleepproxy/y"])
    }

    @Test func whatAPreviousRunLeftIsClearedAndEchoesChangeNothing() {
        var topics = RetainedTopics()
        topics.want(["kept": self.bytes("1")])
        _ = topics.next(10)
        topics.found("kept", self.bytes("1"))
        topics.found("stale", [])
        #expect(topics.waiting == 0)
        topics.found("stale", self.bytes("old config"))
        let cleared = topics.next(10)
        #expect(cleared.count == 1 && cleared[0].topic == "stale" && cleared[0].payload.isEmpty)
    }
}

extension RetainedTopicsTests {
    /// Someone who may write our topics left more leftovers than the bound: as many as it allows wait to be
    /// cleared, the rest are counted and found again at the next connection.
    @Test func leftoversWaitingToBeClearedAreBounded() {
        var topics = RetainedTopics()
        for n in 0..<RetainedTopics.maximumStale {
            topics.found("homeassistant/sensor/sleepproxy_pi/x\(n)/config", Array("{}".utf8))
        }
        #expect(topics.waiting == RetainedTopics.maximumStale && topics.staleLeftFor == 0)
        topics.found("homeassistant/sensor/sleepproxy_pi/one-more/config", Array("{}".utf8))
        #expect(topics.waiting == RetainedTopics.maximumStale && topics.staleLeftFor == 1)
        // Clearing makes room again.
        #expect(topics.next(1).count == 1)
        topics.found("homeassistant/sensor/sleepproxy_pi/one-more/config", Array("{}".utf8))
        #expect(topics.waiting == RetainedTopics.maximumStale && topics.staleLeftFor == 1)
    }
}
