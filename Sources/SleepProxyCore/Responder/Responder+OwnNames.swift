import SleepProxyWire

/// The proxy's own advertisement: probing, announcing and the simultaneous-probe tie-break (RFC 6762 §8).
extension Responder {
    // MARK: - Probing the proxy's own names (RFC 6762 §8)

    /// RFC 6762 §8.2: two hosts probing for one name at once compare their proposed records; the
    /// lexicographically later set wins, the loser waits a second and probes again. Our own probe, looped
    /// back, is identical and ignored.
    mutating func checkSimultaneousProbe(_ message: DNSMessage, context: InterfaceContext, now: Timestamp)
        -> [ResponderAction]
    {
        guard !message.authorities.isEmpty, var advertisement = self.own[context.index], advertisement.isProbing else {
            return []
        }
        let ourNames = Set(advertisement.records.filter(\.cacheFlush).map(\.name))
        for name in ourNames {
            let theirs = message.authorities.filter { $0.name == name }
            guard !theirs.isEmpty else { continue }
            let ours = advertisement.records.filter { $0.cacheFlush && $0.name == name }
            switch Self.compareProbeSets(ours, theirs) {
            case .orderedAscending:
                advertisement.phase = .probing(sent: 0)
                advertisement.next = now + MDNSRules.probeTieBreakDelay
                self.own[context.index] = advertisement
                return []
            case .orderedSame, .orderedDescending:
                continue
            }
        }
        return []
    }

    enum Order { case orderedAscending, orderedSame, orderedDescending }

    /// RFC 6762 §8.2.1: sort each side by class, type, then raw RDATA, and compare pairwise; the side that runs
    /// out first is the earlier.
    static func compareProbeSets(_ ours: [DNSResourceRecord], _ theirs: [DNSResourceRecord]) -> Order {
        func key(_ record: DNSResourceRecord) -> [UInt8] {
            let rrclass = record.rrclass.rawValue & 0x7FFF
            let type = record.type.rawValue
            return [UInt8(rrclass >> 8), UInt8(rrclass & 0xFF), UInt8(type >> 8), UInt8(type & 0xFF)]
                + record.rdata.uncompressedBytes
        }
        let a = ours.map(key).sorted { $0.lexicographicallyPrecedes($1) }
        let b = theirs.map(key).sorted { $0.lexicographicallyPrecedes($1) }
        for (x, y) in zip(a, b) where x != y {
            return x.lexicographicallyPrecedes(y) ? .orderedAscending : .orderedDescending
        }
        if a.count == b.count { return .orderedSame }
        return a.count < b.count ? .orderedAscending : .orderedDescending
    }

    mutating func runOwnAdvertisements(now: Timestamp) -> [ResponderAction] {
        var actions: [ResponderAction] = []
        for (index, var advertisement) in self.own {
            guard let next = advertisement.next, next <= now else { continue }
            let unique = advertisement.records.filter(\.cacheFlush)
            switch advertisement.phase {
            case .probing(let sent) where sent < MDNSRules.probeCount:
                // QU questions of type ANY for each name, the proposed records in the authority section.
                let names = unique.reduce(into: [DNSName]()) { if !$0.contains($1.name) { $0.append($1.name) } }
                let probe = DNSMessage(
                    questions: names.map { DNSQuestion(name: $0, type: .any, unicastResponse: true) },
                    authorities: unique)
                actions += self.transmitEverywhere(context: advertisement.context, message: probe)
                advertisement.phase = .probing(sent: sent + 1)
                advertisement.next = now + MDNSRules.probeInterval
            case .probing, .announcing:
                // The probes went unanswered (or an announcement is due): announce, twice, a second apart.
                let sent: Int
                if case .announcing(let count) = advertisement.phase { sent = count } else { sent = 0 }
                actions += self.transmitEverywhere(
                    context: advertisement.context, answers: advertisement.records, additionals: Self.nsecs(for: unique)
                )
                self.noteMulticast(
                    advertisement.records, interfaceIndex: index, context: advertisement.context, now: now)
                if sent + 1 >= MDNSRules.announcementCount {
                    advertisement.phase = .established
                    advertisement.next = nil
                } else {
                    advertisement.phase = .announcing(sent: sent + 1)
                    advertisement.next = now + MDNSRules.announcementInterval
                }
            case .established:
                advertisement.next = nil
            }
            self.own[index] = advertisement
        }
        return actions
    }
}
