import SleepProxyWire
import Synchronization

/// The on-disk form of registrations: an append-only journal of whole-host snapshots and removals.
///
/// Why a journal: an acknowledged registration must be on disk before the reply leaves, and many hosts often
/// register within the same second (they all go to sleep at night). One append and one fdatasync commit every
/// registration that arrived meanwhile; measured here, a batch costs ~0.1 ms where 100 per-host files with
/// atomic rename cost 9-17 ms. Each entry is a whole host, so replay is "last entry per host wins", and the file
/// is compacted (rewritten with one entry per live host, then atomically renamed) when it grows.
///
///     entry   = magic "SPJ1" (4) | payload length u32 | CRC-32 of payload u32 | payload
///     payload = kind u8 (1 put, 2 remove) | version u8 | body
///     put     = interface | primary MAC (6) | boot ID (16) | lease expiry, registered, updated: boot ns i64 and
///               wall ns i64 each | written-at wall ns i64 | granted lease u32 | last message ID u16 |
///               DNS UPDATE length u32 + bytes (the records in the update section, an OPT with the Owner option) |
///               record count u16 + per-record registered-at boot ns i64
///     remove  = interface | primary MAC (6)
///     interface = length u8 + UTF-8 bytes
///
/// A damaged entry (bad magic, length or checksum) is reported and skipped: the reader looks for the next magic
/// and carries on, so one bad entry costs at most that host's latest change, never the others. Zeros from an
/// entry's end to the file's end are space written ahead for appends (docs/state.md, "SD-card wear"), not damage.
public enum RegistrationJournal {
    static let magic: [UInt8] = Array("SPJ1".utf8)
    static let headerLength = 12
    static let formatVersion: UInt8 = 1
    /// Marks the trailer of an adopted host's entry (its own addresses).
    static let adoptedMarker: UInt8 = 0xAD
    /// Marks an adopted host's Windows names, after its addresses (docs/windows.md).
    static let windowsMarker: UInt8 = 0x57
    /// A payload larger than this marks a damaged length. One entry is one whole host, merged from every part it
    /// registered: at most 400 records (`defaultMaximumRecordsPerHost`), each from a message of at most 9000
    /// bytes (RFC 6762 §17), so 3.6 MB; 16 MiB leaves room for hosts allowed more records.
    public static let maximumPayloadLength = 16 * 1024 * 1024
    /// A payload shorter than its kind and version bytes marks damage too: a header torn off before its payload
    /// leaves a zero length over the zeros written ahead, whose checksum (of nothing) is zero and would match.
    static let minimumPayloadLength = 2

    public enum Entry: Hashable, Sendable {
        case put(OwnerRegistration)
        case remove(OwnerKey)
    }

    public struct Problem: Hashable, Sendable, CustomStringConvertible {
        public var offset: Int
        public var reason: String
        public var description: String { "journal entry at byte \(self.offset): \(self.reason)" }
    }

    public struct Replay: Sendable {
        /// Hosts in the journal whose leases had not ended, with their remaining lease.
        public var registrations: [OwnerRegistration]
        /// Hosts whose leases ended while the proxy was down; not restored.
        public var expired: [OwnerRegistration]
        public var problems: [Problem]
        /// Length of the journal up to the end of its last intact entry.
        public var intactLength: Int
        /// Length up to the zeros the journal writes ahead of its entries (docs/state.md, "SD-card wear"), or the
        /// whole length when it ends without them. Bytes between `intactLength` and this are a torn write.
        public var usedLength: Int
        public var entryCount: Int
    }

    // MARK: Encoding

