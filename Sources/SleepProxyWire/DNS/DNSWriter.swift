import NIOCore

/// Choices an encoder has to make that the message itself does not say.
public struct DNSEncodingOptions: Sendable, Hashable {
    /// Compress names (RFC 1035 §4.1.4). RFC 6762 §18.14 asks mDNS senders to compress wherever possible.
    public var compressNames: Bool
    /// Compress the SRV target. RFC 6762 §18.14 allows it in mDNS; RFC 2782 forbids it in unicast DNS, and
    /// Apple's sleep client never compresses SRV RDATA in an UPDATE (docs/protocol.md §2.3), so registrations
    /// built to look like Apple's turn it off.
    public var compressSRVTarget: Bool

    public init(compressNames: Bool = true, compressSRVTarget: Bool = true) {
        self.compressNames = compressNames
        self.compressSRVTarget = compressSRVTarget
    }

    /// What a Multicast DNS responder sends.
    public static let mdns = DNSEncodingOptions()
    /// What Apple's sleep client sends in a registration: compressed, except SRV targets.
    public static let appleUpdate = DNSEncodingOptions(compressNames: true, compressSRVTarget: false)
}

/// Writes one DNS message, remembering where each written label sits so later names can point at it.
///
/// The message is assembled in a plain byte array and handed to the caller's `ByteBuffer` in one copy: every
/// ByteBuffer write goes through a dynamic exclusivity check on its storage class, which profiling showed to be a
/// sixth of encoding time when done per field.
///
/// The compression table is a small trie flattened into an array: each entry is a label that starts at `offset`
/// and is followed by the suffix that starts at `parent` (-1 for the root). A name is matched from its last label
/// towards its first, comparing the parent first (an integer) and the label bytes only on a parent match, so a
/// typical response of a dozen names costs a few dozen integer comparisons. Labels are matched byte for byte,
/// not case-insensitively: compressing "MyMac" into an earlier "mymac" would change the bytes a peer sees.
struct DNSWriter {
    /// RFC 1035 §4.1.4: a pointer holds a 14-bit offset.
    static let maximumPointerOffset = 0x3FFF

    struct Entry {
        var offset: Int32
        var parent: Int32
    }

    var bytes: [UInt8]
    let options: DNSEncodingOptions
    var entries: [Entry] = []

    init(options: DNSEncodingOptions, capacity: Int = 512) {
        self.bytes = []
        self.bytes.reserveCapacity(capacity)
        self.options = options
        self.entries.reserveCapacity(32)
    }

    /// Offset of the next byte, relative to the start of the message.
    var offset: Int { self.bytes.count }

    mutating func writeName(_ name: DNSName, compress: Bool) {
        let storage = name.storage
        // A 255-byte name has at most 127 labels; their offsets live on the stack.
        withUnsafeTemporaryAllocation(of: Int.self, capacity: 128) { labelStarts in
            var count = 0
            var index = 0
            while index < storage.count {
                labelStarts[count] = index
                count += 1
                index += 1 + Int(storage[index])
            }

            // Longest already-written suffix, found from the last label backwards.
            var matchedFrom = count
            var matchedOffset: Int32 = -1
            if compress && self.options.compressNames && count > 0 {
                var parent: Int32 = -1
                var k = count - 1
                search: while k >= 0 {
                    let start = labelStarts[k]
                    let length = Int(storage[start]) + 1
                    for entry in self.entries where entry.parent == parent {
                        let at = Int(entry.offset)
                        if self.bytes[at] == storage[start] {
                            var j = 1
                            while j < length, self.bytes[at + j] == storage[start + j] { j += 1 }
                            if j == length {
                                parent = entry.offset
                                matchedFrom = k
                                matchedOffset = entry.offset
                                k -= 1
                                continue search
                            }
                        }
                    }
                    break
                }
            }

            // Each label written becomes a target for later names, if a 14-bit pointer can reach it. Its suffix
            // is the next label written, or the matched earlier suffix, or the root.
            for k in 0..<matchedFrom {
                let here = self.bytes.count + labelStarts[k]
                guard here <= DNSWriter.maximumPointerOffset else { break }
                let parent: Int32 =
                    k + 1 < matchedFrom ? Int32(self.bytes.count + labelStarts[k + 1]) : matchedOffset
                self.entries.append(Entry(offset: Int32(here), parent: parent))
            }
            let prefixEnd = matchedFrom < count ? labelStarts[matchedFrom] : storage.count
            self.bytes.append(contentsOf: storage[0..<prefixEnd])
            if matchedFrom < count {
                self.writeUInt16(UInt16(0xC000) | UInt16(matchedOffset))
            } else {
                self.bytes.append(0)
            }
        }
    }

    mutating func writeUInt8(_ value: UInt8) { self.bytes.append(value) }

    mutating func writeUInt16(_ value: UInt16) {
        self.bytes.append(UInt8(value >> 8))
        self.bytes.append(UInt8(truncatingIfNeeded: value))
    }

    mutating func writeUInt32(_ value: UInt32) {
        self.writeUInt16(UInt16(value >> 16))
        self.writeUInt16(UInt16(truncatingIfNeeded: value))
    }

    mutating func writeUInt64(_ value: UInt64) {
        self.writeUInt32(UInt32(value >> 32))
        self.writeUInt32(UInt32(truncatingIfNeeded: value))
    }

    mutating func writeBytes(_ bytes: [UInt8]) { self.bytes.append(contentsOf: bytes) }

    /// Writes a 16-bit length, then `body`, then patches the length (RDLENGTH).
    mutating func writeLengthPrefixed(_ body: (inout DNSWriter) -> Void) {
        let lengthIndex = self.bytes.count
        self.writeUInt16(0)
        body(&self)
        let length = self.bytes.count - lengthIndex - 2
        precondition(length <= Int(UInt16.max), "RDATA of \(length) bytes passed validation")
        self.bytes[lengthIndex] = UInt8(length >> 8)
        self.bytes[lengthIndex + 1] = UInt8(truncatingIfNeeded: length)
    }
}
