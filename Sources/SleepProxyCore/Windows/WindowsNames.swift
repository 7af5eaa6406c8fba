import NIOCore
import SleepProxyWire

/// Answers for sleeping Windows PCs as they answered while awake (docs/windows.md §3): NetBIOS name queries for
/// their unique names, node status to their held address, and LLMNR A and AAAA questions for their name. Which
/// hosts sleep is the engine's to say (`speak`, `silence`); this holds what to answer and for whom. Pure.
public struct WindowsNames: Sendable {
    struct Held: Sendable {
        var identity: WindowsIdentity
        /// The addresses the proxy claims for it, by family: the only ones a client can wake it through.
        var v4: [IPv4Address]
        var v6: [IPv6Address]
    }

    private(set) var held: [OwnerKey: Held] = [:]
    /// Unique NetBIOS names of the hosts spoken for.
    private var byName: [NetBIOSName: OwnerKey] = [:]
    /// LLMNR names (lower-cased) of the hosts spoken for.
    private var byLLMNR: [String: OwnerKey] = [:]
    public internal(set) var statistics = WindowsStatistics()
    /// WS-Discovery matches waiting for their delay (SOAP-over-UDP), in the order they are due.
    private var pending: [(due: Timestamp, host: OwnerKey, frame: [UInt8], interfaceIndex: Int)] = []
    /// The Probe and Resolve MessageIDs answered lately (`WindowsRules.wsdRecentMessages`): each is sent twice.
    private var recentMessages: [String] = []
    /// Counts the matches sent, for their MessageIDs.
    private var sent: UInt64 = 0

    public init() {}

    public var isEmpty: Bool { self.held.isEmpty }

    public func nextDeadline() -> Timestamp? { self.pending.first?.due }

    /// Whether a PC with a WS-Discovery endpoint is held at `address` on the interface.
    public func hasEndpoint(at address: IPAddress, on interface: String) -> Bool {
        self.held.contains { key, held in
            guard key.interface == interface, held.identity.wsd != nil else { return false }
            switch address {
            case .v4(let a): return held.v4.contains(a)
            case .v6(let a): return held.v6.contains(a)
            }
        }
    }

    /// The matches whose delay ran out.
    public mutating func takeDue(now: Timestamp) -> [(frame: [UInt8], interfaceIndex: Int)] {
        guard let first = self.pending.first, first.due <= now else { return [] }
        let count = self.pending.firstIndex { $0.due > now } ?? self.pending.count
        let due = self.pending.prefix(count).map { ($0.frame, $0.interfaceIndex) }
        self.pending.removeFirst(count)
        return due
    }

    /// `wsdp:Device`, what Windows probes for.
    public static let deviceType = WSDiscoveryMessage.QName(
        namespace: "http://schemas.xmlsoap.org/ws/2006/02/devprof", local: "Device")

