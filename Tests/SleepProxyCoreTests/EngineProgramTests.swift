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
        var waking = 0
        var woken = 0
        var handedBack = 0
        var heldAfterGoodbyes = 0
        var quietResumes = 0
        var restarts = 0
        var windowsAnswers = 0
        // Half of them with three hosts adopted from the start, so that adoption's edges are reached.
        for index in 0..<Self.programs {
            let bytes = (0..<Self.length).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            var program = EngineProgram(bytes, adopting: index % 2 == 1 ? 3 : 0)
            if let violation = program.run() {
                Issue.record("program \(index): \(violation); bytes: \(bytes)")
                return
            }
            steps += program.steps
            if program.reachedAsleep { asleep += 1 }
            if program.reachedAdoptedAsleep { adopted += 1 }
            if program.reachedWaking { waking += 1 }
            if program.reachedWoken { woken += 1 }
            if program.reachedHandedBack { handedBack += 1 }
            if program.reachedHeldAfterGoodbyes { heldAfterGoodbyes += 1 }
            if program.reachedQuietResume { quietResumes += 1 }
            if program.reachedRestartWithLearned { restarts += 1 }
            if program.reachedWindowsAnswer { windowsAnswers += 1 }
        }
        print(
            "engine programs: of \(Self.programs), \(asleep) got a host asleep, \(adopted) an adopted one; "
                + "\(waking) woke a host, \(woken) saw one answer its wake, \(handedBack) handed one back; "
                + "\(heldAfterGoodbyes) held an adopted host after its sleep goodbyes, \(quietResumes) handed one back "
                + "at a quiet resume, \(restarts) restarted knowing one; \(windowsAnswers) answered a Windows client for a "
                + "sleeping PC")
        #expect(steps > Self.programs * 60, "the programs ran their steps (\(steps))")
        #expect(asleep > Self.programs / 10, "only \(asleep) programs got a host asleep")
        #expect(adopted > 0, "no program held an adopted host asleep")
        // Adoption's edges (docs/adoption.md §3), in some programs each.
        #expect(heldAfterGoodbyes > 0, "no program held an adopted host after its sleep goodbyes")
        #expect(quietResumes > 0, "no program handed an adopted host back at a quiet resume")
        #expect(restarts > 0, "no program restarted the proxy while it knew an adopted host")
        #expect(windowsAnswers > 0, "no program answered a Windows client for a sleeping PC")
        // The lifecycle's later half, in most programs (docs/fuzzing.md).
        #expect(waking > Self.programs / 2, "only \(waking) programs woke a host")
        #expect(woken > Self.programs / 2, "only \(woken) programs saw a woken host answer")
        #expect(handedBack > Self.programs / 2, "only \(handedBack) programs handed a host back")
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

    /// An adopted PC teaches its names (its NetBIOS registration, its node-status answer), falls silent and is
    /// asked for by a Windows client: answered from its address. Then it registers its name again (up: handed back)
    /// and is asked again: the audit sees whether anything still answers for it. With the silencing of its Windows
    /// names at the hand-back removed (`carryOut`, `.end`), this program breaks the invariant twice over: the names
    /// are still marked for a host no longer held, and, with that check left out, the client's second question is
    /// answered from the PC's address. The random programs catch the silencing removed at `.silence` too.
    @Test func aSleepingPCIsAnsweredForByNameAndNotOnceItIsUp() {
        let bytes: [UInt8] = [
            7, 0, 1, 0,  // host 0's NetBIOS registration of HOST0<20>, broadcast
            7, 0, 1, 1,  // its answer to the proxy's node-status question
            10, 0, 250,  // 25 s: checked by node status, unanswered, asleep
            0,  // then a client's name query for HOST0<20> (`windowsClientAsks`)
            7, 0, 1, 0,  // the PC registers its name again: it is up
            7, 0, 1, 4,  // and is asked for again
            10, 0, 30,
        ]
        var program = EngineProgram(bytes, adopting: 1)
        #expect(program.run() == nil)
        #expect(program.reachedWindowsAnswer, "the client's name query went unanswered")
        #expect(program.engine.hosts(in: .asleep).isEmpty, "\(program.engine.hostsByState)")
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

    /// The programs `scripts/fuzz engine` found breaking an invariant (`FoundEngineProgram.all`), each run as the
    /// finding was kept.
    @Test(arguments: FoundEngineProgram.all)
    func aProgramTheFuzzerFoundKeepsEveryInvariant(_ found: FoundEngineProgram) {
        var program = EngineProgram(found.bytes, adopting: found.adopting)
        #expect(program.run() == nil)
    }
}
