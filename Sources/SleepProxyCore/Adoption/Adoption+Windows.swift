import NIOCore
import SleepProxyWire

/// What an adopted Windows PC's own name-service frames teach (docs/windows.md §2): the NetBIOS names it registers
/// and lists, and the name it answers over LLMNR. Its answers to others are unicast, so a switch shows the proxy
/// only its broadcasts and its answers to the proxy's own questions (`windowsQuestions`).
extension Adoption {
    /// One UDP datagram the host sent. True when what it showed of its names changed.
    static func learnWindows(udp payload: ByteBuffer, into host: inout AdoptedHost) -> Bool {
        guard let datagram = try? UDPDatagram(decoding: payload) else { return false }
        let bytes = Array(datagram.payload.readableBytesView)
        switch datagram.sourcePort {
        case WindowsRules.netbiosPort:
            guard let message = try? NetBIOSMessage(decoding: bytes) else { return false }
            return Self.learn(netbios: message, into: &host)
        case WindowsRules.llmnrPort:
            // RFC 4795 §2.1.1: a response with answers is the PC's for the name asked (single label).
            guard let message = try? DNSMessage(decoding: bytes), message.flags.isResponse,
                message.questions.count == 1, !message.answers.isEmpty,
                let question = message.questions.first, question.name.labelCount == 1,
                let label = question.name.labelStrings.first
            else { return false }
            let name = label.lowercased()
            guard host.windows.llmnrName != name else { return false }
            host.windows.llmnrName = name
            return true
        case WindowsRules.wsdPort:
            return Self.learn(wsd: bytes, into: &host)
        default:
            // Its Hello goes from any port to 3702.
            guard datagram.destinationPort == WindowsRules.wsdPort else { return false }
            return Self.learn(wsd: bytes, into: &host)
        }
    }

    /// Its Hello, or its match (to anyone, the proxy's Probe and Resolve included), names its endpoint; its Bye
    /// withdraws it (its WS-Discovery service stopped: a shutdown, not a sleep, which sends nothing).
    private static func learn(wsd bytes: [UInt8], into host: inout AdoptedHost) -> Bool {
        guard let message = try? WSDiscoveryMessage(decoding: bytes), let address = message.endpoint,
            address.utf8.count <= WindowsRules.maximumWSDField
        else { return false }
        switch message.kind {
        case .hello, .probeMatches, .resolveMatches:
            let previous = host.windows.wsd?.address == address ? host.windows.wsd : nil
            let xaddrs = message.xaddrs.flatMap { $0.utf8.count <= WindowsRules.maximumWSDField ? $0 : nil }
            let endpoint = WSDEndpoint(
                address: address, types: message.types.isEmpty ? previous?.types ?? [] : message.types,
                xaddrs: xaddrs ?? previous?.xaddrs,
                metadataVersion: String((message.metadataVersion ?? previous?.metadataVersion ?? "1").prefix(32)),
                instanceID: message.instanceID.map { String($0.prefix(32)) } ?? previous?.instanceID,
                messageNumber: message.messageNumber.flatMap { UInt64($0) } ?? previous?.messageNumber ?? 0)
            guard endpoint != host.windows.wsd else { return false }
            host.windows.wsd = endpoint
            return true
        case .bye:
            guard host.windows.wsd?.address == address else { return false }
            host.windows.wsd = nil
            return true
        case .probe, .resolve:
            return false
        }
    }

    private static func learn(netbios message: NetBIOSMessage, into host: inout AdoptedHost) -> Bool {
        if let status = message.nodeStatus {
            host.nodeStatusSeen = true
            return host.windows.learn(table: status.names, statistics: status.statistics)
        }
        switch (message.opcode, message.isResponse) {
        case (.registration?, false), (.multihomedRegistration?, false), (.refresh?, false),
            (.refreshAlternative?, false):
            // RFC 1002 §4.2.2: the name in the question, its NB_FLAGS in the additional record.
            guard let question = message.questions.first, question.type == NetBIOSMessage.typeNB,
                let entry = message.additionals.first?.addressEntries?.first
            else { return false }
            return host.windows.learn(question.name, group: entry.flags & NetBIOSMessage.groupBit != 0)
        case (.release?, false):
            guard let question = message.questions.first else { return false }
            return host.windows.forget(question.name)
        case (.query?, true):
            // A positive answer it gave (to the proxy, or seen on a hub).
            guard message.responseCode == 0, let record = message.answers.first,
                let entry = record.addressEntries?.first
            else { return false }
            return host.windows.learn(record.name, group: entry.flags & NetBIOSMessage.groupBit != 0)
        default:
            return false
        }
    }
}
