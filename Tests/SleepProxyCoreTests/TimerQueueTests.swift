import SleepProxyTestSupport
import SleepProxyWire
import Testing

@testable import SleepProxyCore

@Suite("Timer queue")
struct TimerQueueTests {
    /// Against a plain dictionary walked in full: random scheduling, replacing, cancelling and taking what is due,
    /// with many items due at the same instant (taken in the order they were scheduled).
    @Test func behavesLikeAWalkOverEveryItem() {
        var queue = TimerQueue<Int, Int>()
        var model: [Int: (value: Int, due: Timestamp, order: Int)] = [:]
        var generator = SplitMix64(seed: 42)
        var now = Timestamp.seconds(10)
        var order = 0
        for step in 0..<5_000 {
            let key = Int(generator.next() % 300)
            switch generator.next() % 4 {
            case 0, 1:
                let due = now + .milliseconds(Int64(generator.next() % 50) * 10)
                order += 1
                queue.schedule(step, for: key, at: due)
                model[key] = (step, due, order)
            case 2:
                #expect(queue.remove(key) == model.removeValue(forKey: key)?.value)
            default:
                now = now + .milliseconds(Int64(generator.next() % 40) * 10)
                let expected = model.filter { $0.value.due <= now }.sorted {
                    ($0.value.due, $0.value.order) < ($1.value.due, $1.value.order)
                }
                let taken = queue.takeDue(now: now)
                #expect(taken.map(\.key) == expected.map(\.key), "step \(step)")
                #expect(taken.map(\.value) == expected.map(\.value.value))
                for (key, _) in expected { model[key] = nil }
            }
            #expect(queue.count == model.count)
            #expect(queue.nextDeadline() == model.values.map(\.due).min(), "step \(step)")
        }
        queue.removeAll { key, _ in key % 2 == 0 }
        #expect(queue.values.count == model.keys.filter { $0 % 2 != 0 }.count)
    }

    /// A pass takes at most its limit (the responder's announcements per tick, N and N+1); the rest stay due.
    @Test func aPassTakesAtMostItsLimit() {
        let limit = MDNSRules.maximumAnnouncementsPerTick
        for count in [limit, limit + 1] {
            var queue = TimerQueue<Int, Int>()
            let due = Timestamp.seconds(5)
            for n in 0..<count { queue.schedule(n, for: n, at: due) }
            let first = queue.takeDue(now: due, limit: limit)
            #expect(first.map(\.key) == Array(0..<limit))
            #expect(queue.nextDeadline() == (count > limit ? due : nil))
            #expect(queue.takeDue(now: due, limit: limit).map(\.key) == Array(limit..<count))
        }
    }
}

/// The earlier of two deadlines, either possibly absent (`ProxyEngine.nextDeadline` and its parts).
@Suite("Earliest deadline")
struct EarliestDeadlineTests {
    @Test func theEarlierOrThePresentOneIsKept() {
        let t = Timestamp(nanoseconds: 1_000)
        var deadline: Timestamp? = nil
        Timestamp.keepEarlier(nil, in: &deadline)
        #expect(deadline == nil)
        Timestamp.keepEarlier(t, in: &deadline)
        #expect(deadline == t)
        Timestamp.keepEarlier(Timestamp(nanoseconds: 1_001), in: &deadline)
        #expect(deadline == t, "a later one does not replace it")
        Timestamp.keepEarlier(t, in: &deadline)
        #expect(deadline == t)
        Timestamp.keepEarlier(Timestamp(nanoseconds: 999), in: &deadline)
        #expect(deadline == Timestamp(nanoseconds: 999))
        Timestamp.keepEarlier(nil, in: &deadline)
        #expect(deadline == Timestamp(nanoseconds: 999), "an absent one changes nothing")
    }
}

@Suite("Owner set")
struct OwnerSetTests {
    /// None, one, many and back: the same answers as a Set at every step.
    @Test func behavesLikeASetWhateverItHolds() {
        var owners = OwnerSet()
        var model: Set<OwnerKey> = []
        var generator = SplitMix64(seed: 7)
        for step in 0..<2_000 {
            let key = OwnerKey(
                interface: "eth0", primaryMAC: MACAddress(rawValue: 0x0253_5000_7000 + generator.next() % 4))
            if generator.next() % 2 == 0 {
                owners.insert(key)
                model.insert(key)
            } else {
                owners.remove(key)
                model.remove(key)
            }
            #expect(
                Set(owners) == model && owners.count == model.count && owners.isEmpty == model.isEmpty, "step \(step)")
            #expect(owners.contains(key) == model.contains(key))
        }
    }
}
