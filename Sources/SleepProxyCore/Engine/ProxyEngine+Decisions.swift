import SleepProxyWire

/// What the composed machines asked for, carried out or turned into engine actions: the responder's hand-backs
/// and answers, the takeover's claims, owner sightings, peers and wake events (docs/architecture.md).
extension ProxyEngine {

    mutating func run(_ actions: [ResponderAction], now: Timestamp) -> [EngineAction] {
        var result: [EngineAction] = []
        for action in actions {
            switch action {
            case .transmit(let transmission):
                if case .multicast = transmission.destination { self.echoes.remember(transmission.bytes, now: now) }
                result.append(.transmit(transmission))
            case .ownerProbing(let key):
                result += self.ownerSpoke(
                    key, AwakeSignal(what: "it probed its own names over mDNS", at: now), .ownNameProbe, now: now)
            case .conflict(let key, let record, let source):
                guard let registration = self.registrar.store[key] else { continue }
                let what = "\(record.name) \(record.type)"
                result.append(Self.line(for: .mdnsConflict(source: source, record: what), registration))
                result += self.withTakeover(now: now) {
                    $0.wake(key, trigger: .mdnsConflict(name: record.name, from: source), now: now)
                }
            case .resolved(let key, let source):
                self.takeover?.noteResolve(by: source, of: key, now: now)
            case .proxyAdvertised(let label, let port, let ttl, let source, let interfaceIndex):
                result += self.withTakeover(now: now) {
                    $0.peerAdvertised(
                        label: label, port: port, ttl: ttl, from: source, interfaceIndex: interfaceIndex, now: now)
                }
            case .renamed(let instance, let host):
                result.append(
                    .log(.notice, "mdns: name conflict; now advertising \"\(instance)\" on host name \(host).local"))
            }
        }
        return result
    }

    /// What the takeover does, if the proxy runs with one (not with `--no-takeover`), carried out through the
    /// engine's decisions: the one place the optional machine is unwrapped.
    mutating func withTakeover(now: Timestamp, _ body: (inout Takeover) -> [TakeoverAction]) -> [EngineAction] {
        guard self.takeover != nil else { return [] }
        return self.run(body(&self.takeover!), now: now)
    }

    /// The same for the responder (absent when the daemon runs registration only).
    mutating func withResponder(now: Timestamp, _ body: (inout Responder) -> [ResponderAction]) -> [EngineAction] {
        guard self.responder != nil else { return [] }
        return self.run(body(&self.responder!), now: now)
    }

    mutating func run(_ actions: [TakeoverAction], now: Timestamp) -> [EngineAction] {
        var result: [EngineAction] = []
        for action in actions {
            switch action {
            case .sendFrame(let frame, let index): result.append(.packet(.sendFrame(frame, interfaceIndex: index)))
            case .sendWakeDatagram(let payload, let index):
                result.append(.packet(.sendWakeDatagram(payload, interfaceIndex: index)))
            case .setNeighbour(let index, let address, let mac):
                result.append(.packet(.setNeighbour(interfaceIndex: index, address: address, mac: mac)))
            case .removeNeighbour(let index, let address):
                result.append(.packet(.removeNeighbour(interfaceIndex: index, address: address)))
            case .watchChanged(let index): result.append(.packet(.watchChanged(interfaceIndex: index)))
            case .unicastQuery(let query):
                result += self.answer(query, now: now)
            case .addressRequested(let key, let address, let client):
                // Only for an adopted host held asleep whose NIC answers for it: a registered host's address the
                // proxy does not answer is one the host itself is up on.
                guard let presence = self.presence[key], presence.adopted, presence.state == .asleep else { continue }
                result += self.withTakeover(now: now) {
                    $0.wake(key, trigger: .addressRequest(client: client, address: address), now: now)
                }
            case .peerClaim(let key, let peer, let kept):
                guard let registration = self.registrar.store[key], self.presence[key] != nil else { continue }
                if kept {
                    result.append(Self.line(for: .keptFromPeer("\(peer)"), registration))
                    continue
                }
                result += self.transition(registration, now: now) { $0.peerClaimed("\(peer)") }
            case .tookOver(let key, let why):
                guard let registration = self.registrar.store[key] else { continue }
                result.append(Self.line(for: .tookOverFromStandby(why), registration))
            case .event(let event):
                result.append(.wakeEvent(event))
                // Declines are information (collapsed by the gate: one line per scanner and per declined source);
                // wakes and their outcomes are what a user looks for.
                let quiet = event.kind == .ignored || event.kind == .declined
                result.append(.log(quiet ? .info : .notice, "wake: \(event.summary)"))
                if event.kind == .noResponse, self.registrar.store[event.host]?.isAdopted == true,
                    self.adoption.wakeFailed(event.host.primaryMAC)
                {
                    result += self.removeHost(event.host, .unreachable, now: now)
                }
            case .claimed(let key, let address):
                guard let registration = self.registrar.store[key] else { continue }
                result.append(Self.line(for: .claimed(address), registration))
                result += self.transition(registration, now: now) {
                    $0.fellQuiet(.noProbeAnswer, detail: "\(address)")
                }
            case .ownerSeen(let key, let address, let signal, let wasAnswering):
                guard let registration = self.registrar.store[key] else { continue }
                // Answering on another address keeps the host asleep (per-address takeover, docs/protocol.md §5.2);
                // answering on none means the host is up everywhere: silent until it is quiet again.
                let answeringAny = self.takeover?.isAnsweringAny(key) ?? true
                let seen = AwakeSignal(what: "\(signal) for \(address)", at: now)
                result += self.transition(registration, now: now) {
                    $0.ownerSeen(seen, wasAnswering: wasAnswering, answeringAny: answeringAny)
                }
            }
        }
        return result
    }

    /// An mDNS question sent to a sleeping host's own address: the responder answers it as one sent to the
    /// proxy's (RFC 6762 §5.5 and §6.7: by unicast), and the answer leaves as a frame from the host's address
    /// and port 5353, which is where the querier expects it (dig and pyatv drop answers from other addresses).
    /// It carries that host's records alone: a scanner that asks each address for `_services._dns-sd._udp`
    /// (pyatv, Home Assistant) must not find the proxy's sleep proxy service, or other hosts' services, at it.
    private mutating func answer(_ query: UnicastQuery, now: Timestamp) -> [EngineAction] {
        guard self.responder != nil, let context = self.interfaces[query.interfaceIndex] else { return [] }
        let store = self.registrar.store
        var others: [ResponderAction] = []
        var result: [EngineAction] = []
        let answered =
            self.responder?.receive(
                query.payload, from: query.source, port: query.sourcePort, destination: query.destination,
                interfaceIndex: query.interfaceIndex, scope: AnswerScope(only: query.host), store: store, now: now)
            ?? []
        for action in answered {
            guard case .transmit(let transmission) = action,
                case .unicast(let address, let port, _) = transmission.destination, address == query.source,
                port == query.sourcePort,
                let frame = Takeover.datagramFrame(
                    from: query.destination, port: MDNSRules.port, to: query.source, port: query.sourcePort,
                    mac: query.sourceMAC, payload: transmission.bytes, context: context)
            else {
                others.append(action)
                continue
            }
            result.append(.packet(.sendFrame(frame, interfaceIndex: context.index)))
        }
        return result + self.run(others, now: now)
    }
}
