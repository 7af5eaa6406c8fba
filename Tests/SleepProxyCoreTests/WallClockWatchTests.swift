import Testing

@testable import SleepProxyCore

/// The wall clock stepped while the proxy runs (NTP on a box with no clock of its own, `date -s`): told once, with
/// its size and sign; slewing never adds up to a step (docs/time.md).
@Suite("Wall clock steps")
struct WallClockWatchTests {
    static let wallAtStart: Int64 = 1_790_000_000 * 1_000_000_000
    static let hour: Int64 = 3_600 * 1_000_000_000
    static let day: Int64 = 24 * hour
    static let tenYears: Int64 = 3_652 * day

    @Test(arguments: [hour, -hour, day, -day, tenYears, -tenYears])
    func aStepIsToldOnceWithItsSize(step: Int64) {
        var watch = WallClockWatch(now: .seconds(100), wallNanoseconds: Self.wallAtStart)
        #expect(watch.look(now: .seconds(101), wallNanoseconds: Self.wallAtStart + 1_000_000_000) == nil)
        let stepped = Self.wallAtStart + 2_000_000_000 + step
        #expect(watch.look(now: .seconds(102), wallNanoseconds: stepped) == .nanoseconds(step))
        #expect(watch.look(now: .seconds(103), wallNanoseconds: stepped + 1_000_000_000) == nil, "told once")
    }

    @Test func slewingNeverAddsUpToAStep() {
        // NTP's fastest slew, 500 ppm, for a day of looks a second apart: 43 s in all, never a step.
        var watch = WallClockWatch(now: .seconds(0), wallNanoseconds: Self.wallAtStart)
        var wall = Self.wallAtStart
        for second in 1...86_400 {
            wall += 1_000_500_000
            #expect(watch.look(now: .seconds(Int64(second)), wallNanoseconds: wall) == nil)
        }
    }

    @Test func theThresholdIsOneSecond() {
        let threshold = WallClockWatch.stepThreshold.nanosecondsClamped
        var atN = WallClockWatch(now: .seconds(0), wallNanoseconds: Self.wallAtStart)
        #expect(atN.look(now: .seconds(0), wallNanoseconds: Self.wallAtStart + threshold) == nil, "at N: no step")
        #expect(atN.look(now: .seconds(0), wallNanoseconds: Self.wallAtStart) == nil, "and back at N: none either")
        var pastN = WallClockWatch(now: .seconds(0), wallNanoseconds: Self.wallAtStart)
        #expect(
            pastN.look(now: .seconds(0), wallNanoseconds: Self.wallAtStart + threshold + 1)
                == .nanoseconds(threshold + 1))
        #expect(pastN.look(now: .seconds(0), wallNanoseconds: Self.wallAtStart) == .nanoseconds(-threshold - 1))
    }

    @Test(arguments: [hour, -hour, day, -day, tenYears, -tenYears])
    func aRestartInTheSameBootKeepsEveryLeaseWhateverTheWallClockDid(step: Int64) throws {
        let host = try JournalTests().registrations(1)[0]
        let written = RegistrationJournal.encode(
            .put(host),
            timeBase: TimeBase(bootID: JournalTests.bootA, now: Lab.t0, wallNanoseconds: JournalTests.wallAtT0))
        let later = Lab.t0 + .seconds(600)
        let replay = RegistrationJournal.replay(
            written,
            timeBase: TimeBase(
                bootID: JournalTests.bootA, now: later, wallNanoseconds: JournalTests.wallAtT0 + 600_000_000_000 + step)
        )
        let restored = try #require(replay.registrations.first)
        #expect(restored.leaseExpiry == host.leaseExpiry, "neither early nor late")
    }
}