    /// A version-4-shaped UUID URN from two numbers, mixed (SplitMix64's finaliser): the MessageIDs of the proxy's
    /// messages, unique as long as the numbers are.
    public static func uuid(_ a: UInt64, _ b: UInt64) -> String {
        func mix(_ value: UInt64) -> UInt64 {
            var z = value &+ 0x9E37_79B9_7F4A_7C15
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        let high = mix(a ^ mix(b)) & 0xFFFF_FFFF_FFFF_0FFF | 0x0000_0000_0000_4000
        let low = mix(b ^ mix(a)) & 0x3FFF_FFFF_FFFF_FFFF | 0x8000_0000_0000_0000
        func hex(_ value: UInt64, _ digits: Int) -> String {
            let text = String(value, radix: 16)
            return String(repeating: "0", count: max(0, digits - text.count)) + text
        }
        return "urn:uuid:\(hex(high >> 32, 8))-\(hex(high >> 16 & 0xFFFF, 4))-\(hex(high & 0xFFFF, 4))-"
            + "\(hex(low >> 48, 4))-\(hex(low & 0xFFFF_FFFF_FFFF, 12))"
    }

    /// What a client resolved through an answer, for the wake gate.
    public struct Answer: Sendable {
        public var frame: [UInt8]
        public var host: OwnerKey
        public var asker: IPAddress
        /// A name resolution (a query for its name, not a node-status listing).
        public var resolves: Bool
        /// Another machine registered this name of the PC's: defended, and the PC is to be woken.
        public var conflict: String? = nil
    }

    /// The host sleeps: its names are answered from now (those of this registration: any it had before go).
    public mutating func speak(for registration: OwnerRegistration) {
        self.silence(registration.key)
        guard let identity = registration.windows, !identity.isEmpty else { return }
        var held = Held(identity: identity, v4: [], v6: [])
        for address in registration.addresses {
            switch address {
            case .v4(let a): held.v4.append(a)
            case .v6(let a): held.v6.append(a)
            }
        }
        // Link-local first: an IPv6 answer comes from it (RFC 4795 §2.5 answers from the queried interface).
        held.v6.sort { $0.isLinkLocal && !$1.isLinkLocal }
        self.held[registration.key] = held
        for name in identity.uniqueNames where self.byName[name] == nil { self.byName[name] = registration.key }
        if let llmnr = identity.llmnrName, self.byLLMNR[llmnr] == nil { self.byLLMNR[llmnr] = registration.key }
    }

    public mutating func silence(_ key: OwnerKey) {
        // A match queued for it would go out after it is awake again: dropped with it.
        self.pending.removeAll { $0.host == key }
        guard let held = self.held.removeValue(forKey: key) else { return }
        for name in held.identity.uniqueNames where self.byName[name] == key { self.byName[name] = nil }
        if let llmnr = held.identity.llmnrName, self.byLLMNR[llmnr] == key { self.byLLMNR[llmnr] = nil }
    }

    /// A UDP datagram to port 137, 5355 or 3702 seen on `context` (the caller checked the port). Malformed input
    /// is counted and dropped. A WS-Discovery match is not answered at once but queued (`takeDue`).
    public mutating func receive(
        _ datagram: UDPDatagram, source: IPAddress, destination: IPAddress, sourceMAC: MACAddress,
        context: InterfaceContext, now: Timestamp
    ) -> Answer? {
        // A held host's own question is its own business (the engine hands it back); it is never answered for it.
        guard !self.held.keys.contains(where: { $0.primaryMAC == sourceMAC }) else { return nil }
        let bytes = Array(datagram.payload.readableBytesView)
        switch datagram.destinationPort {
        case WindowsRules.wsdPort:
            guard let message = try? WSDiscoveryMessage(decoding: bytes) else {
                self.statistics.malformed += 1
                return nil
            }
            self.answer(wsd: message, from: source, port: datagram.sourcePort, mac: sourceMAC, context, now: now)
            return nil
        case WindowsRules.netbiosPort:
            guard case .v4(let from) = source, case .v4(let to) = destination else { return nil }
            guard let query = try? NetBIOSMessage(decoding: bytes) else {
                self.statistics.malformed += 1
                return nil
            }
            return self.answer(netbios: query, from: from, port: datagram.sourcePort, to: to, mac: sourceMAC, context)
        case WindowsRules.llmnrPort:
            guard let query = try? DNSMessage(decoding: bytes) else {
                self.statistics.malformed += 1
                return nil
            }
            return self.answer(llmnr: query, from: source, port: datagram.sourcePort, mac: sourceMAC, context)
        default:
            return nil
        }
    }

    private mutating func answer(
        netbios query: NetBIOSMessage, from source: IPv4Address, port: UInt16, to destination: IPv4Address,
        mac: MACAddress, _ context: InterfaceContext
    ) -> Answer? {
        if !query.isResponse, query.opcode == .registration || query.opcode == .multihomedRegistration {
            return self.defend(registration: query, from: source, port: port, mac: mac, context)
        }
        guard !query.isResponse, query.opcode == .query, query.questions.count == 1,
            let question = query.questions.first
        else { return nil }
        let key: OwnerKey
        let response: NetBIOSMessage
        var resolves = false
        switch question.type {
        case NetBIOSMessage.typeNB:
            // RFC 1002 §5.1.1.4: a B-node answers a query for its own unique name, broadcast or unicast to it.
            guard let owner = self.byName[question.name], let held = self.held[owner], let address = held.v4.first,
                owner.interface == context.name,
                query.isBroadcast || held.v4.contains(destination)
            else { return nil }
            key = owner
            resolves = true
            response = .nameQueryResponse(
                to: query, name: question.name, ttl: WindowsRules.netbiosAnswerTTL, nbFlags: 0, address: address)
            self.statistics.nameQueries += 1
        case NetBIOSMessage.typeNBSTAT:
            // RFC 1002 §4.2.17: node status is asked of an address, unicast; the held host's table answers it.
            guard
                let owner = self.held.first(where: {
                    $0.key.interface == context.name && $0.value.v4.contains(destination)
                })?.key,
                let held = self.held[owner]
            else { return nil }
            key = owner
            response = .nodeStatusResponse(
                to: query, names: held.identity.names, statistics: held.identity.statistics)
            self.statistics.nodeStatus += 1
        default:
            return nil
        }
        guard let from = self.held[key]?.v4.contains(destination) == true ? destination : self.held[key]?.v4.first,
            let frame = Takeover.datagramFrame(
                from: .v4(from), port: WindowsRules.netbiosPort, to: .v4(source), port: port, mac: mac,
                payload: response.encoded(), context: context)
        else { return nil }
        return Answer(frame: frame, host: key, asker: .v4(source), resolves: resolves)
    }

    private mutating func answer(
        llmnr query: DNSMessage, from source: IPAddress, port: UInt16, mac: MACAddress, _ context: InterfaceContext
    ) -> Answer? {
        // RFC 4795 §2.1.1: a query (QR and opcode 0) with exactly one question; the C bit set is a conflict check,
        // answered the same way.
        guard !query.flags.isResponse, query.flags.opcode == .query, query.questions.count == 1,
            let question = query.questions.first, question.qclass == .in, question.name.labelCount == 1,
            let label = question.name.labelStrings.first,
            let key = self.byLLMNR[label.lowercased()], key.interface == context.name, let held = self.held[key]
        else { return nil }
        var answers: [DNSResourceRecord] = []
        if question.type == .a || question.type == .any {
            answers += held.v4.map {
                DNSResourceRecord(
                    name: question.name, ttl: WindowsRules.llmnrAnswerTTL, rdata: .a(ARecord(address: $0)))
            }
        }
        if question.type == .aaaa || question.type == .any {
            answers += held.v6.map {
                DNSResourceRecord(
                    name: question.name, ttl: WindowsRules.llmnrAnswerTTL, rdata: .aaaa(AAAARecord(address: $0)))
            }
        }
        // No address of the type asked: nothing to wake it through, so no answer (the client's other question,
        // A or AAAA, resolves it).
        guard !answers.isEmpty else { return nil }
        let from: IPAddress
        switch source {
        case .v4:
            guard let address = held.v4.first else { return nil }
            from = .v4(address)
        case .v6:
            guard let address = held.v6.first else { return nil }
            from = .v6(address)
        }
        // RFC 4795 §2.1.1: the C, TC and T bits clear, the question echoed.
        let response = DNSMessage(
            id: query.id, flags: DNSHeaderFlags(response: true), questions: [question], answers: answers)
        guard
            let frame = Takeover.datagramFrame(
                from: from, port: WindowsRules.llmnrPort, to: source, port: port, mac: mac,
                payload: response.encoded(), context: context)
        else { return nil }
        self.statistics.llmnrAnswers += 1
        return Answer(frame: frame, host: key, asker: source, resolves: true)
    }
}

extension WindowsNames {
    /// Another machine registering one of a sleeping PC's unique names (RFC 1002 §5.1.1.2): the owner of a B-node
    /// name answers with a negative registration response (RCODE ACT_ERR) from its address, as the PC would, and
    /// the answer carries the conflict so that the engine wakes the PC to defend the name itself, as for an mDNS
    /// conflict. A group name may be registered by anyone.
    fileprivate mutating func defend(
        registration: NetBIOSMessage, from source: IPv4Address, port: UInt16, mac: MACAddress,
        _ context: InterfaceContext
    ) -> Answer? {
        guard let question = registration.questions.first, question.type == NetBIOSMessage.typeNB,
            let key = self.byName[question.name], key.interface == context.name, key.primaryMAC != mac,
            let held = self.held[key], let address = held.v4.first, !held.v4.contains(source),
            registration.additionals.first?.addressEntries?.first.map({ $0.flags & NetBIOSMessage.groupBit == 0 })
                ?? true
        else { return nil }
        var negative = NetBIOSMessage(
            id: registration.id,
            flags: NetBIOSMessage.flagResponse | UInt16(NetBIOSMessage.Opcode.registration.rawValue) << 11
                | NetBIOSMessage.flagAuthoritative | NetBIOSMessage.flagRecursionDesired
                | NetBIOSMessage.flagRecursionAvailable | UInt16(NetBIOSMessage.activeError))
        let raw = address.rawValue
        negative.answers = [
            NetBIOSMessage.Record(
                name: question.name, type: NetBIOSMessage.typeNB, ttl: 0,
                rdata: [0, 0] + [24, 16, 8, 0].map { UInt8(truncatingIfNeeded: raw >> $0) })
        ]
        guard
            let frame = Takeover.datagramFrame(
                from: .v4(address), port: WindowsRules.netbiosPort, to: .v4(source), port: port, mac: mac,
                payload: negative.encoded(), context: context)
        else { return nil }
        self.statistics.conflicts += 1
        return Answer(
            frame: frame, host: key, asker: .v4(source), resolves: false, conflict: question.name.description)
    }

