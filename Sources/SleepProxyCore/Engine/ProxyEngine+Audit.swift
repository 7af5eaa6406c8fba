import NIOCore
import SleepProxyWire

extension ProxyEngine {
    /// What must hold between any two calls into the engine (docs/fuzzing.md), checked against `actions`, the
    /// actions of the call just made; nil when all of it holds, otherwise a sentence saying what broke.
    ///
    /// Not called by the daemon: the fuzz target, the random programs in the tests and the month-long run
    /// (docs/long-running.md) call it after every step. It lives here, beside the state it reads, so that all three
    /// check the same rules and a change to the engine cannot leave them behind.
    public func auditViolation(after actions: [EngineAction]) -> String? {
        let store = self.registrar.store
        let limits = self.registrar.configuration
        // Bounded by the configured limits.
        if store.hostCount > limits.maximumHosts {
            return "\(store.hostCount) hosts held, limit \(limits.maximumHosts)"
        }
        if store.recordCount > limits.maximumRecords {
            return "\(store.recordCount) records held, limit \(limits.maximumRecords)"
        }
        // Every held host in exactly one state.
        for key in store.owners.keys where self.state(of: key) == nil {
            return "\(key) is held but in no state"
        }
        let counted = self.hostsByState.values.reduce(0, +)
        if counted != store.hostCount { return "\(counted) hosts in the state counts, \(store.hostCount) held" }
        let listed = HostState.held.reduce(0) { $0 + self.hosts(in: $1).count }
        if listed != store.hostCount { return "\(listed) hosts listed by state, \(store.hostCount) held" }
        // One truth about speaking: the responder's, SSDP's and the Windows names' marks agree with each host's
        // lifecycle (a PC's names are marked when it showed any, docs/windows.md), and they keep none for a host no
        // longer held.
        for (key, registration) in store.owners {
            let speaks = self.isSpokenFor(key)
            if let responder = self.responder, responder.silenced.contains(key) == speaks {
                return "the responder \(speaks ? "is silent for" : "speaks for") \(key), its lifecycle says otherwise"
            }
            if let ssdp = self.ssdp, ssdp.isSpeaking(for: key) != speaks {
                return "SSDP \(speaks ? "is silent for" : "speaks for") \(key), its lifecycle says otherwise"
            }
            let answered = self.windows.held[key] != nil
            if answered != (speaks && registration.windows?.isEmpty == false) {
                return "the Windows names \(answered ? "are answered for" : "are silent for") \(key), "
                    + (speaks ? "whose registration shows \(answered ? "none" : "some")" : "which is awake")
            }
        }
        if let silenced = self.responder?.silenced, let stale = silenced.first(where: { store[$0] == nil }) {
            return "the responder keeps \(stale) silenced after it was let go"
        }
        if let stale = self.windows.held.keys.first(where: { store[$0] == nil }) {
            return "the Windows names are answered for \(stale) after it was let go"
        }
        if let violation = self.windowsAnswerViolation(in: actions) { return violation }
        // Never a host's record answered or announced while the proxy is not speaking for it: its records go out
        // only while it is asleep or being woken (goodbyes for a host just removed are not its records any more).
        let sent = actions.lazy.compactMap { action -> MDNSTransmission? in
            if case .transmit(let transmission) = action { return transmission } else { return nil }
        }
        guard !sent.isEmpty else { return nil }
        let speaking = self.hosts(in: .asleep).union(self.hosts(in: .waking))
        var silentNames: Set<DNSName> = []
        var spokenNames: Set<DNSName> = []
        for (key, registration) in store.owners {
            for proxied in registration.records where proxied.record.cacheFlush {
                if speaking.contains(key) {
                    spokenNames.insert(proxied.record.name)
                } else {
                    silentNames.insert(proxied.record.name)
                }
            }
        }
        // A unique name that a host spoken for holds too may go out for that host.
        silentNames.subtract(spokenNames)
        guard !silentNames.isEmpty else { return nil }
        for transmission in sent {
            for record in transmission.message.answers + transmission.message.additionals
            where record.ttl > 0 && silentNames.contains(record.name) {
                return "\(record.name) \(record.type) sent while its host is not asleep"
            }
        }
        return nil
    }

    /// A datagram from a name-service port and the address of a host the proxy does not speak for (held and awake,
    /// or adopted and not held): an answer that contradicts the host itself (the proxy's own questions go from its
    /// own address).
    func windowsAnswerViolation(in actions: [EngineAction]) -> String? {
        var silent: [IPAddress: OwnerKey]? = nil
        for case .packet(.sendFrame(let bytes, _)) in actions where WindowsFrames.isFromNameService(bytes) {
            guard let frame = try? EthernetFrame(decoding: ByteBuffer(bytes: bytes)),
                let (source, _, _) = WindowsFrames.udp(in: frame)
            else { continue }
            if silent == nil { silent = self.silentAddresses() }
            if let key = silent?[source] { return "a Windows answer from \(source) (\(key)) while it is not asleep" }
        }
        return nil
    }

    /// The addresses of held hosts the proxy does not speak for and of adopted hosts it does not hold (awake, or
    /// handed back), but none another host spoken for or the proxy itself has.
    private func silentAddresses() -> [IPAddress: OwnerKey] {
        var silent: [IPAddress: OwnerKey] = [:]
        var spoken: Set<IPAddress> = Set(self.interfaces.values.flatMap { $0.prefixes.map(\.address) })
        for (mac, host) in self.adoption.hosts {
            guard let interface = host.interface else { continue }
            let key = OwnerKey(interface: interface, primaryMAC: mac)
            if self.registrar.store[key] == nil { for address in host.addresses { silent[address] = key } }
        }
        for (key, registration) in self.registrar.store.owners {
            if self.isSpokenFor(key) {
                spoken.formUnion(registration.addresses)
            } else {
                for address in registration.addresses { silent[address] = key }
            }
        }
        for address in spoken { silent[address] = nil }
        return silent
    }
}
