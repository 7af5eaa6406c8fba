import NIOCore

/// Choices an encoder has to make that the message itself does not say.
public struct DNSEncodingOptions: Sendable, Hashable {
    /// Compress names (RFC 1035 §4.1.4). RFC 6762 §18.14 asks mDNS senders to compress wherever possible.
    public var compressNames: Bool
    /// Compress the SRV target. RFC 6762 §18.14 allows it in mDNS; RFC 2782 forbids it in unicast DNS, and
    /// Apple's sleep client never compresses SRV RDATA in an UPDATE (sps-protocol §2.3), so registrations
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

/// Writes one DNS message into a `ByteBuffer`, remembering where each written label sits so later names can
/// point at it.
///
/// The table is a small trie flattened into an array: each entry is a label that starts at `offset` and is
/// followed by the suffix that starts at `parent` (-1 for the root). A name is matched from its last label
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

    var buffer: ByteBuffer
    let base: Int
    let options: DNSEncodingOptions
    var entries: [Entry] = []

    init(buffer: ByteBuffer, options: DNSEncodingOptions) {
        self.buffer = buffer
        self.base = buffer.writerIndex
        self.options = options
        self.entries.reserveCapacity(32)
    }

    /// Offset of the next byte, relative to the start of the message.
    var offset: Int { self.buffer.writerIndex - self.base }

    mutating func writeName(_ name: DNSName, compress: Bool) {
        let storage = name.storage
        var labelStarts: [Int] = []
        labelStarts.reserveCapacity(8)
        var index = 0
        while index < storage.count {
            labelStarts.append(index)
            index += 1 + Int(storage[index])
        }

        // Longest already-written suffix, found from the last label backwards.
        var matchedFrom = labelStarts.count
        var matchedOffset: Int32 = -1
        if compress && self.options.compressNames && !labelStarts.isEmpty {
            self.buffer.withUnsafeReadableBytes { written in
                let writtenBase = self.base - self.buffer.readerIndex
                var parent: Int32 = -1
                var k = labelStarts.count - 1
                while k >= 0 {
                    let start = labelStarts[k]
                    let length = Int(storage[start]) + 1
                    var found: Int32 = -1
                    for entry in self.entries where entry.parent == parent {
                        let at = writtenBase + Int(entry.offset)
                        if written[at] == storage[start] {
                            var same = true
                            var j = 1
                            while j < length {
                                if written[at + j] != storage[start + j] {
                                    same = false
                                    break
                                }
                                j += 1
                            }
                            if same {
                                found = entry.offset
                                break
                            }
                        }
                    }
                    if found < 0 { break }
                    parent = found
                    matchedFrom = k
                    matchedOffset = found
                    k -= 1
                }
            }
        }

        // Write the labels that were not matched; each becomes a target for later names.
        for k in 0..<matchedFrom {
            let start = labelStarts[k]
            let length = Int(storage[start]) + 1
            let here = self.offset
            let next = here + length
            // Only offsets a 14-bit pointer can hold become targets. A label's suffix is the next label
            // written, or the matched earlier suffix, or the root.
            if here <= DNSWriter.maximumPointerOffset {
                let parent: Int32 = k + 1 < matchedFrom ? Int32(next) : matchedOffset
                self.entries.append(Entry(offset: Int32(here), parent: parent))
            }
            self.buffer.writeBytes(storage[start..<start + length])
        }
        if matchedFrom < labelStarts.count {
            self.buffer.writeInteger(UInt16(0xC000) | UInt16(matchedOffset))
        } else {
            self.buffer.writeInteger(UInt8(0))
        }
    }

    mutating func writeUInt8(_ value: UInt8) { self.buffer.writeInteger(value) }
    mutating func writeUInt16(_ value: UInt16) { self.buffer.writeInteger(value) }
    mutating func writeUInt32(_ value: UInt32) { self.buffer.writeInteger(value) }
    mutating func writeBytes(_ bytes: [UInt8]) { self.buffer.writeBytes(bytes) }

    /// Writes a 16-bit length, then `body`, then patches the length (RDLENGTH).
    mutating func writeLengthPrefixed(_ body: (inout DNSWriter) -> Void) {
        let lengthIndex = self.buffer.writerIndex
        self.buffer.writeInteger(UInt16(0))
        body(&self)
        let length = self.buffer.writerIndex - lengthIndex - 2
        precondition(length <= Int(UInt16.max), "RDATA of \(length) bytes passed validation")
        self.buffer.setInteger(UInt16(length), at: lengthIndex)
    }
}
