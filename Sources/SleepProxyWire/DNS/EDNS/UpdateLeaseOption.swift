/// RFC 9664 §4 Update Lease option (code 2): how long the requester wants its records kept, and how long the
/// server grants.
///
///     +---+---+---+---+---+---+---+---+---+---+---+---+---+---+---+---+
///     |                          LEASE (32)                           |
///     |                  KEY-LEASE (32, optional)                     |
///
/// Apple's clients send and expect the 4-byte form; the 8-byte form adds KEY-LEASE. Apple's proxy ignores the
/// 8-byte form (docs/protocol.md §3.2); we decode both, and a reply uses the form the request used (RFC 9664 §4.3).
public struct UpdateLeaseOption: Hashable, Sendable {
    /// RFC 9664 §4: OPTION-LENGTH is 4 (LEASE) or 8 (LEASE and KEY-LEASE).
    public static let allowedLengths: Set<Int> = [4, 8]

    public var lease: UInt32
    public var keyLease: UInt32?

    public init(lease: UInt32, keyLease: UInt32? = nil) {
        self.lease = lease
        self.keyLease = keyLease
    }

    init?(data: [UInt8]) {
        guard UpdateLeaseOption.allowedLengths.contains(data.count) else { return nil }
        func u32(_ at: Int) -> UInt32 { data[at..<at + 4].reduce(0) { $0 << 8 | UInt32($1) } }
        self.lease = u32(0)
        self.keyLease = data.count == 8 ? u32(4) : nil
    }

    var data: [UInt8] {
        func bytes(_ value: UInt32) -> [UInt8] { (0..<4).map { UInt8(truncatingIfNeeded: value >> (24 - 8 * $0)) } }
        return bytes(self.lease) + (self.keyLease.map(bytes) ?? [])
    }
}
