import SleepProxyWire

/// Why a registration was malformed: answered FORMERR (docs/protocol.md §3.6), store unchanged.
public enum RegistrationProblem: String, Hashable, Sendable, CaseIterable {
    /// The datagram is not a decodable DNS message.
    case undecodable
    /// More than one zone entry, or one that is not "." or "local." (RFC 2136 §2.3; Apple sends none).
    case badZone
    /// An update-section record of class ANY or NONE: a deletion (RFC 2136 §2.5), which Apple never sends.
    case deletion
    /// An update-section record of a class other than IN.
    case badClass
    /// An OPT record in the update section.
    case optInUpdateSection
    /// An update section with no records.
    case noRecords
    /// No OPT record in the additional section (Apple: FormErr).
    case missingOPT
    /// More than one OPT record (RFC 6891 §6.1.1), or one whose owner name is not the root.
    case badOPT
    /// No Update Lease option (Apple: FormErr).
    case missingLease
    /// An Update Lease option of a length other than 4 or 8.
    case badLease
    /// A lease of 0: Apple answers FormErr; it is not a deletion (docs/protocol.md §5.3).
    case zeroLease
    /// No Owner option (Apple: FormErr).
    case missingOwner
    /// An Owner option of a length other than 8, 14, 18 or 20.
    case badOwner
    /// An Owner option of a version other than 0 (Apple treats it as absent).
    case ownerVersion
    /// A primary or wake MAC that is zero, multicast or broadcast.
    case ownerMAC
}

/// Why a well-formed registration was refused: by default no reply at all (see `RefusalReply`).
public enum RegistrationRefusal: String, Hashable, Sendable, CaseIterable {
    /// The source address is not on the link of the interface it arrived on.
    case sourceNotOnLink
    /// A claimed address (from a reverse-mapping PTR) is outside the interface's prefixes and not IPv6 link-local.
    case claimOutsideInterface
    /// The source address is not one of the addresses the registration claims.
    case sourceNotClaimed
    /// A claimed address is one of the proxy's own.
    case claimsProxyAddress
    /// A claimed address is held by another sleeping host on the same interface.
    case claimsOtherHostAddress
    /// The host would hold more records than the per-host limit.
    case tooManyRecordsForHost
    /// The proxy would hold more records than its total limit (Apple: Refused).
    case tooManyRecords
    /// The proxy would hold more hosts than its limit.
    case tooManyHosts
    /// The source sent more registrations than the rate limit allows.
    case rateLimited
}

/// Datagrams on the registration port that are not registrations at all: never answered.
public enum IgnoredDatagram: String, Hashable, Sendable, CaseIterable {
    /// Shorter than a DNS header.
    case tooShort
    /// A response (QR set): answering responses invites loops.
    case response
}

/// The result of handling one datagram on the registration port.
public enum RegistrationOutcome: Hashable, Sendable {
    /// Stored. The I/O layer must make `registration` durable before sending `reply`: an acknowledged
    /// registration must survive a crash.
    case accepted(Acceptance)
    /// Malformed: `reply` is FORMERR, the store is unchanged.
    case malformed(RegistrationProblem, reply: [UInt8])
    /// Not an UPDATE: `reply` is NOTIMP (RFC 1035 §4.1.1), the store is unchanged.
    case notImplemented(opcode: DNSOpcode, reply: [UInt8])
    /// Refused by policy; `reply` is REFUSED, or nil when refusals are silent. The store is unchanged.
    case refused(RegistrationRefusal, reply: [UInt8]?)
    /// Not a request; nothing is sent.
    case ignored(IgnoredDatagram)

    public var reply: [UInt8]? {
        switch self {
        case .accepted(let acceptance): return acceptance.reply
        case .malformed(_, let reply): return reply
        case .notImplemented(_, let reply): return reply
        case .refused(_, let reply): return reply
        case .ignored: return nil
        }
    }
}

public struct Acceptance: Hashable, Sendable {
    /// The host's whole state after this part.
    public var registration: OwnerRegistration
    /// The lease granted, in seconds.
    public var grantedLease: UInt32
    /// True when this part started a new sleep epoch (new host, or a different Owner sequence).
    public var startedNewEpoch: Bool
    /// The host's previous state when this part replaced an earlier epoch, so the other parts of the proxy can
    /// stop acting on what it held.
    public var replaced: OwnerRegistration?
    /// The host's state before this part, in this epoch or an earlier one (what the responder already
    /// announced).
    public var previous: OwnerRegistration?
    public var reply: [UInt8]
}
