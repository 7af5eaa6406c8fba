/// A domain name, kept as the exact bytes of its labels.
///
/// Storage is the uncompressed wire form without the final root byte: a length byte, then that many label
/// bytes, repeated. The bytes are kept exactly as received, so case and UTF-8 survive a round trip (instance
/// labels such as "Büro Mac" or "Living Room.2" are ordinary labels). Equality and hashing ignore ASCII case
/// only, as RFC 6762 §16 requires: non-ASCII bytes compare exactly.
public struct DNSName: Sendable, CustomStringConvertible, ExpressibleByStringLiteral {
    /// RFC 1035 §2.3.4: a label is at most 63 octets.
    public static let maximumLabelLength = 63
    /// RFC 1035 §2.3.4: a name is at most 255 octets in wire form, counting length bytes and the root byte.
    public static let maximumWireLength = 255

    /// Length-prefixed labels, no trailing root byte. Empty for the root name.
    public private(set) var storage: [UInt8]

    public static let root = DNSName(uncheckedStorage: [])

    @usableFromInline
    init(uncheckedStorage: [UInt8]) { self.storage = uncheckedStorage }

    /// Builds a name from raw labels (no escaping: a "." inside a label is part of it).
    public init<S: Sequence>(labels: S) throws(WireError) where S.Element: StringProtocol {
        var storage: [UInt8] = []
        for label in labels {
            try DNSName.append(label: Array(label.utf8), to: &storage)
        }
        self.storage = storage
    }

    /// Builds a name from raw label bytes.
    public init(labelBytes: [[UInt8]]) throws(WireError) {
        var storage: [UInt8] = []
        for label in labelBytes { try DNSName.append(label: label, to: &storage) }
        self.storage = storage
    }

    /// Parses presentation form: labels separated by ".", a trailing "." optional, "\." and "\\" for a literal
    /// dot or backslash, "\DDD" for any byte.
    public init(parsing text: String) throws(WireError) {
        var storage: [UInt8] = []
        var label: [UInt8] = []
        var sawAny = false
        let utf8 = Array(text.utf8)
        var index = 0
        while index < utf8.count {
            let byte = utf8[index]
            if byte == UInt8(ascii: "\\") {
                guard index + 1 < utf8.count else {
                    throw WireError(.invalidArgument, at: index, "name ends with a lone backslash")
                }
                let next = utf8[index + 1]
                if next >= 0x30, next <= 0x39 {
                    guard index + 3 < utf8.count,
                        let value = UInt16(String(decoding: utf8[index + 1...index + 3], as: UTF8.self)),
                        value <= 255
                    else { throw WireError(.invalidArgument, at: index, "bad \\DDD escape") }
                    label.append(UInt8(value))
                    index += 4
                } else {
                    label.append(next)
                    index += 2
                }
                sawAny = true
            } else if byte == UInt8(ascii: ".") {
                if label.isEmpty {
                    // "." alone is the root; an empty label anywhere else is an error.
                    guard !sawAny, index == utf8.count - 1 else {
                        throw WireError(.badLabel, at: index, "empty label")
                    }
                } else {
                    try DNSName.append(label: label, to: &storage)
                    label.removeAll(keepingCapacity: true)
                }
                index += 1
            } else {
                label.append(byte)
                sawAny = true
                index += 1
            }
        }
        if !label.isEmpty { try DNSName.append(label: label, to: &storage) }
        self.storage = storage
    }

    /// Literal names in code; a malformed literal is a programming error in our own source.
    public init(stringLiteral value: String) {
        do {
            try self.init(parsing: value)
        } catch {
            preconditionFailure("invalid DNS name literal \(value): \(error)")
        }
    }

    @usableFromInline
    static func append(label: [UInt8], to storage: inout [UInt8]) throws(WireError) {
        guard !label.isEmpty else { throw WireError(.badLabel, at: storage.count, "empty label") }
        guard label.count <= maximumLabelLength else {
            throw WireError(.badLabel, at: storage.count, "label of \(label.count) bytes (limit \(maximumLabelLength))")
        }
        // +1 for the root byte that ends the name on the wire.
        guard storage.count + 1 + label.count + 1 <= maximumWireLength else {
            throw WireError(.nameTooLong, at: storage.count, "name exceeds \(maximumWireLength) bytes")
        }
        storage.append(UInt8(label.count))
        storage.append(contentsOf: label)
    }

    /// Bytes on the wire when written uncompressed.
    public var wireLength: Int { self.storage.count + 1 }
    public var isRoot: Bool { self.storage.isEmpty }

    /// Start offsets (into `storage`) of each label's length byte.
    @usableFromInline
    var labelOffsets: [Int] {
        var offsets: [Int] = []
        var index = 0
        while index < self.storage.count {
            offsets.append(index)
            index += 1 + Int(self.storage[index])
        }
        return offsets
    }

    /// The bytes of label `index` (0 is the first), without materialising the others.
    public func label(at index: Int) -> ArraySlice<UInt8>? {
        var offset = 0
        var current = 0
        while offset < self.storage.count {
            let length = Int(self.storage[offset])
            if current == index { return self.storage[(offset + 1)..<(offset + 1 + length)] }
            offset += 1 + length
            current += 1
        }
        return nil
    }

