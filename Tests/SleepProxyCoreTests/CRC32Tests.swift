import SleepProxyTestSupport
import Testing

@testable import SleepProxyCore

@Suite("CRC32")
struct CRC32Tests {
    /// The plain definition, a bit at a time: what every journal written so far was checked with.
    static func reference(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes {
            crc ^= UInt32(byte)
            for _ in 0..<8 { crc = crc & 1 != 0 ? 0xEDB8_8320 ^ (crc >> 1) : crc >> 1 }
        }
        return crc ^ 0xFFFF_FFFF
    }

    @Test func theStandardCheckValue() {
        // The CRC-32 catalogue's check: "123456789" gives 0xCBF43926 (zlib's crc32 agrees).
        #expect(CRC32.checksum(Array("123456789".utf8)) == 0xCBF4_3926)
        #expect(CRC32.checksum([UInt8]()) == 0)
    }

    @Test func everyLengthAndAlignmentMatchesTheDefinition() {
        var random = SplitMix64(seed: 16)
        let bytes = (0..<300).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        // Lengths around the eight-byte step, from offsets that are not eight-byte aligned.
        for start in 0..<9 {
            for length in 0..<(bytes.count - start) where length < 40 || length % 37 == 0 {
                let slice = bytes[start..<start + length]
                #expect(CRC32.checksum(slice) == Self.reference(Array(slice)), "start \(start), length \(length)")
            }
        }
        // A collection without contiguous storage takes the same path through a copy.
        #expect(CRC32.checksum(bytes.lazy.map { $0 }) == Self.reference(bytes))
    }
}
