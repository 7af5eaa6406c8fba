import SleepProxyWire

/// Leaving: `sleepproxyctl release-all`, with or without handing the hosts to another proxy first
/// (docs/several-proxies.md).
extension ProxyEngine {
    /// `sleepproxyctl release-all`: every host is woken, then dropped silently; it registers with whichever
    /// proxy remains once it is up.
    public mutating func releaseAll(now: Timestamp) -> [EngineAction] {
        let all = self.registrar.store.owners.keys.sorted()
        var actions: [EngineAction] = []
        for key in all { actions += self.release(key, now: now) }
        actions.append(
            .log(.notice, "admin: released all \(all.count) sleeping hosts (woken and forgotten) for decommissioning"))
        return actions
    }

    private mutating func release(_ key: OwnerKey, now: Timestamp) -> [EngineAction] {
        let actions = self.withTakeover(now: now) { $0.wake(key, trigger: .administrator, now: now) }
        return actions + self.removeHost(key, .released, now: now)
    }

    /// One host to hand to another proxy (`sleepproxyctl release-all --transfer`): the UPDATEs, where to send
    /// them and from which of our addresses.
    public struct HostTransfer: Sendable {
        public var key: OwnerKey
        public var peer: ProxyPeer
        public var interfaceIndex: Int
        public var source: IPAddress
        public var id: UInt16
        public var messages: [[UInt8]]
    }

    /// The hosts another proxy on their link could take, each with the best one (docs/coexistence.md, "Other
    /// sleep proxies"). Hosts with no such proxy are left out: they are woken when the transfers are done.
    public func transferPlan(now: Timestamp) -> [HostTransfer] {
        guard let takeover = self.takeover else { return [] }
        var plan: [HostTransfer] = []
        for registration in self.registrar.store.owners.values.sorted(by: { $0.key < $1.key }) {
            guard let context = self.interfaces.values.first(where: { $0.name == registration.key.interface }),
                let peer = takeover.bestPeer(on: context.name),
                let source = context.prefixes.first(where: { if case .v4 = $0.address { true } else { false } })?
                    .address
            else { continue }
            let id = UInt16(truncatingIfNeeded: 0x5000 &+ plan.count)
            guard let messages = registration.transferMessages(id: id, now: now) else { continue }
            plan.append(
                HostTransfer(
                    key: registration.key, peer: peer, interfaceIndex: context.index, source: source, id: id,
                    messages: messages.map { $0.encoded(options: .appleUpdate) }))
        }
        return plan
    }

    /// The transfers are done: each host another proxy took (`taken`: its label) is dropped silently, as a
    /// hand-back is (no goodbyes: the other proxy answers for it now); every other host is woken and released.
    public mutating func finishTransfers(taken: [OwnerKey: String], now: Timestamp) -> [EngineAction] {
        var transferred = 0
        var woken = 0
        var actions: [EngineAction] = []
        for key in self.registrar.store.owners.keys.sorted() {
            if let peer = taken[key] {
                transferred += 1
                actions += self.removeHost(key, .transferred(to: peer), now: now)
            } else {
                woken += 1
                actions += self.release(key, now: now)
            }
        }
        actions.append(
            .log(
                .notice,
                "admin: release-all --transfer: \(transferred) hosts taken by other proxies, \(woken) woken and released"
            ))
        return actions
    }
}
