import NIOCore
import SleepProxyWire

/// Adoption (docs/adoption.md): hosts a person named by MAC, which cannot register, kept present while they sleep.
/// The engine ties `Adoption` (what their frames taught, and whether they went quiet) to the path every held host
/// takes: a quiet adopted host enters as a registration does, held by the same presence, responder, takeover and
/// SSDP, and leaves by the one way out.
extension ProxyEngine {
    /// Why an adopted set was refused.
    public enum AdoptionError: Error, Hashable, Sendable, CustomStringConvertible {
        case tooMany(Int)

        public var description: String {
            switch self {
            case .tooMany(let count):
                return "\(count) hosts adopted; at most \(AdoptionRules.maximumAdopted) can be"
            }
        }
    }

    /// The adopted hosts become `macs` (the configuration's and `sleepproxyctl adopt`'s together). A host no longer
    /// adopted that the proxy holds is let go with goodbyes (a person no longer wants it present); a newly
    /// adopted one is asked what it publishes, on every served interface, since nobody knows yet where it is.
    /// Nothing changes when the set is refused.
    public mutating func setAdopted(_ macs: Set<MACAddress>, now: Timestamp) throws(AdoptionError) -> [EngineAction] {
        guard macs.count <= AdoptionRules.maximumAdopted else { throw .tooMany(macs.count) }
        let new = macs.subtracting(self.adoption.macs)
        _ = self.adoption.setAdopted(macs)
        var actions: [EngineAction] = []
        // Only the adopted hosts are sorted (by key, for a fixed order of goodbyes): the start sends this event
        // once, and sorting every registration held made a restart of 10,000 registered hosts wait 25 ms for its
        // first answer (docs/scale.md).
        let adopted = self.registrar.store.owners.compactMap { $0.value.isAdopted ? $0.key : nil }.sorted()
        for key in adopted {
            guard let registration = self.registrar.store.owners[key] else { continue }
            if macs.contains(key.primaryMAC) {
                if new.contains(key.primaryMAC) { self.adoption.restoreHeld(registration) }
            } else {
                actions += self.removeHost(key, .forgotten(goodbyes: true), now: now)
            }
        }
        if !new.isEmpty {
            for context in self.servedInterfaces { actions += self.askAdoptedServices(on: context, now: now) }
        }
        // The capture filter passes the adopted MACs' frames.
        actions += self.servedInterfaces.map { .packet(.watchChanged(interfaceIndex: $0.index)) }
        return actions
    }

    /// What each adopted host taught, as the registration that would hold it, for the I/O layer to keep across a
    /// restart, an upgrade or a crash (docs/adoption.md §3); hosts not heard from yet have nothing to keep.
    public func adoptedLearned(now: Timestamp) -> [OwnerRegistration] {
        self.adoption.hosts.keys.sorted { $0.rawValue < $1.rawValue }.compactMap { mac in
            guard let host = self.adoption.hosts[mac], !host.records.isEmpty || !host.addresses.isEmpty else {
                return nil
            }
            return self.adoption.registration(of: mac, sequence: 0, now: now)
        }
    }

    /// What the adopted hosts taught before the proxy stopped (`adoptedLearned`): given after the adopted set,
    /// for hosts the journal does not hold asleep, which are then checked at once.
    public mutating func restoreLearned(_ saved: [OwnerRegistration], now: Timestamp) {
        for registration in saved where self.registrar.store[registration.key] == nil {
            self.adoption.restoreLearned(registration, now: now)
        }
    }

    /// The changes to what adopted hosts taught, counted: saved again when it moves.
    public var adoptionRevision: UInt64 { self.adoption.revision }

    /// The service types on a link (RFC 6763 §9), asked so that adopted hosts say what they publish without
    /// waiting for someone to browse; only their own answers are learned.
    mutating func askAdoptedServices(on context: InterfaceContext, now: Timestamp) -> [EngineAction] {
        guard !self.adoption.isEmpty else { return [] }
        return self.adoptionQuestion(
            DNSQuestion(name: Adoption.servicesName, type: .ptr, unicastResponse: true), on: context, now: now)
    }

    /// A frame from an adopted host's MAC: what it teaches, and whether it shows a held host awake.
    mutating func adoptionFrame(_ bytes: [UInt8], context: InterfaceContext, now: Timestamp) -> [EngineAction] {
        guard let frame = try? EthernetFrame(decoding: ByteBuffer(bytes: bytes)),
            let heard = self.adoption.heard(frame, on: context.name, now: now)
        else { return [] }
        var actions: [EngineAction] = []
        let key = OwnerKey(interface: context.name, primaryMAC: heard.mac)
        if heard.signOfLife, self.registrar.store[key]?.isAdopted == true {
            actions += self.ownerSpoke(
                key, AwakeSignal(what: "its own traffic (\(frame.etherType))", at: now), .ownTraffic, now: now)
        }
        actions += self.windowsQuestions(heard, context: context, now: now)
        for type in heard.newTypes {
            actions += self.adoptionQuestion(
                DNSQuestion(name: type, type: .ptr, unicastResponse: true), on: context, now: now)
        }
        return actions
    }