    public var labelCount: Int {
        var count = 0
        var index = 0
        while index < self.storage.count {
            count += 1
            index += 1 + Int(self.storage[index])
        }
        return count
    }

    public var labels: [[UInt8]] {
        self.labelOffsets.map { Array(self.storage[$0 + 1..<$0 + 1 + Int(self.storage[$0])]) }
    }

    /// The labels as text (lossy for bytes that are not UTF-8).
    public var labelStrings: [String] { self.labels.map { String(decoding: $0, as: UTF8.self) } }

    public var firstLabel: [UInt8]? {
        guard let length = self.storage.first else { return nil }
        return Array(self.storage[1..<1 + Int(length)])
    }

    /// The name without its first label ("_http._tcp.local." for "x._http._tcp.local."); root stays root.
    public var parent: DNSName {
        guard let length = self.storage.first else { return self }
        return DNSName(uncheckedStorage: Array(self.storage[(1 + Int(length))...]))
    }

    /// `prefix` prepended as a new first label.
    public func prepending(label: [UInt8]) throws(WireError) -> DNSName {
        var storage: [UInt8] = []
        try DNSName.append(label: label, to: &storage)
        guard storage.count + self.storage.count + 1 <= DNSName.maximumWireLength else {
            throw WireError(.nameTooLong, at: 0, "name exceeds \(DNSName.maximumWireLength) bytes")
        }
        return DNSName(uncheckedStorage: storage + self.storage)
    }

    /// True when the last bytes of the wire form equal `suffix`'s wire form (case-insensitively) and start at a
    /// label boundary of `self`. Allocation-free, for hot paths that test many names against a fixed suffix.
    public func hasSuffix(_ suffix: DNSName) -> Bool {
        let count = suffix.storage.count
        guard count <= self.storage.count else { return false }
        guard DNSName.equalIgnoringASCIICase(self.storage[(self.storage.count - count)...], suffix.storage[...]) else {
            return false
        }
        // The match must begin where a label begins.
        var index = 0
        while index < self.storage.count - count { index += 1 + Int(self.storage[index]) }
        return index == self.storage.count - count
    }

    /// True when `self` equals `suffix` or ends with all of its labels (case-insensitively).
    public func isSubdomain(of suffix: DNSName) -> Bool {
        let mine = self.labelOffsets
        let theirs = suffix.labelOffsets
        guard theirs.count <= mine.count else { return false }
        let start = mine[mine.count - theirs.count]
        return DNSName.equalIgnoringASCIICase(self.storage[start...], suffix.storage[...])
    }

    /// The name with every ASCII letter in lower case; other bytes unchanged.
    public var lowercased: DNSName {
        DNSName(uncheckedStorage: self.storage.map(DNSName.lower))
    }

    /// A label with its ASCII letters in lower case (RFC 6762 §16 folds ASCII only).
    public static func asciiLowercased(label: [UInt8]) -> [UInt8] { label.map(DNSName.lower) }

    @inlinable
    static func lower(_ byte: UInt8) -> UInt8 { byte &- 0x41 < 26 ? byte | 0x20 : byte }

    @inlinable
    static func equalIgnoringASCIICase(_ a: ArraySlice<UInt8>, _ b: ArraySlice<UInt8>) -> Bool {
        guard a.count == b.count else { return false }
        var i = a.startIndex
        var j = b.startIndex
        while i < a.endIndex {
            if a[i] != b[j], lower(a[i]) != lower(b[j]) { return false }
            i += 1
            j += 1
        }
        return true
    }

    /// Presentation form with a trailing dot; "." and "\" inside labels are escaped, control bytes as \DDD.
    public var description: String {
        if self.storage.isEmpty { return "." }
        var text = ""
        for label in self.labels {
            var bytes: [UInt8] = []
            for byte in label {
                switch byte {
                case UInt8(ascii: "."), UInt8(ascii: "\\"):
                    bytes.append(UInt8(ascii: "\\"))
                    bytes.append(byte)
                case 0..<0x20, 0x7F:
                    let digits = String(byte)
                    bytes.append(UInt8(ascii: "\\"))
                    bytes.append(contentsOf: Array(repeating: UInt8(ascii: "0"), count: 3 - digits.utf8.count))
                    bytes.append(contentsOf: Array(digits.utf8))
                default:
                    bytes.append(byte)
                }
            }
            text += String(decoding: bytes, as: UTF8.self) + "."
        }
        return text
    }
}

extension DNSName: Hashable {
    public static func == (lhs: DNSName, rhs: DNSName) -> Bool {
        DNSName.equalIgnoringASCIICase(lhs.storage[...], rhs.storage[...])
    }

