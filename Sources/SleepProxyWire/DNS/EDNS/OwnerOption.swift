/// The EDNS0 Owner option (code 4, draft-cheshire-edns0-owner-option; docs/protocol.md §3.3): which machine owns
/// the records in this message, which sleep/wake epoch it is in, and how to wake it.
///
///     off  len  field
///      0    1   version (0)
///      1    1   sequence: the owner's sleep/wake epoch, +1 on every wake, wraps
///      2    6   primary MAC: identifies the machine
///      8    6   wake MAC (optional): the interface to wake; absent means the primary MAC
///     14  4/6   SecureOn password (optional)
///
/// OPTION-LENGTH is the data length only: 8, 14, 18 or 20. Some third-party text counts the 4-byte option
/// header and says 12/18/22/24; follow mDNSResponder (`ValidOwnerLength`).
public struct OwnerOption: Hashable, Sendable {
    /// The four data lengths mDNSResponder accepts (`ValidOwnerLength`).
    public static let allowedLengths: Set<Int> = [8, 14, 18, 20]

    /// Must be 0; a receiver treats any other version as "no owner" (docs/protocol.md §3.3). Kept so the registration
    /// logic can say why it refused.
    public var version: UInt8
    public var sequence: UInt8
    public var primaryMAC: MACAddress
    /// Present when the sender wrote the 14-, 18- or 20-byte form, even if equal to the primary MAC.
    public var wakeMAC: MACAddress?
    public var password: SecureOnPassword?

    public init(
        version: UInt8 = 0,
        sequence: UInt8,
        primaryMAC: MACAddress,
        wakeMAC: MACAddress? = nil,
        password: SecureOnPassword? = nil
    ) {
        self.version = version
        self.sequence = sequence
        self.primaryMAC = primaryMAC
        self.wakeMAC = wakeMAC
        self.password = password
    }

    /// The MAC a magic packet must carry: the wake MAC, or the primary MAC when none was sent.
    public var effectiveWakeMAC: MACAddress { self.wakeMAC ?? self.primaryMAC }

    init?(data: [UInt8]) {
        guard OwnerOption.allowedLengths.contains(data.count) else { return nil }
        self.version = data[0]
        self.sequence = data[1]
        self.primaryMAC = MACAddress(bytes: data[2..<8])!
        self.wakeMAC = data.count >= 14 ? MACAddress(bytes: data[8..<14])! : nil
        self.password = data.count > 14 ? SecureOnPassword(bytes: Array(data[14...])) : nil
    }

    /// The shortest form that carries every field set: a password forces the wake MAC to be written.
    var data: [UInt8] {
        var data = [self.version, self.sequence] + self.primaryMAC.bytes
        if self.wakeMAC != nil || self.password != nil { data += self.effectiveWakeMAC.bytes }
        if let password = self.password { data += password.bytes }
        return data
    }
}