    public static func encode(_ entry: Entry, timeBase: TimeBase) -> [UInt8] {
        var payload: [UInt8] = []
        switch entry {
        case .put(let registration):
            payload.append(1)
            payload.append(formatVersion)
            appendKey(registration.key, to: &payload)
            payload += timeBase.bootID
            for time in [registration.leaseExpiry, registration.registeredAt, registration.updatedAt] {
                append(time.nanoseconds, to: &payload)
                append(timeBase.wall(of: time), to: &payload)
            }
            append(timeBase.wallNanoseconds, to: &payload)
            append(registration.grantedLease, to: &payload)
            append(registration.lastMessageID, to: &payload)
            let message = DNSMessage(
                id: registration.lastMessageID,
                flags: DNSHeaderFlags(response: false, opcode: .update),
                authorities: registration.records.map(\.record),
                additionals: [.opt(EDNSHeader(udpPayloadSize: 1440), options: [.owner(registration.owner)])]
            ).encoded()
            append(UInt32(message.count), to: &payload)
            payload += message
            append(UInt16(registration.records.count), to: &payload)
            for record in registration.records { append(record.registeredAt.nanoseconds, to: &payload) }
            // An adopted host's own addresses (docs/adoption.md), after everything a registration has: a
            // journal without them reads as before, and the reader before this one stops at the record times.
            if let adopted = registration.adoptedAddresses {
                payload.append(adoptedMarker)
                payload.append(UInt8(min(adopted.count, Int(UInt8.max))))
                for address in adopted.prefix(Int(UInt8.max)) {
                    switch address {
                    case .v4(let v4):
                        payload.append(4)
                        append(v4.rawValue, to: &payload)
                    case .v6(let v6):
                        payload.append(6)
                        append(v6.high, to: &payload)
                        append(v6.low, to: &payload)
                    }
                }
                // Its Windows names (docs/windows.md), after its addresses.
                if let windows = registration.windows, !windows.isEmpty {
                    let bytes = windows.encoded
                    payload.append(windowsMarker)
                    append(UInt16(bytes.count), to: &payload)
                    payload += bytes
                }
            }
        case .remove(let key):
            payload.append(2)
            payload.append(formatVersion)
            appendKey(key, to: &payload)
        }
        var entry = magic
        append(UInt32(payload.count), to: &entry)
        append(CRC32.checksum(payload), to: &entry)
        return entry + payload
    }

    private static func appendKey(_ key: OwnerKey, to bytes: inout [UInt8]) {
        let name = Array(key.interface.utf8.prefix(255))
        bytes.append(UInt8(name.count))
        bytes += name
        bytes += key.primaryMAC.bytes
    }