    /// The adopted hosts' checks that came due: a question for a quiet host's name, or, none answered, the host
    /// held as asleep.
    mutating func runAdoption(now: Timestamp) -> [EngineAction] {
        guard !self.adoption.isEmpty else { return [] }
        let store = self.registrar.store
        var actions: [EngineAction] = []
        for step in self.adoption.due(now: now, isHeld: { store[$0] != nil }) {
            switch step {
            case .askName(let mac, let name, let interface, let everyFamily):
                guard let context = self.servedInterfaces.first(where: { $0.name == interface }) else { continue }
                // Unicast replies (RFC 6762 §5.4): only the proxy needs the answer, nobody else's cache. One family
                // first (its IPv4, where it has one): a question and its answer are all a check costs the link.
                var families = Responder.families(of: context)
                if !everyFamily, families.count > 1 {
                    let hasV4 = self.adoption.hosts[mac]?.addresses.contains {
                        if case .v4 = $0 { true } else { false }
                    }
                    families = [hasV4 == true ? .v4 : .v6]
                }
                actions += self.adoptionQuestion(
                    DNSQuestion(name: name, type: .a, unicastResponse: true), on: context, families: families,
                    now: now, also: DNSQuestion(name: name, type: .aaaa, unicastResponse: true))
            case .probeAddress(let mac, let address, let interface):
                guard let context = self.servedInterfaces.first(where: { $0.name == interface }) else { continue }
                // RFC 5227 §2.1.1's probe (sender 0.0.0.0), unicast to the host's MAC: nobody else's cache changes.
                let probe = ARPPacket.probe(from: context.macAddress, for: address)
                actions.append(
                    .packet(
                        .sendFrame(
                            probe.frame(destination: mac, source: context.macAddress).bytes,
                            interfaceIndex: context.index)))
            case .askNetBIOS(let mac, let address, let interface):
                guard let context = self.servedInterfaces.first(where: { $0.name == interface }) else { continue }
                actions += self.windowsCheck(mac, address: address, context: context)
            case .fellQuiet(let mac):
                actions += self.holdAdopted(mac, now: now)
            }
        }
        return actions
    }

    /// An adopted host answered none of the questions: it enters as a sleeping host, spoken for at once (its
    /// responder is silent), its addresses probed from now and claimed where nobody answers.
    private mutating func holdAdopted(_ mac: MACAddress, now: Timestamp) -> [EngineAction] {
        self.adoptionSequence &+= 1
        guard let registration = self.adoption.registration(of: mac, sequence: self.adoptionSequence, now: now)
        else { return [] }
        let key = registration.key
        // The same limits as for a host that registers (`max-hosts`, `max-records`): a full proxy holds no more.
        let store = self.registrar.store
        let limits = self.registrar.configuration
        if store[key] == nil,
            store.hostCount >= limits.maximumHosts
                || store.recordCount + registration.records.count > limits.maximumRecords
        {
            self.adoption.holdRefused(mac, now: now)
            let note = HostPresence.Note.adoptionRefused(
                maximumHosts: limits.maximumHosts, maximumRecords: limits.maximumRecords)
            return [Self.line(for: note, registration)]
        }
        self.registrar.restore(registration)
        var actions: [EngineAction] = [.journal(.put(registration))]
        // SSDP knows the host before the transition tells it to speak (found by the engine programs).
        actions += self.ssdpRegistered(registration, search: false, now: now)
        let (presence, transition) = HostPresence.adoptQuiet(previous: self.presence[key])
        self.presence[key] = presence
        actions += self.carryOut(transition, for: registration, now: now)
        actions += self.withTakeover(now: now) { $0.registered(registration, restart: true, now: now) }
        self.takeover?.probeAtOnce(key, now: now)
        // Its UPnP description ports wake it, now that the takeover knows it.
        self.syncWakePorts(key)
        return actions
    }

    /// A question on one interface's mDNS groups; its copies looped back are known as ours.
    private mutating func adoptionQuestion(
        _ question: DNSQuestion, on context: InterfaceContext, families: [IPFamily]? = nil, now: Timestamp,
        also: DNSQuestion? = nil
    ) -> [EngineAction] {
        let query = DNSMessage(questions: [question] + (also.map { [$0] } ?? []))
        let bytes = query.encoded(options: .mdns)
        var actions: [EngineAction] = []
        for family in families ?? Responder.families(of: context) {
            self.echoes.remember(bytes, now: now)
            actions.append(
                .transmit(
                    MDNSTransmission(
                        destination: .multicast(interfaceIndex: context.index, family: family), message: query,
                        bytes: bytes)))
        }
        return actions
    }
}
