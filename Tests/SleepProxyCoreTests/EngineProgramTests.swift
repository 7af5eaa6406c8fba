import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore

/// The engine fuzz target's programs (docs/fuzzing.md), run in every test run: random programs from fixed seeds
/// (the same each run), and the programs that once broke an invariant. `scripts/fuzz engine` explores further.
@Suite("Engine programs")
struct EngineProgramTests {
    /// Programs per run and their length: about two seconds of a debug build.
    static let programs = 200
    static let length = 1500

    @Test func randomProgramsKeepEveryInvariant() {
        var random = SplitMix64(seed: 0x5EED_2026)
        var steps = 0
        var asleep = 0
        var adopted = 0
        for index in 0..<Self.programs {
            let bytes = (0..<Self.length).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            var program = EngineProgram(bytes)
            if let violation = program.run() {
                Issue.record("program \(index): \(violation); bytes: \(bytes)")
                return
            }
            steps += program.steps
            if program.reachedAsleep { asleep += 1 }
            if program.reachedAdoptedAsleep { adopted += 1 }
        }
        print("engine programs: \(asleep) of \(Self.programs) got a host asleep, \(adopted) an adopted one")
        #expect(steps > Self.programs * 60, "the programs ran their steps (\(steps))")
        #expect(asleep > Self.programs / 10, "only \(asleep) programs got a host asleep")
        #expect(adopted > 0, "no program held an adopted host asleep")
    }

    /// A host asleep, then up on its only address (its gratuitous ARP), then asked for: the proxy must not answer.
    /// With the responder left speaking for an awake host (the silence removed from the engine), this program
    /// breaks the invariant, which is how the check was shown to work.
    @Test func aHostUpOnItsOnlyAddressIsNotAnsweredFor() {
        let bytes: [UInt8] = [
            0, 0, 0b0000_1001, 30, 0, 1,  // host 0 registers 192.0.2.2 and one service
            10, 0, 250, 10, 0, 250,  // 50 s: probed, claimed, asleep
            6, 0, 1, 0,  // its own gratuitous ARP: up on every address it registered
            2, 0, 0, 0,  // someone asks for host0.local. A
            10, 0, 30, 2, 0, 0, 0,
        ]
        var program = EngineProgram(bytes)
        #expect(program.run() == nil)
        #expect(program.reachedAsleep && program.engine.hosts(in: .awake).count == 1, "\(program.engine.hostsByState)")
    }

    /// A program that registers a host, lets it fall asleep and asks for it: the checks see a host asleep and
    /// its answers, so they are not vacuous.
    @Test func aHandWrittenProgramReachesAsleepAndAnswers() {
        // register host 0 (v4, one service, 30 min lease), time 3 × 25 s, a question for its name.
        let bytes: [UInt8] = [0, 0, 0b0000_1001, 30, 0, 1, 10, 0, 250, 10, 0, 250, 10, 0, 250, 2, 0, 0, 0]
        var program = EngineProgram(bytes)
        #expect(program.run() == nil)
        #expect(program.engine.registrar.store.hostCount == 1, "\(program.engine.registrar.statistics)")
        #expect(program.engine.hosts(in: .asleep).count == 1, "\(program.engine.hostsByState)")
    }
}