    private static func append<T: FixedWidthInteger>(_ value: T, to bytes: inout [UInt8]) {
        withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) }
    }

    // MARK: Replay

    /// Replays a whole journal as read from disk, converting stored times to this run's timeline.
    ///
    /// Times: within the same boot the boot-clock values are exact. After a reboot the wall clock is the only
    /// link; the time remaining is taken as the smaller of "expiry minus now" and "expiry minus when it was
    /// written", so a wall clock that went backwards can never lengthen a lease.
    public static func replay(_ bytes: [UInt8], timeBase: TimeBase) -> Replay {
        self.replay(bytes, timeBase: timeBase, parts: 1) { count, body in (0..<count).forEach(body) }
    }

    /// The same, with the entries decoded in `parts` runs at once: `perform(parts, body)` calls `body` once for each
    /// run, `0..<parts`, in any order and on any threads it likes (`DispatchQueue.concurrentPerform` does), and
    /// returns when every call has. The framing and the checksums are checked in one pass first, and the runs'
    /// results are put together in journal order after, so the outcome is the sequential one, whatever `parts`.
    ///
    /// Why: a restart cannot answer for a restored host until the replay is over, and decoding the entries is
    /// most of it (about 0.2 s of one core for 10,000 hosts of 24 records, docs/scale.md); each run decodes its
    /// entries on its own and shares their names among them (`NameInterner`), which is what keeps the replay's
    /// memory down, so runs can go side by side.
    public static func replay(
        _ bytes: [UInt8], timeBase: TimeBase, parts: Int, perform: (Int, @Sendable (Int) -> Void) -> Void
    ) -> Replay {
        let framing = Self.frame(bytes)
        let runs = Self.runs(of: framing.payloads, parts: parts)
        let decoded = Mutex([DecodedRun?](repeating: nil, count: runs.count))
        perform(runs.count) { index in
            let run = Self.decode(bytes, runs[index], timeBase: timeBase)
            decoded.withLock { $0[index] = run }
        }
        return Self.assemble(framing, decoded.withLock { $0 }, timeBase: timeBase)
    }

    /// The same replay, in one run, handing each host to restore to `final` as soon as the journal's last entry
    /// for it has been read, in journal order on the calling thread: what `final` is given is exactly
    /// `registrations`, so a restart can restore the hosts while the rest of the journal is decoded on another
    /// thread (docs/scale.md). An entry no later one overrides (its host's last, whether it reads or not) settles
    /// its host; one that cannot be read leaves the host as the entries before it left it, as in any replay.
    ///
    /// `bytes` is let go once decoded, before the replay is put together (docs/memory.md).
    public static func replay(
        _ bytes: consuming [UInt8], timeBase: TimeBase, final: (OwnerRegistration) -> Void
    ) -> Replay {
        let framing = Self.frame(bytes)
        var settles = Self.settlingKeys(bytes, framing.payloads)
        let run = Self.decode(bytes, framing.payloads[...], timeBase: timeBase) { index, latest in
            guard let key = settles[index], case .put(let registration)? = latest[key],
                registration.leaseExpiry > timeBase.now
            else { return }
            final(registration)
        }
        _ = consume bytes
        settles = []
        return Self.assemble(framing, [run], timeBase: timeBase)
    }

    /// Runs put together in journal order: the last entry for each host wins, then the live and the expired.
    /// No more than one copy of the hosts at a time beside the runs': at 10,000 hosts each copy is about 2 MB, and
    /// a restart's replay ends at its highest memory (docs/memory.md).
    private static func assemble(_ framing: Framing, _ results: consuming [DecodedRun?], timeBase: TimeBase) -> Replay {
        var problems = framing.problems
        var hosts: [OwnerRegistration] = []
        if results.count == 1, let run = results[0] {
            // One run: its last entry for each host is the replay's.
            problems += run.problems
            hosts.reserveCapacity(run.latest.count)
            for case .put(let registration) in run.latest.values { hosts.append(registration) }
        } else {
            var live: [OwnerKey: OwnerRegistration] = [:]
            live.reserveCapacity(results.reduce(0) { $0 + ($1?.latest.count ?? 0) })
            for index in results.indices {
                guard let run = results[index] else { preconditionFailure("perform did not decode every run") }
                results[index] = nil
                for (key, entry) in run.latest {
                    switch entry {
                    case .put(let registration): live[key] = registration
                    case .remove: live[key] = nil
                    }
                }
                problems += run.problems
            }
            hosts = Array(live.values)
        }
        results = []
        // Stable: a decoding problem and a framing problem never share an offset, but keep the order regardless.
        problems = problems.enumerated().sorted { ($0.element.offset, $0.offset) < ($1.element.offset, $1.offset) }
            .map(\.element)
        hosts.sort { $0.key < $1.key }
        let expired = hosts.filter { $0.leaseExpiry <= timeBase.now }
        if !expired.isEmpty { hosts.removeAll { $0.leaseExpiry <= timeBase.now } }
        return Replay(
            registrations: hosts, expired: expired, problems: problems, intactLength: framing.intactLength,
            usedLength: framing.usedLength, entryCount: framing.payloads.count)
    }

    struct DecodeError: Error, CustomStringConvertible {
        var description: String
    }

    static func decodePayload(_ payload: [UInt8], timeBase: TimeBase) throws -> Entry {
        var cursor = 0
        func take(_ count: Int) throws -> ArraySlice<UInt8> {
            guard count >= 0, payload.count - cursor >= count else {
                throw DecodeError(description: "payload too short")
            }
            defer { cursor += count }
            return payload[cursor..<cursor + count]
        }
        func integer<T: FixedWidthInteger>(_ type: T.Type) throws -> T {
            try take(MemoryLayout<T>.size).reduce(T(0)) { $0 << 8 | T($1) }
        }
        func key() throws -> OwnerKey {
            let length = Int(try integer(UInt8.self))
            let name = String(decoding: try take(length), as: UTF8.self)
            guard let mac = MACAddress(bytes: try take(6)) else { throw DecodeError(description: "bad MAC") }
            return OwnerKey(interface: name, primaryMAC: mac)
        }
        let kind = try integer(UInt8.self)
        let version = try integer(UInt8.self)
        guard version == formatVersion else { throw DecodeError(description: "format version \(version)") }
        switch kind {
        case 2:
            return .remove(try key())
        case 1:
            let key = try key()
            let bootID = Array(try take(16))
            let sameBoot = bootID == timeBase.bootID
            var times: [(boot: Int64, wall: Int64)] = []
            for _ in 0..<3 { times.append((try integer(Int64.self), try integer(Int64.self))) }
            let writtenWall = try integer(Int64.self)
            let granted = try integer(UInt32.self)
            let messageID = try integer(UInt16.self)
            let messageLength = Int(try integer(UInt32.self))
            let message = try DNSMessage(decoding: Array(try take(messageLength)), maximumSize: maximumPayloadLength)
            guard let owner = message.ednsOptions?.owner else { throw DecodeError(description: "no owner") }
            let recordCount = Int(try integer(UInt16.self))
            guard recordCount == message.updates.count else { throw DecodeError(description: "record count mismatch") }
            var recordTimes: [Int64] = []
            for _ in 0..<recordCount { recordTimes.append(try integer(Int64.self)) }
            // Rebase a stored time onto this run's timeline.
            func rebase(boot: Int64, wall: Int64) -> Timestamp {
                if sameBoot { return Timestamp(nanoseconds: boot) }
                let sinceNow = wall &- timeBase.wallNanoseconds
                let sinceWritten = wall &- writtenWall
                return Timestamp(nanoseconds: timeBase.now.nanoseconds &+ min(sinceNow, sinceWritten))
            }
            var adopted: [IPAddress]? = nil
            if cursor < payload.count {
                guard try integer(UInt8.self) == adoptedMarker else { throw DecodeError(description: "bad trailer") }
                var addresses: [IPAddress] = []
                for _ in 0..<Int(try integer(UInt8.self)) {
                    switch try integer(UInt8.self) {
                    case 4: addresses.append(.v4(IPv4Address(rawValue: try integer(UInt32.self))))
                    case 6:
                        addresses.append(
                            .v6(IPv6Address(high: try integer(UInt64.self), low: try integer(UInt64.self))))
                    default: throw DecodeError(description: "bad address family")
                    }
                }
                adopted = addresses
            }
            var windows: WindowsIdentity? = nil
            if cursor < payload.count {
                guard try integer(UInt8.self) == windowsMarker else { throw DecodeError(description: "bad trailer") }
                let length = Int(try integer(UInt16.self))
                guard length <= WindowsRules.maximumEncodedLength,
                    let identity = WindowsIdentity(encoded: try take(length))
                else { throw DecodeError(description: "bad Windows names") }
                windows = identity
            }
            let registeredAt = rebase(boot: times[1].boot, wall: times[1].wall)
            let records = zip(message.updates, recordTimes).map { record, boot in
                ProxiedRecord(record: record, registeredAt: sameBoot ? Timestamp(nanoseconds: boot) : registeredAt)
            }
            return .put(
                OwnerRegistration(
                    key: key, owner: owner, records: records,
                    registeredAt: registeredAt,
                    updatedAt: rebase(boot: times[2].boot, wall: times[2].wall),
                    leaseExpiry: rebase(boot: times[0].boot, wall: times[0].wall),
                    grantedLease: granted, lastMessageID: messageID, adoptedAddresses: adopted,
                    windows: windows))
        default:
            throw DecodeError(description: "entry kind \(kind)")
        }
    }
}
