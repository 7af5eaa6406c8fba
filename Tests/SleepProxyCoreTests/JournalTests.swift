import Dispatch
import Testing

@testable import SleepProxyCore
@testable import SleepProxyWire

@Suite("Registration journal")
struct JournalTests {
    static let bootA: [UInt8] = Array(repeating: 0xAA, count: 16)
    static let bootB: [UInt8] = Array(repeating: 0xBB, count: 16)
    /// Boot clock at t0 corresponds to wall time 1,700,000,000 s.
    static let wallAtT0: Int64 = 1_700_000_000 * 1_000_000_000

    func timeBase(boot: [UInt8] = bootA, now: Timestamp, wall: Int64) -> TimeBase {
        TimeBase(bootID: boot, now: now, wallNanoseconds: wall)
    }

    func registrations(_ count: Int) throws -> [OwnerRegistration] {
        var registrar = Registrar()
        return try (0..<count).map { n in
            let address = IPAddress("192.0.2.\(10 + n)")!
            let message = Lab.registration(
                id: UInt16(n), mac: MACAddress(rawValue: 0x0253_5000_1000 + UInt64(n)), lease: 3600,
                addresses: [address])
            guard
                case .accepted(let acceptance) = registrar.handle(
                    datagram: message.encoded(options: .appleUpdate), from: address, on: Lab.eth0, now: Lab.t0)
            else {
                throw CancellationError()
            }
            return acceptance.registration
        }
    }

    @Test func roundTripWithinTheSameBootIsExact() throws {
        let hosts = try self.registrations(3)
        let writeBase = self.timeBase(now: Lab.t0, wall: Self.wallAtT0)
        var journal: [UInt8] = []
        for host in hosts { journal += RegistrationJournal.encode(.put(host), timeBase: writeBase) }
        journal += RegistrationJournal.encode(.remove(hosts[1].key), timeBase: writeBase)
        // Restart 10 minutes later in the same boot, with the wall clock stepped back a day: irrelevant.
        let replay = RegistrationJournal.replay(
            journal, timeBase: self.timeBase(now: Lab.t0 + .seconds(600), wall: Self.wallAtT0 - 86_400_000_000_000))
        #expect(replay.problems.isEmpty)
        #expect(replay.entryCount == 4)
        #expect(replay.intactLength == journal.count)
        #expect(replay.registrations == [hosts[0], hosts[2]])
    }

    @Test func afterARebootTheWallClockGivesTheRemainingLease() throws {
        let host = try self.registrations(1)[0]
        let journal = RegistrationJournal.encode(.put(host), timeBase: self.timeBase(now: Lab.t0, wall: Self.wallAtT0))
        // New boot: the boot clock restarted near zero; 20 minutes of wall time passed.
        let newNow = Timestamp.seconds(5)
        let replay = RegistrationJournal.replay(
            journal, timeBase: self.timeBase(boot: Self.bootB, now: newNow, wall: Self.wallAtT0 + 1_200_000_000_000))
        let restored = try #require(replay.registrations.first)
        #expect(restored.leaseExpiry - newNow == .seconds(3600 - 1200))
        #expect(restored.records.map(\.record) == host.records.map(\.record))
        #expect(restored.owner == host.owner)
        #expect(restored.summary == host.summary)
    }

    @Test func aWallClockStepBackNeverLengthensALease() throws {
        let host = try self.registrations(1)[0]
        // Written 10 minutes into the lease.
        let written = RegistrationJournal.encode(
            .put(host), timeBase: self.timeBase(now: Lab.t0 + .seconds(600), wall: Self.wallAtT0 + 600_000_000_000))
        // After a reboot the wall clock reads two hours *earlier* than when it was written.
        let newNow = Timestamp.seconds(1)
        let replay = RegistrationJournal.replay(
            written, timeBase: self.timeBase(boot: Self.bootB, now: newNow, wall: Self.wallAtT0 - 6_600_000_000_000))
        let restored = try #require(replay.registrations.first)
        // No more than what was left when it was written (3000 s), not 3000 s + 2 h.
        #expect(restored.leaseExpiry - newNow == .seconds(3000))
    }

