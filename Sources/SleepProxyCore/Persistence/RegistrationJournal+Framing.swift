import SleepProxyWire

/// The journal's framing (docs/state.md): where each entry lies, what was skipped, and how replay splits the work.
extension RegistrationJournal {
    /// Where each intact entry's payload lies, in journal order, and what was skipped to find them.
    struct Framing {
        var payloads: [Range<Int>] = []
        var problems: [Problem] = []
        var intactLength = 0
        var usedLength = 0
    }

    /// Checks every entry's header and checksum; a damaged one is reported and the next magic looked for.
    static func frame(_ bytes: [UInt8]) -> Framing {
        var framing = Framing()
        var offset = 0
        framing.usedLength = bytes.count
        while offset < bytes.count {
            // The space written ahead of the entries, all zeros, so that an append overwrites blocks the file
            // already has (docs/state.md, "SD-card wear"): the end of the journal, not damage. A magic never
            // starts with a zero byte, so an entry is never taken for it.
            if bytes[offset] == 0, Self.isZero(bytes, from: offset) {
                framing.usedLength = offset
                break
            }
            guard bytes.count - offset >= headerLength, Array(bytes[offset..<offset + 4]) == magic else {
                guard
                    let next = Self.skip(bytes, at: offset, { "damaged entry header; skipped to byte \($0)" }, &framing)
                else { break }
                offset = next
                continue
            }
            let length = Int(readInteger(bytes, offset + 4, as: UInt32.self))
            let crc = readInteger(bytes, offset + 8, as: UInt32.self)
            let start = offset + headerLength
            guard length >= minimumPayloadLength, length <= maximumPayloadLength, bytes.count - start >= length else {
                guard
                    let next = Self.skip(
                        bytes, at: offset, { _ in "entry length \(length) impossible or past the end; skipped" },
                        &framing)
                else { break }
                offset = next
                continue
            }
            guard CRC32.checksum(bytes[start..<start + length]) == crc else {
                framing.problems.append(Problem(offset: offset, reason: "checksum mismatch; entry skipped"))
                offset = nextMagic(in: bytes, after: offset) ?? bytes.count
                continue
            }
            framing.payloads.append(start..<start + length)
            offset = start + length
            framing.intactLength = offset
        }
        return framing
    }

    /// `min(parts, payloads.count)` consecutive runs of about the same number of payload bytes (none when there is
    /// nothing to decode).
    static func runs(of payloads: [Range<Int>], parts: Int) -> [ArraySlice<Range<Int>>] {
        let target = max(1, min(parts, payloads.count))
        guard target > 1 else { return payloads.isEmpty ? [] : [payloads[...]] }
        let total = payloads.reduce(0) { $0 + $1.count }
        var runs: [ArraySlice<Range<Int>>] = []
        var start = 0
        var bytes = 0
        for (index, payload) in payloads.enumerated() {
            bytes += payload.count
            let left = payloads.count - (index + 1)
            let after = target - runs.count - 1
            // The last run takes the rest; a run ends once it holds its share of the bytes, or when every entry
            // left is needed to give each run after it one.
            guard after > 0 else { break }
            if (bytes * target >= total * (runs.count + 1) && left >= after) || left == after {
                runs.append(payloads[start...index])
                start = index + 1
            }
        }
        runs.append(payloads[start...])
        return runs
    }

    /// One run's entries: the last one for each host (a removal kept as such, to cancel what earlier runs put).
    struct DecodedRun: Sendable {
        var latest: [OwnerKey: Entry] = [:]
        var problems: [Problem] = []
    }

    /// For each payload, its host when no later entry is about that host, else nil: read from the entry's header
    /// alone (kind, version and key, as `decodePayload` reads them), so that an entry it finds no host in is one
    /// the replay cannot read either.
    static func settlingKeys(_ bytes: [UInt8], _ payloads: [Range<Int>]) -> [OwnerKey?] {
        var seen = Set<OwnerKey>(minimumCapacity: payloads.count)
        var result = [OwnerKey?](repeating: nil, count: payloads.count)
        for index in payloads.indices.reversed() {
            guard let key = Self.entryKey(bytes, payloads[index]), seen.insert(key).inserted else { continue }
            result[index] = key
        }
        return result
    }

    /// The host an entry is about, from its first bytes; nil when its kind, version or key cannot be read.
    static func entryKey(_ bytes: [UInt8], _ payload: Range<Int>) -> OwnerKey? {
        guard payload.count >= 3, bytes[payload.lowerBound] == 1 || bytes[payload.lowerBound] == 2,
            bytes[payload.lowerBound + 1] == formatVersion
        else { return nil }
        let length = Int(bytes[payload.lowerBound + 2])
        let name = payload.lowerBound + 3
        guard payload.upperBound - name >= length + 6,
            let mac = MACAddress(bytes: bytes[name + length..<name + length + 6])
        else { return nil }
        return OwnerKey(interface: String(decoding: bytes[name..<name + length], as: UTF8.self), primaryMAC: mac)
    }

    /// `after(index, latest)` is called after each payload (its index in `payloads`) with the run's entries so far.
    static func decode(
        _ bytes: [UInt8], _ payloads: ArraySlice<Range<Int>>, timeBase: TimeBase,
        after: (Int, [OwnerKey: Entry]) -> Void = { _, _ in }
    ) -> DecodedRun {
        var run = DecodedRun()
        // Sized from the start: growing tables leave their old storage behind as holes between the hosts kept.
        run.latest.reserveCapacity(payloads.count)
        // Names shared as they are decoded, so that the duplicates are freed at once and their space reused,
        // instead of left as holes between the hosts kept (`NameInterner`); it remembers only what hosts have in
        // common, a few dozen names.
        var interner = NameInterner()
        for (index, payload) in zip(payloads.indices, payloads) {
            do {
                switch try decodePayload(Array(bytes[payload]), timeBase: timeBase) {
                case .put(let registration): run.latest[registration.key] = .put(interner.intern(registration))
                case .remove(let key): run.latest[key] = .remove(key)
                }
            } catch {
                run.problems.append(
                    Problem(offset: payload.lowerBound - headerLength, reason: "unreadable entry (\(error)); skipped"))
            }
            after(index, run.latest)
        }
        return run
    }

    static func isZero(_ bytes: [UInt8], from offset: Int) -> Bool {
        var index = offset
        while index < bytes.count {
            guard bytes[index] == 0 else { return false }
            index += 1
        }
        return true
    }

    static func nextMagic(in bytes: [UInt8], after offset: Int) -> Int? {
        guard bytes.count >= 4 else { return nil }
        var index = offset + 1
        while index <= bytes.count - 4 {
            if bytes[index] == magic[0], bytes[index + 1] == magic[1], bytes[index + 2] == magic[2],
                bytes[index + 3] == magic[3]
            {
                return index
            }
            index += 1
        }
        return nil
    }

    static func readInteger<T: FixedWidthInteger>(_ bytes: [UInt8], _ offset: Int, as: T.Type) -> T {
        var value: T = 0
        for index in 0..<MemoryLayout<T>.size { value = value << 8 | T(bytes[offset + index]) }
        return value
    }

    /// A damaged entry at `offset`, reported, and where the next one starts: nil (reported as a torn write) when
    /// no magic follows; `damage` words it with where the next one was found.
    static func skip(_ bytes: [UInt8], at offset: Int, _ damage: (Int) -> String, _ framing: inout Framing) -> Int? {
        let next = nextMagic(in: bytes, after: offset)
        framing.problems.append(
            Problem(offset: offset, reason: next.map(damage) ?? "incomplete entry at the end (torn write)"))
        return next
    }
}
