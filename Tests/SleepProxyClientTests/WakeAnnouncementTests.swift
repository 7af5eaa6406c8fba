import Testing

@testable import SleepProxyClient

@Suite("Wake announcements")
struct WakeAnnouncementTests {
    /// After a wake the client repeats its Owner option for Apple's 60 s (docs/protocol.md §3.5): a probe burst, then
    /// doubling gaps, ten packets in all, the last at the end of the window; shorter windows are cut, not stretched.
    @Test func wakeAnnouncementsCoverAppleWindowInTenPackets() {
        let full = WakeAnnouncement.schedule()
        #expect(
            full == [
                .zero, .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2), .seconds(4), .seconds(8),
                .seconds(16), .seconds(32), .seconds(60),
            ])
        #expect(WakeAnnouncement.window == .seconds(60))
        #expect(
            WakeAnnouncement.schedule(window: .seconds(5)) == [
                .zero, .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(2), .seconds(4), .seconds(5),
            ])
        #expect(
            WakeAnnouncement.schedule(window: .seconds(1)) == [
                .zero, .milliseconds(250), .milliseconds(500), .seconds(1),
            ])
        #expect(WakeAnnouncement.schedule(window: .zero) == [.zero])
        #expect(zip(full, full.dropFirst()).allSatisfy { $0 < $1 })
    }
}