    @Test func expiredHostsAreNotRestored() throws {
        let host = try self.registrations(1)[0]
        let journal = RegistrationJournal.encode(.put(host), timeBase: self.timeBase(now: Lab.t0, wall: Self.wallAtT0))
        let replay = RegistrationJournal.replay(
            journal, timeBase: self.timeBase(now: Lab.t0 + .seconds(3600), wall: Self.wallAtT0))
        #expect(replay.registrations.isEmpty)
        #expect(replay.expired.map(\.key) == [host.key])
    }

    @Test func aCorruptEntryIsSkippedWithoutLosingTheOthers() throws {
        let hosts = try self.registrations(3)
        let base = self.timeBase(now: Lab.t0, wall: Self.wallAtT0)
        let entries = hosts.map { RegistrationJournal.encode(.put($0), timeBase: base) }
        for damage in ["payload", "magic", "length"] {
            var middle = entries[1]
            switch damage {
            case "payload": middle[middle.count / 2] ^= 0x40
            case "magic": middle[0] = 0x00
            default: middle[4] = 0x7F
            }
            let replay = RegistrationJournal.replay(entries[0] + middle + entries[2], timeBase: base)
            #expect(replay.registrations.map(\.key) == [hosts[0].key, hosts[2].key], "\(damage)")
            #expect(replay.problems.count == 1, "\(damage): \(replay.problems)")
        }
    }

    @Test func aTornTailIsReportedAndMeasured() throws {
        let hosts = try self.registrations(2)
        let base = self.timeBase(now: Lab.t0, wall: Self.wallAtT0)
        let first = RegistrationJournal.encode(.put(hosts[0]), timeBase: base)
        let second = RegistrationJournal.encode(.put(hosts[1]), timeBase: base)
        for cut in [1, 4, 11, 12, second.count / 2, second.count - 1] {
            let replay = RegistrationJournal.replay(first + second.prefix(cut), timeBase: base)
            #expect(replay.registrations.map(\.key) == [hosts[0].key], "cut \(cut)")
            #expect(replay.intactLength == first.count, "cut \(cut)")
            #expect(replay.problems.count == 1, "cut \(cut)")
        }
    }

    /// The zeros written ahead of the entries (docs/state.md, "SD-card wear") end the journal without a problem;
    /// an entry torn while overwriting them is damage after the last intact entry, measured for cutting, however
    /// far it got.
    @Test func theZerosAheadEndTheJournalAndATornEntryInThemIsMeasured() throws {
        let hosts = try self.registrations(2)
        let base = self.timeBase(now: Lab.t0, wall: Self.wallAtT0)
        let first = RegistrationJournal.encode(.put(hosts[0]), timeBase: base)
        let second = RegistrationJournal.encode(.put(hosts[1]), timeBase: base)
        let zeros = [UInt8](repeating: 0, count: 4096)
        for tail in [0, 1, 4096] {
            let replay = RegistrationJournal.replay(first + second + zeros.prefix(tail), timeBase: base)
            #expect(replay.problems.isEmpty && replay.registrations.count == 2, "zeros \(tail)")
            #expect(replay.intactLength == first.count + second.count, "zeros \(tail)")
            #expect(replay.usedLength == first.count + second.count, "zeros \(tail)")
        }
        // Cut before its last byte that is not a zero (one cut after it leaves the entry whole: same bytes).
        let lastNonZero = second.lastIndex { $0 != 0 }!
        for cut in [1, 4, 11, 12, second.count / 2, lastNonZero] {
            var torn = second
            torn.replaceSubrange(cut..., with: [UInt8](repeating: 0, count: second.count - cut))
            let bytes = first + torn + zeros
            let replay = RegistrationJournal.replay(bytes, timeBase: base)
            #expect(replay.registrations.map(\.key) == [hosts[0].key], "cut \(cut)")
            #expect(replay.problems.count == 1, "cut \(cut): \(replay.problems)")
            #expect(replay.intactLength == first.count && replay.usedLength > first.count, "cut \(cut)")
        }
        // Written from its middle (a sector that reached the card before the first): damage too.
        var late = [UInt8](repeating: 0, count: second.count)
        late.replaceSubrange(20..., with: second[20...])
        let replay = RegistrationJournal.replay(first + late + zeros, timeBase: base)
        #expect(replay.intactLength == first.count && replay.usedLength == first.count + late.count + zeros.count)
    }

