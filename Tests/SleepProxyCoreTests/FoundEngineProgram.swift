import SleepProxyCore

/// A program `scripts/fuzz engine` found breaking an invariant (docs/fuzzing.md), kept with the fix as a test of its
/// own: `EngineProgramTests.aProgramTheFuzzerFoundKeepsEveryInvariant` runs each.
struct FoundEngineProgram: Sendable, CustomStringConvertible {
    var description: String
    /// Hosts adopted from the start (`EngineProgram(_:adopting:)`).
    var adopting: Int
    var bytes: [UInt8]

    static let all = [adoptedHostPastTheLimits, registrationReplacingAStandIn]

    /// Found once programs adopted hosts: an adopted host going quiet while the proxy held its limit of hosts was held
    /// all the same (7 of 6). It now waits, like a registration refused.
    static let adoptedHostPastTheLimits = FoundEngineProgram(
        description: "an adopted host is held only within the limits", adopting: 0,
        bytes: [
            173, 210, 219, 5, 190, 44, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 16,
            34, 250, 231, 133, 102, 208, 142, 21, 102, 71, 6, 36, 44, 226, 87, 70, 27, 0, 167, 233,
            174, 16, 160, 21, 243, 251, 239, 172, 154, 180, 96, 219, 15, 74, 137, 147, 109, 97, 71, 228,
            45, 246, 143, 160, 63, 156, 108, 163, 61, 60, 166, 106, 29, 231, 96, 206, 207, 246, 156, 215,
            38, 157, 239, 100, 70, 114, 46, 84, 138, 189, 69, 249, 245, 58, 115, 88, 229, 138, 128, 6,
            151, 114, 20, 212, 246, 246, 246, 246, 246, 246, 246, 246, 246, 246, 246, 246, 246, 246, 246, 246,
            246, 246, 246, 246, 246, 246, 246, 246, 246, 246, 246, 246, 246, 43, 246, 246, 246, 246, 246, 246,
            246, 246, 246, 246, 246, 246, 246, 246, 246, 246, 246, 246, 246, 246, 246, 246, 246, 246, 246, 246,
            246, 246, 246, 246, 246, 246, 241, 38, 69, 186, 76, 12, 152, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0, 0, 73, 202, 188, 35, 40, 10, 92, 201, 173, 120, 183, 30, 90, 241,
            38, 24, 184, 74, 203, 181, 156, 219, 10, 165, 177, 47, 113, 26, 9, 18, 207, 207, 207, 207,
            207, 207, 207, 207, 161, 55, 173, 244, 237, 132, 192, 207, 207, 207, 207, 207, 207, 207, 207, 207,
            207, 207, 207, 207, 207, 207, 207, 207, 207, 207, 207, 207, 207, 207, 207, 207, 207, 207, 207, 207,
            207, 207, 207, 207, 207, 207, 207, 207, 207, 207, 207, 207, 207, 207, 207, 207, 207, 207, 207, 207,
            101, 207, 207, 0, 0, 0, 0, 207, 207, 207, 207, 207, 207, 207, 207, 207, 207, 207, 207, 207,
            207, 207, 207, 207, 231, 34, 159, 197, 167, 186, 168, 230, 91, 86, 105, 136, 118, 24, 87, 76,
            204, 175, 131, 102, 43, 232, 118, 214, 245, 228, 2, 2, 0, 192,
        ])

    /// Found once programs spoke Windows: an adopted PC held asleep registered itself with message ID 0, the ID of the
    /// proxy's stand-in for it, and was taken for a retransmission: still spoken for, its Windows names still
    /// answered from what it had taught. The first byte adopts hosts 0 and 1, as the fuzz target reads it.
    static let registrationReplacingAStandIn = FoundEngineProgram(
        description: "a PC's own registration replacing its stand-in is new", adopting: 2,
        bytes: [
            50, 230, 0, 0, 0, 0, 0, 0, 0, 32, 192, 39, 174, 45, 252, 147, 202, 72, 158, 12,
            188, 186, 236, 216, 46, 204, 255, 59, 217, 234, 119, 35, 112, 116, 105, 111, 110, 97, 108, 9,
            23, 36, 61, 78, 0, 0, 0, 4, 239, 124, 76, 122, 160, 214, 21, 250, 127, 94, 224, 96,
            58, 243, 195, 247, 8, 255, 111, 196, 17, 238, 71, 150, 123, 160, 136, 221, 13, 180, 85, 62,
            188, 111, 38, 87, 234, 54, 199, 73, 43, 50, 253, 130, 155, 26, 134, 96, 58, 243, 195, 247,
            8, 255, 111, 196, 17, 238, 71, 150, 123, 160, 136, 221, 116, 117, 117, 117, 213, 213, 213, 213,
            213, 213, 213, 213, 43, 50, 253, 130, 155, 26, 134, 86, 136, 191, 43, 130, 85, 18, 111, 59,
            229, 18, 182, 239, 17, 97, 246, 24, 149, 46, 86, 33, 142, 104, 3, 3, 146, 22, 241, 53,
            199, 201, 43, 50, 253, 130, 155, 26, 134, 86, 136, 191, 43, 130, 3, 146, 22, 241, 132, 36,
            204, 17, 100, 88, 23, 24, 231, 96, 247, 10, 66, 111, 70, 82, 95, 199, 139, 217, 212, 40,
            5, 0, 0, 80, 83, 2, 0, 0, 166, 62, 254, 238, 87, 78, 105, 222, 172, 234, 119, 33,
            204, 17, 100, 88, 75,
        ])
}
