import SleepProxyWire

/// Waking: magic packets, their bursts and the end of a wake sequence (docs/protocol.md §4.6).
extension Takeover {
    // MARK: - Waking

    mutating func startWake(_ key: OwnerKey, trigger: WakeTrigger, rule: WakeRule? = nil, now: Timestamp)
        -> [TakeoverAction]
    {
        guard var host = self.hosts[key] else { return [] }
        guard host.wake == nil else { return [] }
        // The hold-off after an unanswered wake keeps conflicts and repeated admin requests from filling the link
        // with magic packets; a connection the gate let through wakes again at once (docs/waking.md §6: after a
        // wake that failed, the next real connection must not find the host unreachable or unwakeable).
        if rule == nil, let ended = host.lastWakeEnded, now - ended < TakeoverRules.wakeHoldoff {
            self.statistics.wakesSuppressed += 1
            return []
        }
        self.statistics.wakes += 1
        host.wake = WakeProgress(trigger: trigger, rule: rule, startedAt: now, next: now)
        var actions: [TakeoverAction] = [
            .event(
                WakeEvent(
                    kind: .wake, at: now, host: key, hostName: host.hostName?.description, trigger: trigger, rule: rule)
            )
        ]
        actions += self.sendBurst(&host, now: now)
        // Apple sends an NA with the owner's MAC here (docs/protocol.md §4.6). We do not: a host that does not
        // wake would then be unreachable over IPv6 for every neighbour that believed it, and a client's connect()
        // would fail instead of waiting. The neighbours are pointed at the host once it shows it is up
        // (`finishWake`), and until then the proxy answers and captures for it (docs/waking.md §6).
        self.hosts[key] = host
        return actions
    }

    /// The magic packet, unicast to the wake MAC first (Wi-Fi stations that missed a group-key rotation), then
    /// broadcast (switches that do not flood unknown unicast); docs/protocol.md §4.6.
    mutating func sendBurst(_ host: inout Host, now: Timestamp) -> [TakeoverAction] {
        guard var wake = host.wake else { return [] }
        wake.attempts += 1
        wake.next = now + TakeoverRules.wakeInterval
        host.wake = wake
        guard let index = self.index(of: host.key.interface), let context = self.interfaces[index] else { return [] }
        var password = host.password
        if password == nil, self.configuration.appendZeroPassword {
            password = SecureOnPassword(bytes: [0, 0, 0, 0, 0, 0])
        }
        let magic = MagicPacket(target: host.wakeMAC, password: password)
        self.statistics.magicPackets += 1
        var actions: [TakeoverAction] = [
            .sendFrame(magic.frame(destination: host.wakeMAC, source: context.macAddress).bytes, interfaceIndex: index),
            .sendFrame(magic.frame(destination: .broadcast, source: context.macAddress).bytes, interfaceIndex: index),
        ]
        if self.configuration.udpMagicPacket { actions.append(.sendWakeDatagram(magic.payload, interfaceIndex: index)) }
        return actions
    }

    /// Ends a wake sequence: logged with its outcome; on success the neighbours are told that the addresses the
    /// proxy answered for (`handingBack`; by default those it answers for now) are at the host's MAC again, then
    /// the captured connection requests go to the host.
    mutating func finishWake(_ host: inout Host, awake: Bool, handingBack: [IPAddress]? = nil, now: Timestamp)
        -> [TakeoverAction]
    {
        guard let wake = host.wake else { return [] }
        host.wake = nil
        var actions: [TakeoverAction] = []
        if awake {
            let seconds = Double((now - wake.startedAt).nanosecondsClamped) / 1e9
            actions.append(
                .event(
                    WakeEvent(
                        kind: .awake, at: now, host: host.key, hostName: host.hostName?.description,
                        trigger: wake.trigger,
                        seconds: seconds)))
            if let index = self.index(of: host.key.interface), let context = self.interfaces[index] {
                // First the neighbours' caches, so that the client's answer to the host's SYN-ACK goes to the host
                // and not to the proxy.
                actions += self.pointNeighboursBack(
                    host, addresses: handingBack ?? host.addresses.filter(host.isAnswering))
                for (at, _, frame) in host.replay where now - at <= TakeoverRules.replayWindow {
                    guard frame.count >= EthernetFrame.headerLength else { continue }
                    // Addressed to the host itself now, from the proxy's MAC.
                    let replayed = EthernetFrame.withTransportChecksumsRecomputed(
                        host.wakeMAC.bytes + context.macAddress.bytes + frame[12...])
                    actions.append(.sendFrame(replayed, interfaceIndex: index))
                }
            }
        } else {
            host.lastWakeEnded = now
            actions.append(
                .event(
                    WakeEvent(
                        kind: .noResponse, at: now, host: host.key, hostName: host.hostName?.description,
                        trigger: wake.trigger,
                        attempts: wake.attempts)))
        }
        host.replay.removeAll()
        return actions
    }

    /// A gratuitous ARP and an unsolicited NA (Override set, RFC 4861 §7.2.6) for each of `addresses`, saying it
    /// is at the host's own MAC again. The Ethernet source stays the proxy's: a forged owner source would teach
    /// the switch to send the host's unicast to the proxy's port.
    func pointNeighboursBack(_ host: Host, addresses: [IPAddress]) -> [TakeoverAction] {
        guard !addresses.isEmpty, let index = self.index(of: host.key.interface), let context = self.interfaces[index]
        else { return [] }
        return addresses.map { address in
            switch address {
            case .v4(let v4):
                .sendFrame(
                    ARPPacket.announcement(from: host.wakeMAC, for: v4).frame(
                        destination: .broadcast, source: context.macAddress
                    ).bytes, interfaceIndex: index)
            case .v6(let v6):
                Self.unsolicitedAdvertisement(of: v6, at: host.wakeMAC, from: context)
            }
        }
    }
}
