import SleepProxyWire

/// Waking: magic packets, their bursts and the end of a wake sequence (docs/protocol.md §4.6).
extension Takeover {
    // MARK: - Waking

    mutating func startWake(_ key: OwnerKey, trigger: WakeTrigger, now: Timestamp) -> [TakeoverAction] {
        guard var host = self.hosts[key] else { return [] }
        guard host.wake == nil else { return [] }
        if let ended = host.lastWakeEnded, now - ended < TakeoverRules.wakeHoldoff {
            self.statistics.wakesSuppressed += 1
            return []
        }
        self.statistics.wakes += 1
        host.wake = WakeProgress(trigger: trigger, startedAt: now, next: now)
        var actions: [TakeoverAction] = [
            .event(WakeEvent(kind: .wake, at: now, host: key, hostName: host.hostName, trigger: trigger))
        ]
        actions += self.sendBurst(&host, now: now)
        // Issue 5 §3 / docs/protocol.md §4.6: one NA with the owner's MAC, so IPv6 neighbours send to the host itself
        // as soon as it is up. The Ethernet source stays the proxy's: a forged owner source would teach the
        // switch to send the host's unicast (our magic packets included) to the proxy's port.
        if let index = self.index(of: key.interface), let context = self.interfaces[index], host.registered {
            for address in host.v6 {
                actions.append(Self.unsolicitedAdvertisement(of: address, at: host.wakeMAC, from: context))
            }
        }
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

    /// Ends a wake sequence: logged with its outcome; on success the captured connection requests go to the host.
    mutating func finishWake(_ host: inout Host, awake: Bool, now: Timestamp) -> [TakeoverAction] {
        guard let wake = host.wake else { return [] }
        host.wake = nil
        var actions: [TakeoverAction] = []
        if awake {
            let seconds = Double((now - wake.startedAt).nanosecondsClamped) / 1e9
            actions.append(
                .event(
                    WakeEvent(
                        kind: .awake, at: now, host: host.key, hostName: host.hostName, trigger: wake.trigger,
                        seconds: seconds)))
            if let index = self.index(of: host.key.interface), let context = self.interfaces[index] {
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
                        kind: .noResponse, at: now, host: host.key, hostName: host.hostName, trigger: wake.trigger,
                        attempts: wake.attempts)))
        }
        host.replay.removeAll()
        return actions
    }
}