    /// `minimumPayloadLength` at N-1 and N: a payload too short for its kind and version is damage in the
    /// framing; one just long enough is framed, and reported when it does not decode.
    @Test func payloadLengthFloor() throws {
        func journal(payload: [UInt8]) -> [UInt8] {
            var bytes = Array("SPJ1".utf8)
            withUnsafeBytes(of: UInt32(payload.count).bigEndian) { bytes += $0 }
            withUnsafeBytes(of: CRC32.checksum(payload[...]).bigEndian) { bytes += $0 }
            return bytes + payload
        }
        let base = self.timeBase(now: Lab.t0, wall: Self.wallAtT0)
        let short = RegistrationJournal.replay(journal(payload: [1]), timeBase: base)
        #expect(short.entryCount == 0 && short.intactLength == 0 && short.problems.count == 1)
        let floor = RegistrationJournal.replay(journal(payload: [1, 99]), timeBase: base)
        #expect(floor.entryCount == 1 && floor.intactLength == 14)
        #expect(floor.problems.count == 1 && floor.problems[0].reason.contains("unreadable"))
    }

    @Test func payloadLengthLimit() throws {
        // An entry header announcing more than the limit is damage, even when that many bytes follow.
        func journal(announcing length: Int) -> [UInt8] {
            var bytes = Array("SPJ1".utf8)
            withUnsafeBytes(of: UInt32(length).bigEndian) { bytes += $0 }
            bytes += [0, 0, 0, 0]
            return bytes + Array(repeating: 0, count: length)
        }
        let base = self.timeBase(now: Lab.t0, wall: Self.wallAtT0)
        let atLimit = RegistrationJournal.replay(
            journal(announcing: RegistrationJournal.maximumPayloadLength), timeBase: base)
        #expect(atLimit.problems.map(\.reason) == ["checksum mismatch; entry skipped"])
        let overLimit = RegistrationJournal.replay(
            journal(announcing: RegistrationJournal.maximumPayloadLength + 1), timeBase: base)
        #expect(overLimit.problems.count == 1 && overLimit.problems[0].reason.contains("torn"))
    }

    @Test func decodingInRunsGivesTheSequentialReplay() throws {
        let hosts = try self.registrations(12)
        let base = self.timeBase(now: Lab.t0, wall: Self.wallAtT0)
        var renewed = hosts[3]
        renewed.leaseExpiry = Lab.t0 + .seconds(7200)
        // Puts, a renewal, removals (one put back later), damage and an unreadable entry spread through the file,
        // so that every way of cutting it into runs separates some host's entries.
        var model: [OwnerKey: OwnerRegistration] = [:]
        var journal: [UInt8] = []
        func put(_ host: OwnerRegistration) {
            journal += RegistrationJournal.encode(.put(host), timeBase: base)
            model[host.key] = host
        }
        func remove(_ host: OwnerRegistration) {
            journal += RegistrationJournal.encode(.remove(host.key), timeBase: base)
            model[host.key] = nil
        }
        for host in hosts[0..<6] { put(host) }
        remove(hosts[1])
        var damaged = RegistrationJournal.encode(.put(hosts[6]), timeBase: base)
        damaged[damaged.count - 3] ^= 0x10
        journal += damaged
        let garbage: [UInt8] = [1, 1, 9, 9, 9]
        journal += RegistrationJournal.magic
        withUnsafeBytes(of: UInt32(garbage.count).bigEndian) { journal += $0 }
        withUnsafeBytes(of: CRC32.checksum(garbage).bigEndian) { journal += $0 }
        journal += garbage
        for host in hosts[7..<12] { put(host) }
        put(renewed)
        remove(hosts[8])
        put(hosts[1])
        remove(hosts[11])
        let intact = journal.count
        journal += RegistrationJournal.encode(.put(hosts[6]), timeBase: base).prefix(20)

        let sequential = RegistrationJournal.replay(journal, timeBase: base)
        #expect(sequential.registrations == model.values.sorted { $0.key < $1.key })
        #expect(sequential.registrations.first { $0.key == renewed.key }?.leaseExpiry == renewed.leaseExpiry)
        #expect(sequential.problems.map(\.reason.first) == ["c", "u", "i"], "\(sequential.problems)")
        #expect(sequential.intactLength == intact && sequential.entryCount == 17)
        for parts in [2, 3, 5, 17, 40] {
            // Runs decoded last-first: the order the calls come in must not matter.
            let replay = RegistrationJournal.replay(journal, timeBase: base, parts: parts) { count, body in
                for index in (0..<count).reversed() { body(index) }
            }
            #expect(replay.registrations == sequential.registrations, "parts \(parts)")
            #expect(replay.expired == sequential.expired, "parts \(parts)")
            #expect(replay.problems == sequential.problems, "parts \(parts)")
            #expect(replay.intactLength == intact && replay.entryCount == 17, "parts \(parts)")
        }
        let concurrent = RegistrationJournal.replay(journal, timeBase: base, parts: 4) { count, body in
            DispatchQueue.concurrentPerform(iterations: count, execute: body)
        }
        #expect(concurrent.registrations == sequential.registrations && concurrent.problems == sequential.problems)
    }

