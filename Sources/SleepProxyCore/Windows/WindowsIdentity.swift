import SleepProxyWire

/// The numbers of the Windows name protocols (docs/windows.md), each with its source.
public enum WindowsRules {
    /// RFC 1002 §4.2: the name service port.
    public static let netbiosPort: UInt16 = 137
    /// RFC 4795 §2: LLMNR's port and groups.
    public static let llmnrPort: UInt16 = 5355
    public static let llmnrGroupV4 = IPv4Address(rawValue: 0xE000_00FC)
    public static let llmnrGroupV6 = IPv6Address(high: 0xFF02_0000_0000_0000, low: 0x0001_0003)
    /// The TTL of a name query answer: what the PC answered in our capture (Samba's and Windows' default of 72 h),
    /// so a client caches the proxy's answer as long as the PC's.
    public static let netbiosAnswerTTL: UInt32 = 259_200
    /// RFC 4795 §2.8 recommends 30 s for LLMNR answers, and Windows sends 30.
    public static let llmnrAnswerTTL: UInt32 = 30
    /// Names kept per host: a PC registers three to six (its workstation, messenger and server names, and its
    /// workgroup's); 16 bounds what a forged MAC can make us keep, and one node-status answer's table.
    public static let maximumNames = 16
    /// Bytes of a saved identity: 16 names of 18 bytes, the statistics, the LLMNR name and its lengths.
    public static let maximumEncodedLength = 1 + maximumNames * 18 + 1 + NetBIOSMessage.statisticsLength + 1 + 255
}

/// What a Windows PC (or Samba host) showed of its names while it was awake (docs/windows.md §2): its NetBIOS
/// name table with the flags it listed, the statistics of its node-status answer (their first six bytes are its
/// unit ID: Windows puts its MAC there), and the name it answers over LLMNR. Learned only from frames whose source
/// is the adopted host's MAC.
public struct WindowsIdentity: Hashable, Sendable {
    public var names: [NetBIOSMessage.NodeStatusEntry] = []
    /// The node-status statistics as the PC sent them; zeros until a node-status answer was seen.
    public var statistics: [UInt8] = [UInt8](repeating: 0, count: NetBIOSMessage.statisticsLength)
    /// The single-label name it answered LLMNR for, lower-cased; nil until it was seen answering.
    public var llmnrName: String?

    public init() {}

    public var isEmpty: Bool { self.names.isEmpty && self.llmnrName == nil }

    /// Its own names: a group name (`WORKGROUP<00>`) is shared, and not the PC's to answer alone (RFC 1002
    /// §4.2.13: only the owner of a unique name answers a query for it).
    public var uniqueNames: [NetBIOSName] { self.names.filter { !$0.isGroup }.map(\.name) }

    /// Its machine name: the unique workstation name `<00>`, else any unique one.
    public var machineName: String? {
        (self.uniqueNames.first { $0.suffix == 0 } ?? self.uniqueNames.first)?.name
    }

    /// Adds or replaces one name (a registration or a query answer), within `WindowsRules.maximumNames`. True when
    /// the table changed.
    @discardableResult
    public mutating func learn(_ name: NetBIOSName, group: Bool) -> Bool {
        let flags = (group ? NetBIOSMessage.groupBit : 0) | NetBIOSMessage.activeBit
        if let index = self.names.firstIndex(where: { $0.name == name }) {
            guard self.names[index].flags != flags else { return false }
            self.names[index].flags = flags
            return true
        }
        guard self.names.count < WindowsRules.maximumNames else { return false }
        self.names.append(NetBIOSMessage.NodeStatusEntry(name: name, flags: flags))
        return true
    }

    /// A node-status answer of its own: the whole table and statistics, as it listed them.
    @discardableResult
    public mutating func learn(table: [NetBIOSMessage.NodeStatusEntry], statistics: [UInt8]) -> Bool {
        let names = Array(table.prefix(WindowsRules.maximumNames))
        var padded = Array(statistics.prefix(NetBIOSMessage.statisticsLength))
        padded += [UInt8](repeating: 0, count: NetBIOSMessage.statisticsLength - padded.count)
        guard names != self.names || padded != self.statistics else { return false }
        self.names = names
        self.statistics = padded
        return true
    }

    @discardableResult
    public mutating func forget(_ name: NetBIOSName) -> Bool {
        let before = self.names.count
        self.names.removeAll { $0.name == name }
        return self.names.count != before
    }

    // MARK: - Saved form (in the journal entry of the host, docs/state.md)

    public var encoded: [UInt8] {
        var bytes: [UInt8] = [UInt8(self.names.count)]
        for entry in self.names {
            bytes +=
                entry.name.padded + [
                    entry.name.suffix, UInt8(entry.flags >> 8), UInt8(truncatingIfNeeded: entry.flags),
                ]
        }
        bytes.append(UInt8(self.statistics.count))
        bytes += self.statistics
        let llmnr = Array((self.llmnrName ?? "").utf8.prefix(255))
        bytes.append(UInt8(llmnr.count))
        bytes += llmnr
        return bytes
    }

    /// Nil for bytes that are not a saved identity, or one past the bounds.
    public init?(encoded bytes: ArraySlice<UInt8>) {
        var at = bytes.startIndex
        func take(_ count: Int) -> ArraySlice<UInt8>? {
            guard count >= 0, bytes.endIndex - at >= count else { return nil }
            defer { at += count }
            return bytes[at..<at + count]
        }
        guard let count = take(1)?.first, Int(count) <= WindowsRules.maximumNames else { return nil }
        for _ in 0..<count {
            guard let entry = take(18) else { return nil }
            let start = entry.startIndex
            self.names.append(
                NetBIOSMessage.NodeStatusEntry(
                    name: NetBIOSName(raw: entry[start..<start + 16]),
                    flags: UInt16(entry[start + 16]) << 8 | UInt16(entry[start + 17])))
        }
        guard let length = take(1)?.first, Int(length) == NetBIOSMessage.statisticsLength,
            let statistics = take(Int(length))
        else { return nil }
        self.statistics = Array(statistics)
        guard let nameLength = take(1)?.first, let name = take(Int(nameLength)), at == bytes.endIndex else {
            return nil
        }
        self.llmnrName = name.isEmpty ? nil : String(decoding: name, as: UTF8.self)
    }
}
