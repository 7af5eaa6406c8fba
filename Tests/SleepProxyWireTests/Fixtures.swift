import Foundation
import NIOCore

/// Loads the packet fixtures bundled with this test target.
enum Fixtures {
    static func bytes(_ name: String) throws -> [UInt8] {
        guard let url = Bundle.module.url(forResource: name, withExtension: nil, subdirectory: "Fixtures") else {
            throw FixtureError.missing(name)
        }
        return Array(try Data(contentsOf: url))
    }

    enum FixtureError: Error { case missing(String), badPcap(String) }
}

/// A reader for classic libpcap files (not pcapng): enough to pull frames out of the bundled captures.
struct PcapFile {
    struct Record {
        var seconds: UInt32
        var fraction: UInt32
        var data: [UInt8]
    }

    var linkType: UInt32
    var records: [Record]

    init(_ bytes: [UInt8]) throws {
        guard bytes.count >= 24 else { throw Fixtures.FixtureError.badPcap("short global header") }
        func u32(_ at: Int, _ little: Bool) -> UInt32 {
            let b = bytes[at..<at + 4].map(UInt32.init)
            return little ? b[0] | b[1] << 8 | b[2] << 16 | b[3] << 24 : b[3] | b[2] << 8 | b[1] << 16 | b[0] << 24
        }
        let magics: Set<UInt32> = [0xA1B2_C3D4, 0xA1B2_3C4D]
        let little: Bool
        if magics.contains(u32(0, true)) {
            little = true
        } else if magics.contains(u32(0, false)) {
            little = false
        } else {
            throw Fixtures.FixtureError.badPcap("bad magic")
        }
        self.linkType = u32(20, little)
        var records: [Record] = []
        var offset = 24
        while offset < bytes.count {
            guard offset + 16 <= bytes.count else { throw Fixtures.FixtureError.badPcap("short record header") }
            let length = Int(u32(offset + 8, little))
            guard offset + 16 + length <= bytes.count else { throw Fixtures.FixtureError.badPcap("short record") }
            records.append(
                Record(
                    seconds: u32(offset, little), fraction: u32(offset + 4, little),
                    data: Array(bytes[offset + 16..<offset + 16 + length])))
            offset += 16 + length
        }
        self.records = records
    }
}
