/// One option inside an OPT record's RDATA (RFC 6891 §6.1.2):
///
///     +0 (MSB)                            +1 (LSB)
///     +---+---+---+---+---+---+---+---+---+---+---+---+---+---+---+---+
///     |                          OPTION-CODE                          |
///     |                         OPTION-LENGTH                         |
///     /                          OPTION-DATA                          /
///
/// The two options a sleep proxy lives on are decoded; a known code with a length its definition does not allow
/// is kept as `.unknown`, exactly as Apple's parser skips it (docs/protocol.md §3.1), so callers can tell "absent"
/// from "present but malformed" by looking for an `.unknown` with that code.
public enum EDNSOption: Hashable, Sendable {
    case updateLease(UpdateLeaseOption)
    case owner(OwnerOption)
    case unknown(code: UInt16, data: [UInt8])

    public enum Code {
        /// RFC 9664 §4 (formerly draft-sekar-dns-ul): Update Lease.
        public static let updateLease: UInt16 = 2
        /// draft-cheshire-edns0-owner-option: Owner (IANA "Reserved" 4).
        public static let owner: UInt16 = 4
    }

    public var code: UInt16 {
        switch self {
        case .updateLease: return Code.updateLease
        case .owner: return Code.owner
        case .unknown(let code, _): return code
        }
    }

    init(code: UInt16, data: [UInt8]) {
        switch code {
        case Code.updateLease:
            if let lease = UpdateLeaseOption(data: data) {
                self = .updateLease(lease)
                return
            }
        case Code.owner:
            if let owner = OwnerOption(data: data) {
                self = .owner(owner)
                return
            }
        default:
            break
        }
        self = .unknown(code: code, data: data)
    }

    var data: [UInt8] {
        switch self {
        case .updateLease(let lease): return lease.data
        case .owner(let owner): return owner.data
        case .unknown(_, let data): return data
        }
    }
}
