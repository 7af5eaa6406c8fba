import SleepProxyWire

/// mDNS: one packet, decoded once, and one decider. The engine reads what the packet shows of the hosts it holds
/// (their own responder speaking, their Owner option) and decides hand-backs; only then does the responder answer
/// or learn from it, with the hosts handed back left out.
extension ProxyEngine {
    /// One mDNS packet received on a served interface.
    public mutating func receiveMDNS(
        _ bytes: [UInt8], from source: IPAddress, port: UInt16, destination: IPAddress?, interfaceIndex: Int,
        now: Timestamp
    ) -> [EngineAction] {
        guard let context = self.interfaces[interfaceIndex] else { return [] }
        // Our own multicast, looped back: nothing in it can be news (`MulticastEchoes`).
        if port == MDNSRules.port, context.isOwnAddress(source), self.echoes.isEcho(bytes, now: now) { return [] }
        // A held host's own question is never a repeat: the copy before it may have come while the host was still
        // up, and this one is then the sign that it woke.
        let heldOwner = self.registrar.store.owner(claiming: source, on: context.name)
        if port == MDNSRules.port, heldOwner == nil,
            self.repeatedQuestions.isRepeat(
                bytes, from: .init(address: source, port: port, interfaceIndex: interfaceIndex), now: now)
        {
            return []
        }
        let packet = self.responder?.decode(
            bytes, from: source, port: port, destination: destination, interfaceIndex: interfaceIndex)
        var actions: [EngineAction] = []
        // The host's own responder speaking, from one of its addresses: it is up (docs/coexistence.md). Decided
        // before the responder sees the packet, so that a host handed back here is not answered or defended by it.
        if let key = heldOwner {
            // Counted by what it carried: its Owner option (docs/protocol.md §5.1) or its plain mDNS. Without the
            // responder (registration only) the packet is decoded here, from a held host's own address only.
            let message = packet?.message ?? (try? DNSMessage(decoding: bytes))
            let owner = message?.ednsOptions?.owner
            let kind: HandBackSignal = owner?.primaryMAC == key.primaryMAC ? .ownerOption : .mdns
            let what =
                kind == .ownerOption
                ? "Owner option with sequence \(owner!.sequence), mDNS from \(source)" : "mDNS from \(source)"
            actions += self.ownerSpoke(key, AwakeSignal(what: what, at: now), kind, now: now)
        } else if let key = self.takeover?.host(owning: source, interface: context.name) {
            // Only a wake sequence is left of it (its lease ended): the wake ends as a success.
            actions += self.withTakeover(now: now) { $0.ownerActive(key, now: now) }
        }
        guard let packet else { return actions }
        // What a machine's own responder publishes, for the list of neighbours.
        if packet.message.flags.isResponse, port == MDNSRules.port, !context.isOwnAddress(source) {
            self.takeover?.neighbours.published(packet.message, from: source, on: context.name, now: now)
        }
        var handedBack: Set<OwnerKey> = []
        if let key = self.ownerOptionHandsBack(packet, now: now) {
            handedBack.insert(key)
            let sequence = packet.message.ednsOptions?.owner?.sequence ?? 0
            actions += self.removeHost(
                key, .handBack(why: "Owner option with sequence \(sequence)", signal: .ownerOption), now: now)
        }
        actions += self.resumeAsked(packet.message, on: context.name, now: now)
        let store = self.registrar.store
        return actions
            + self.withResponder(now: now) {
                $0.receive(packet, scope: AnswerScope(excluding: handedBack), store: store, now: now)
            }
    }

    /// Apple's rule (docs/protocol.md §5.1): mDNS from any address carrying a held host's Owner option shows the
    /// host awake, unless it carries the sequence the host registered with and came within 60 s of that
    /// registration (`MDNSRules.handBackGrace`: the host's own traffic while it falls asleep). The host handed
    /// back, or nil.
    func ownerOptionHandsBack(_ packet: ReceivedMDNS, now: Timestamp) -> OwnerKey? {
        guard let owner = packet.message.ednsOptions?.owner, owner.version == 0 else { return nil }
        let key = OwnerKey(interface: packet.context.name, primaryMAC: owner.primaryMAC)
        guard let registration = self.registrar.store[key] else { return nil }
        let sameSequence = registration.owner.sequence == owner.sequence
        guard !sameSequence || now - registration.registeredAt > MDNSRules.handBackGrace else { return nil }
        return key
    }

    /// A sign that the host is up. Before the proxy ever spoke for it, the takeover waits (the host is still
    /// going to sleep); once the proxy spoke for it, the host woke: it gets everything back silently, as for an
    /// Owner option with a new sequence. Beyond Apple, which ignores same-sequence traffic for 60 s and knows no
    /// other sign (docs/protocol.md §5.1): a host that never sends an Owner option would otherwise be renamed by
    /// the proxy's defence of its own names.
    mutating func ownerSpoke(_ key: OwnerKey, _ signal: AwakeSignal, _ kind: HandBackSignal, now: Timestamp)
        -> [EngineAction]
    {
        guard let registration = self.registrar.store[key], self.presence[key] != nil else { return [] }
        let transition = self.presence[key]!.signOfLife(signal, kind, now: now)
        var actions = self.carryOut(transition, for: registration, now: now)
        // Handed back (spoken for, or adopted and restored from the journal): the host is no longer held, its
        // sighting ended any wake under way, and nothing is left to tell the takeover.
        guard transition.to != .handedBack else { return actions }
        actions += self.withTakeover(now: now) { $0.ownerActive(key, now: now) }
        return actions
    }
}