    public func hash(into hasher: inout Hasher) {
        // Eight bytes at a time, lower-cased in one go: the responder and the store hash a name for every
        // question and record they handle. Setting bit 5 of every byte folds A-Z onto a-z; it also maps other
        // bytes together (e.g. "@" and "`"), which only costs a rare extra equality check, never a wrong answer.
        self.storage.withUnsafeBytes { raw in
            var index = 0
            while index + 8 <= raw.count {
                hasher.combine(raw.loadUnaligned(fromByteOffset: index, as: UInt64.self) | 0x2020_2020_2020_2020)
                index += 8
            }
            var tail: UInt64 = 0
            while index < raw.count {
                tail = tail << 8 | UInt64(raw[index] | 0x20)
                index += 1
            }
            hasher.combine(tail)
        }
        hasher.combine(self.storage.count)
    }
}

extension DNSName: Comparable {
    /// A stable order for sorting (lower-cased bytes); not the DNSSEC canonical order.
    public static func < (lhs: DNSName, rhs: DNSName) -> Bool {
        lhs.storage.lazy.map(DNSName.lower).lexicographicallyPrecedes(rhs.storage.lazy.map(DNSName.lower))
    }
}

extension ByteReader {
    /// Reads a possibly compressed name (checks in `scanName`); afterwards `position` is just past the name as it
    /// appears here (past the first pointer, if any).
    @inlinable
    mutating func readName() throws(WireError) -> DNSName {
        // Pass 1 validates and measures without allocating; pass 2 copies into one exact-size array (names are
        // kept for hours in the record store, so spare capacity would be paid for by every proxied record).
        let (length, end) = try self.scanName(from: self.position)
        let storage = [UInt8](unsafeUninitializedCapacity: length) { buffer, initialized in
            var cursor = self.position
            var written = 0
            while true {
                let byte = self.bytes[cursor]
                if byte == 0 { break }
                if byte & 0xC0 == 0xC0 {
                    cursor = Int(byte & 0x3F) << 8 | Int(self.bytes[cursor + 1])
                    continue
                }
                let labelEnd = cursor + 1 + Int(byte)
                for index in cursor..<labelEnd {
                    buffer[written] = self.bytes[index]
                    written += 1
                }
                cursor = labelEnd
            }
            initialized = written
        }
        self.position = end
        return DNSName(uncheckedStorage: storage)
    }

    /// RFC 1035 §4.1.4 name decoding, with the checks a hostile sender cannot get past:
    /// - a pointer must point strictly before the label sequence that contains it, so every hop moves backwards
    ///   and no loop is possible;
    /// - at most `maximumPointerHops` pointers are followed;
    /// - labels are at most 63 bytes and label types 01 and 10 (RFC 6891 §5, obsolete) are refused;
    /// - the decoded name is at most 255 bytes.
    /// Returns the length of the decoded storage (without the root byte) and the position just past the name as
    /// it appears here (past the first pointer, if any).
    @inlinable
    func scanName(from start: Int) throws(WireError) -> (length: Int, end: Int) {
        var length = 0
        var cursor = start
        // The lowest offset a pointer may target: the start of the label sequence currently being read.
        var segmentStart = start
        var hops = 0
        var endAfterFirstPointer: Int? = nil
        // Until the first pointer the name must fit the current window (an RDATA's RDLENGTH); after it, labels
        // come from earlier in the whole message.
        var readEnd = self.limit
        while true {
            guard cursor < readEnd else {
                throw WireError(.truncated, at: cursor, "name runs past the end")
            }
            let byte = self.bytes[cursor]
            switch byte & 0xC0 {
            case 0x00:
                if byte == 0 {
                    return (length, endAfterFirstPointer ?? cursor + 1)
                }
                guard cursor + 1 + Int(byte) <= readEnd else {
                    throw WireError(.truncated, at: cursor, "label runs past the end")
                }
                guard length + 1 + Int(byte) + 1 <= DNSName.maximumWireLength else {
                    throw WireError(.nameTooLong, at: cursor, "name exceeds \(DNSName.maximumWireLength) bytes")
                }
                length += 1 + Int(byte)
                cursor += 1 + Int(byte)
            case 0xC0:
                guard cursor + 2 <= readEnd else {
                    throw WireError(.truncated, at: cursor, "compression pointer runs past the end")
                }
                let target = Int(byte & 0x3F) << 8 | Int(self.bytes[cursor + 1])
                guard target < segmentStart else {
                    throw WireError(.badPointer, at: cursor, "pointer to \(target) does not point backwards")
                }
                hops += 1
                guard hops <= DNSName.maximumPointerHops else {
                    throw WireError(.badPointer, at: cursor, "more than \(DNSName.maximumPointerHops) pointers")
                }
                if endAfterFirstPointer == nil { endAfterFirstPointer = cursor + 2 }
                // Earlier names lie within the message, outside any RDATA window.
                readEnd = self.bytes.count
                segmentStart = target
                cursor = target
            default:
                throw WireError(.badLabel, at: cursor, "reserved label type 0x\(String(byte & 0xC0, radix: 16))")
            }
        }
    }
}

extension DNSName {
    /// A 255-byte name holds at most 127 labels; every useful pointer leads to at least one new label, so a
    /// longer chain can only be an attack. (RFC 1035 §4.1.4 sets no number; this bound follows from §2.3.4.)
    public static let maximumPointerHops = 127
}