    /// Hosts handed out as the journal is read (`replay(_:timeBase:final:)`) are exactly the replay's, each once,
    /// when its last entry is read: a renewal replaces what came before, a removal hides the host, a put back
    /// after a removal counts, an expired host is left out, and a host whose last entry cannot be read is handed
    /// out as the entries before it left it.
    @Test func hostsHandedOutAsTheJournalIsReadAreTheReplays() throws {
        let hosts = try self.registrations(8)
        let base = self.timeBase(now: Lab.t0, wall: Self.wallAtT0)
        var renewed = hosts[3]
        renewed.leaseExpiry = Lab.t0 + .seconds(7200)
        var expired = hosts[5]
        expired.leaseExpiry = Lab.t0 - .seconds(1)
        var journal: [UInt8] = []
        var lastEntry: [OwnerKey: Int] = [:]
        var entries = 0
        func append(_ entry: RegistrationJournal.Entry) {
            journal += RegistrationJournal.encode(entry, timeBase: base)
            switch entry {
            case .put(let host): lastEntry[host.key] = entries
            case .remove(let key): lastEntry[key] = entries
            }
            entries += 1
        }
        for host in hosts[0..<6] { append(.put(host)) }
        append(.remove(hosts[1].key))
        append(.put(renewed))
        append(.put(expired))
        append(.put(hosts[6]))
        // Host 6's next entry reads its key but not its body: it stays as its put left it.
        var unreadable = Array(RegistrationJournal.encode(.put(hosts[6]), timeBase: base).dropFirst(12).dropLast(8))
        journal += RegistrationJournal.magic
        withUnsafeBytes(of: UInt32(unreadable.count).bigEndian) { journal += $0 }
        withUnsafeBytes(of: CRC32.checksum(unreadable).bigEndian) { journal += $0 }
        journal += unreadable
        unreadable = []
        append(.put(hosts[7]))
        append(.remove(hosts[0].key))
        append(.put(hosts[1]))

        let sequential = RegistrationJournal.replay(journal, timeBase: base)
        #expect(sequential.problems.count == 1 && sequential.problems[0].reason.contains("unreadable"))
        #expect(sequential.registrations.contains { $0.key == hosts[6].key })
        #expect(sequential.expired.map(\.key) == [expired.key])
        var handedOut: [OwnerRegistration] = []
        let replay = RegistrationJournal.replay(journal, timeBase: base) { handedOut.append($0) }
        #expect(handedOut.sorted { $0.key < $1.key } == sequential.registrations)
        #expect(handedOut.map(\.key) == sequential.registrations.map(\.key).sorted { lastEntry[$0]! < lastEntry[$1]! })
        #expect(replay.registrations == sequential.registrations && replay.expired == sequential.expired)
        #expect(replay.problems == sequential.problems && replay.entryCount == sequential.entryCount)
        #expect(replay.intactLength == sequential.intactLength && replay.usedLength == sequential.usedLength)
        // Damage anywhere: still the replay's hosts, each once.
        for offset in stride(from: 0, to: journal.count, by: 37) {
            var damaged = journal
            damaged[offset] ^= 0x5A
            var seen: [OwnerRegistration] = []
            let again = RegistrationJournal.replay(damaged, timeBase: base) { seen.append($0) }
            #expect(
                seen.sorted { $0.key < $1.key } == RegistrationJournal.replay(damaged, timeBase: base).registrations)
            #expect(again.registrations == RegistrationJournal.replay(damaged, timeBase: base).registrations)
        }
    }

    @Test func runsCoverEveryEntryOnceInOrder() {
        let payloads = [100, 5, 5, 5, 300, 1, 1, 50, 50, 50].reduce(into: [Range<Int>]()) { ranges, length in
            let start = ranges.last?.upperBound ?? 0
            ranges.append(start..<start + length)
        }
        for parts in 1...12 {
            let runs = RegistrationJournal.runs(of: payloads, parts: parts)
            #expect(runs.count == min(parts, payloads.count), "parts \(parts)")
            #expect(runs.allSatisfy { !$0.isEmpty } && Array(runs.joined()) == payloads, "parts \(parts)")
        }
        #expect(RegistrationJournal.runs(of: [], parts: 3).isEmpty)
    }

    @Test func everyTruncationAndByteFlipIsSafe() throws {
        let hosts = try self.registrations(2)
        let base = self.timeBase(now: Lab.t0, wall: Self.wallAtT0)
        let journal = hosts.flatMap { RegistrationJournal.encode(.put($0), timeBase: base) }
        for cut in 0..<journal.count {
            let replay = RegistrationJournal.replay(Array(journal.prefix(cut)), timeBase: base)
            #expect(replay.registrations.count <= 2)
        }
        for index in stride(from: 0, to: journal.count, by: 7) {
            var damaged = journal
            damaged[index] ^= 0xFF
            let replay = RegistrationJournal.replay(damaged, timeBase: base)
            // At most the damaged host is lost; whatever survives is intact.
            #expect(replay.registrations.count >= 1)
            for registration in replay.registrations { #expect(hosts.contains(registration)) }
        }
    }
}

