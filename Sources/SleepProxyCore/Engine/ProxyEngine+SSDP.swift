import SleepProxyWire

/// SSDP for held hosts (docs/ssdp.md): their own SSDP is a sign of life, what they serve is learned, and the TCP
/// ports of their description URLs wake them.
extension ProxyEngine {
    /// One SSDP datagram received on a served interface (docs/ssdp.md).
    public mutating func receiveSSDP(
        _ bytes: [UInt8], from source: IPAddress, port: UInt16, destination: IPAddress?, interfaceIndex: Int,
        now: Timestamp
    ) -> [EngineAction] {
        guard let context = self.interfaces[interfaceIndex], self.ssdp != nil else { return [] }
        var actions: [EngineAction] = []
        // Beyond Apple: a host's own SSDP (an announcement when its media server starts on resume, a search by its
        // control point) is a sign that it is up, as its mDNS is (docs/coexistence.md).
        if let key = self.registrar.store.owner(claiming: source, on: context.name) {
            actions += self.ownerSpoke(key, AwakeSignal(what: "SSDP from \(source)", at: now), .ssdp, now: now)
        } else if let key = self.takeover?.host(owning: source, interface: context.name) {
            actions += self.withTakeover(now: now) { $0.ownerActive(key, now: now) }
        }
        // After a hand-back the host is no longer held: what it says is kept for its next registration.
        let owner = self.registrar.store.owner(claiming: source, on: context.name)
        let sent =
            self.ssdp?.receive(
                bytes, from: source, port: port, destination: destination, interfaceIndex: interfaceIndex,
                owner: owner, now: now) ?? []
        actions += sent.map(EngineAction.ssdp)
        if let owner { self.syncWakePorts(owner) }
        return actions
    }

    /// What SSDP knew of restored hosts before a restart (`SSDPProxy.learnedByHost`); hosts not held are skipped.
    /// Nothing is sent: restored hosts start silent, like those restored from the journal.
    public mutating func restoreSSDP(_ learned: [OwnerKey: [SSDPEntry]], from file: String) -> [EngineAction] {
        guard self.ssdp != nil else { return [] }
        var restored = 0
        for (key, entries) in learned where self.registrar.store[key] != nil {
            self.ssdp?.restore(entries, for: key)
            self.syncWakePorts(key)
            restored += 1
        }
        let skipped = learned.count - restored
        return [
            .log(
                .info,
                "state: restored what \(restored) hosts advertise over SSDP from \(file)"
                    + (skipped > 0 ? " (\(skipped) no longer held)" : ""))
        ]
    }

    /// SSDP learns the host's addresses (and what was heard from them before), and with `search` asks it.
    mutating func ssdpRegistered(_ registration: OwnerRegistration, search: Bool, now: Timestamp)
        -> [EngineAction]
    {
        guard self.ssdp != nil else { return [] }
        let searches =
            self.ssdp?.registered(registration.key, addresses: registration.addresses, search: search, now: now) ?? []
        self.syncWakePorts(registration.key)
        return searches.map(EngineAction.ssdp)
    }

    /// The TCP ports of a host's UPnP description URLs wake it, as its registered services do (docs/ssdp.md).
    mutating func syncWakePorts(_ key: OwnerKey) {
        guard let ssdp = self.ssdp else { return }
        self.takeover?.setOtherWakePorts(Set(ssdp.wakePorts(of: key).map { WakePolicy.Port(.tcp, $0) }), for: key)
    }
}
