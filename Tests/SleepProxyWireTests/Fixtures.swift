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