@Suite("Registration journal, large hosts")
struct JournalLargeHostTests {
    /// A host that registered in several parts can hold more than one 9000-byte message's worth of records; its
    /// journal entry must still read back.
    @Test func aHostLargerThanOneMessageSurvivesReplay() throws {
        var registrar = Registrar()
        let services = (0..<40).map {
            ("Service \($0) with a fairly long descriptive instance name._http._tcp", UInt16(8000 + $0))
        }
        var registration: OwnerRegistration?
        for part in 0..<3 {
            let slice = Array(services[(part * 40 / 3)..<((part + 1) * 40 / 3)])
            // Ten distinct 400-byte TXT records per part: compression cannot shrink them.
            let extra = (0..<10).map { n in
                DNSResourceRecord(
                    name: try! DNSName(parsing: "info\(part)-\(n).vm.local."), cacheFlush: true, ttl: 4500,
                    rdata: .txt(
                        try! TXTRecord(strings: [
                            Array(repeating: UInt8(0x61 + n), count: 200),
                            Array(repeating: UInt8(0x41 + part), count: 200),
                        ])))
            }
            let message = Lab.registration(id: 0x99, services: slice, extra: extra)
            #expect(message.encoded(options: .appleUpdate).count <= DNSMessage.maximumSize)
            guard
                case .accepted(let acceptance) = registrar.handle(
                    datagram: message.encoded(options: .appleUpdate), from: Lab.hostV4, on: Lab.eth0, now: Lab.t0)
            else {
                Issue.record("part \(part) refused")
                return
            }
            registration = acceptance.registration
        }
        let host = try #require(registration)
        let base = TimeBase(bootID: JournalTests.bootA, now: Lab.t0, wallNanoseconds: JournalTests.wallAtT0)
        let entry = RegistrationJournal.encode(.put(host), timeBase: base)
        #expect(entry.count > DNSMessage.maximumSize)
        let replay = RegistrationJournal.replay(entry, timeBase: base)
        #expect(replay.problems.isEmpty, "\(replay.problems)")
        #expect(replay.registrations == [host])
    }
}
