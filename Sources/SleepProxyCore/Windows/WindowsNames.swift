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

    public init() {}

    public var isEmpty: Bool { self.held.isEmpty }

    /// What a client resolved through an answer, for the wake gate.
    public struct Answer: Sendable {
        public var frame: [UInt8]
        public var host: OwnerKey
        public var asker: IPAddress
        /// A name resolution (a query for its name, not a node-status listing).
        public var resolves: Bool
    }

    /// The host sleeps: its names are answered from now.
    public mutating func speak(for registration: OwnerRegistration) {
        guard let identity = registration.windows, !identity.isEmpty else { return }
        self.silence(registration.key)
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
        guard let held = self.held.removeValue(forKey: key) else { return }
        for name in held.identity.uniqueNames where self.byName[name] == key { self.byName[name] = nil }
        if let llmnr = held.identity.llmnrName, self.byLLMNR[llmnr] == key { self.byLLMNR[llmnr] = nil }
    }

    /// A UDP datagram to port 137 or 5355 seen on `context` (the caller checked the port). Malformed input is
    /// counted and dropped.
    public mutating func receive(
        _ datagram: UDPDatagram, source: IPAddress, destination: IPAddress, sourceMAC: MACAddress,
        context: InterfaceContext
    ) -> Answer? {
        let bytes = Array(datagram.payload.readableBytesView)
        switch datagram.destinationPort {
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

/// What the Windows side answered, for the metrics.
public struct WindowsStatistics: Hashable, Sendable {
    public var nameQueries = 0
    public var nodeStatus = 0
    public var llmnrAnswers = 0
    public var malformed = 0
}