    /// A Probe matched by a sleeping PC's types (and carrying no scopes, as Windows' do not), or a Resolve of its
    /// endpoint: its match, unicast from its address and port 3702, queued after a random 0-500 ms and once more
    /// 50-250 ms later (SOAP-over-UDP). A repeated MessageID is answered once.
    fileprivate mutating func answer(
        wsd message: WSDiscoveryMessage, from source: IPAddress, port: UInt16, mac: MACAddress,
        _ context: InterfaceContext, now: Timestamp
    ) {
        guard message.kind == .probe || message.kind == .resolve, !self.recentMessages.contains(message.messageID)
        else { return }
        let matches = self.held.filter { key, held in
            guard key.interface == context.name, let endpoint = held.identity.wsd else { return false }
            if message.kind == .resolve { return message.endpoint == endpoint.address }
            return (message.scopes ?? "").isEmpty && message.types.allSatisfy(endpoint.types.contains)
        }
        guard !matches.isEmpty else { return }
        self.recentMessages.append(message.messageID)
        if self.recentMessages.count > WindowsRules.wsdRecentMessages { self.recentMessages.removeFirst() }
        for (key, held) in matches.sorted(by: { $0.key < $1.key }) {
            guard var endpoint = held.identity.wsd else { continue }
            let from: IPAddress
            switch source {
            case .v4:
                guard let address = held.v4.first else { continue }
                from = .v4(address)
            case .v6:
                guard let address = held.v6.first else { continue }
                from = .v6(address)
            }
            self.sent &+= 1
            endpoint.messageNumber &+= 1
            self.held[key]?.identity.wsd = endpoint
            var match = WSDiscoveryMessage(
                kind: message.kind == .probe ? .probeMatches : .resolveMatches,
                messageID: Self.uuid(key.primaryMAC.rawValue ^ self.sent, UInt64(bitPattern: now.nanoseconds)))
            match.relatesTo = message.messageID
            match.instanceID = endpoint.instanceID
            match.messageNumber = String(endpoint.messageNumber)
            match.endpoint = endpoint.address
            match.types = endpoint.types
            match.metadataVersion = endpoint.metadataVersion
            // Windows' ProbeMatch carries no XAddrs (a Resolve gets them); its ResolveMatch does.
            if message.kind == .resolve { match.xaddrs = endpoint.xaddrs }
            guard
                let frame = Takeover.datagramFrame(
                    from: from, port: WindowsRules.wsdPort, to: source, port: port, mac: mac, payload: match.encoded(),
                    context: context)
            else { continue }
            // The delay from the message and the host, spread over the window as a random one would be.
            var hasher = Hasher()
            hasher.combine(message.messageID)
            hasher.combine(key)
            let spread = UInt64(UInt(bitPattern: hasher.finalize()))
            let first = now + .milliseconds(Int64(spread % 501))
            let repeatDelay = WindowsRules.wsdRepeatDelay
            let extra = (repeatDelay.maximum - repeatDelay.minimum) / 1_000_000 * Int(spread >> 32 % 1_000_000)
            let second = first + repeatDelay.minimum + extra
            guard self.pending.count + 2 <= WindowsRules.maximumPendingMatches else {
                self.statistics.matchesDropped += 1
                continue
            }
            self.enqueue(first, key, frame, context.index)
            self.enqueue(second, key, frame, context.index)
            self.statistics.wsdMatches += 1
        }
    }

    private mutating func enqueue(_ due: Timestamp, _ host: OwnerKey, _ frame: [UInt8], _ interfaceIndex: Int) {
        let index = self.pending.firstIndex { $0.due > due } ?? self.pending.count
        self.pending.insert((due, host, frame, interfaceIndex), at: index)
    }
}

/// What the Windows side answered, for the metrics.
public struct WindowsStatistics: Hashable, Sendable {
    public var nameQueries = 0
    public var nodeStatus = 0
    public var llmnrAnswers = 0
    public var wsdMatches = 0
    public var metadataRefused = 0
    public var conflicts = 0
    /// Matches not queued because `WindowsRules.maximumPendingMatches` were waiting (a flood of Probes).
    public var matchesDropped = 0
    public var malformed = 0

    public init() {}
}
