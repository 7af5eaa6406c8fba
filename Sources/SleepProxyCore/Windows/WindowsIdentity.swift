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
    /// The proxy's node-status and LLMNR questions to an awake PC: each at most three times an awake spell, 25 s
    /// apart (the idle check's pace, docs/adoption.md §3), until it answers.
    public static let questionsPerSpell = 3
    public static let questionInterval: Duration = .seconds(25)
    /// WS-Discovery (docs/windows.md §5): its port, and SOAP-over-UDP's delays. A match waits a random 0-500 ms
    /// (APP_MAX_DELAY) and is sent once more 50-250 ms later (UNICAST_UDP_REPEAT 1, UDP_MIN_DELAY, UDP_MAX_DELAY).
    public static let wsdPort: UInt16 = 3702
    public static let wsdGroupV4 = IPv4Address(rawValue: 0xEFFF_FFFA)
    public static let wsdGroupV4MAC = MACAddress(rawValue: 0x0100_5E7F_FFFA)
    public static let wsdMaximumDelay: Duration = .milliseconds(500)
    public static let wsdRepeatDelay: (minimum: Duration, maximum: Duration) = (.milliseconds(50), .milliseconds(250))
    /// The metadata port of a Windows PC's WS-Discovery (its XAddrs): a connection there is refused at once.
    public static let wsdMetadataPort: UInt16 = 5357
    /// Matches (each sent twice) waiting for their delay at most: Explorer probes a few times a minute, so a home
    /// has a handful waiting; a flood of Probes with ever new MessageIDs makes the proxy keep no more than this.
    public static let maximumPendingMatches = 64
    /// Recent Probe and Resolve MessageIDs remembered, to answer each once (SOAP-over-UDP repeats every message).
    public static let wsdRecentMessages = 64
    /// Bytes of one saved WS-Discovery field (an address, XAddrs): a PC's are under 100.
    public static let maximumWSDField = 1024
    /// Bytes of a saved identity: 16 names of 18 bytes, the statistics, the LLMNR name and its lengths, and the
    /// endpoint's four fields and types.
    public static let maximumEncodedLength =
        1 + maximumNames * 18 + 1 + NetBIOSMessage.statisticsLength + 1 + 255
        + 1 + (4 + WSDiscoveryMessage.maximumTypes * 2) * (2 + maximumWSDField) + 1
}

/// A PC's WS-Discovery endpoint, as its Hello or its matches gave it (docs/windows.md §5).
public struct WSDEndpoint: Hashable, Sendable {
    public var address: String
    public var types: [WSDiscoveryMessage.QName]
    public var xaddrs: String?
    public var metadataVersion: String
    public var instanceID: String?
    /// The MessageNumber of its latest message: the proxy's answers count on from it.
    public var messageNumber: UInt64

    public init(
        address: String, types: [WSDiscoveryMessage.QName], xaddrs: String?, metadataVersion: String,
        instanceID: String?, messageNumber: UInt64
    ) {
        self.address = address
        self.types = types
        self.xaddrs = xaddrs
        self.metadataVersion = metadataVersion
        self.instanceID = instanceID
        self.messageNumber = messageNumber
    }
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
    /// Its WS-Discovery endpoint; nil until its Hello or a match of its own was seen.
    public var wsd: WSDEndpoint?
    /// It answered the proxy's node-status question: its checks may ask that. A PC whose firewall drops inbound
    /// NetBIOS (Windows' Public profile) still broadcasts its registrations, and asked node status there it would
    /// look asleep while awake; it is checked by ARP instead (docs/windows.md §4).
    public var answersNodeStatus = false

    public init() {}

    public var isEmpty: Bool { self.names.isEmpty && self.llmnrName == nil && self.wsd == nil }

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
        let answered = !self.answersNodeStatus
        self.answersNodeStatus = true
        guard names != self.names || padded != self.statistics else { return answered }
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
        // Flags: bit 0 an endpoint follows, bit 1 it answers node status.
        let flags: UInt8 = (self.wsd == nil ? 0 : 1) | (self.answersNodeStatus ? 2 : 0)
        guard let wsd = self.wsd else { return bytes + [flags] }
        func field(_ text: String) {
            let utf8 = Array(text.utf8.prefix(WindowsRules.maximumWSDField))
            bytes += [UInt8(utf8.count >> 8), UInt8(truncatingIfNeeded: utf8.count)] + utf8
        }
        bytes.append(flags)
        for text in [
            wsd.address, wsd.xaddrs ?? "", wsd.metadataVersion, wsd.instanceID ?? "", String(wsd.messageNumber),
        ] {
            field(text)
        }
        let types = wsd.types.prefix(WSDiscoveryMessage.maximumTypes)
        bytes.append(UInt8(types.count))
        for type in types {
            field(type.namespace)
            field(type.local)
        }
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
        guard let nameLength = take(1)?.first, let name = take(Int(nameLength)) else { return nil }
        self.llmnrName = name.isEmpty ? nil : String(decoding: name, as: UTF8.self)
        // Entries written before 0.8.0 end here; later ones say whether an endpoint follows.
        guard at < bytes.endIndex else { return }
        guard let flags = take(1)?.first, flags <= 3 else { return nil }
        self.answersNodeStatus = flags & 2 != 0
        if flags & 1 != 0 {
            func field() -> String? {
                guard let length = take(2), case let count = Int(length.first!) << 8 | Int(length.last!),
                    count <= WindowsRules.maximumWSDField, let text = take(count)
                else { return nil }
                return String(decoding: text, as: UTF8.self)
            }
            guard let address = field(), let xaddrs = field(), let version = field(), let instance = field(),
                let number = field().flatMap({ UInt64($0) }), let count = take(1)?.first,
                Int(count) <= WSDiscoveryMessage.maximumTypes
            else { return nil }
            var types: [WSDiscoveryMessage.QName] = []
            for _ in 0..<count {
                guard let namespace = field(), let local = field() else { return nil }
                types.append(WSDiscoveryMessage.QName(namespace: namespace, local: local))
            }
            self.wsd = WSDEndpoint(
                address: address, types: types, xaddrs: xaddrs.isEmpty ? nil : xaddrs, metadataVersion: version,
                instanceID: instance.isEmpty ? nil : instance, messageNumber: number)
        }
        guard at == bytes.endIndex else { return nil }
    }
}
