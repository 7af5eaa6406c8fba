import SleepProxyWire

/// Answering an M-SEARCH for a sleeping host (UPnP Device Architecture 2.0 §1.3.2, docs/ssdp.md).
extension SSDPProxy {
    mutating func answer(
        _ search: SSDPMessage, from source: IPAddress, port: UInt16, multicast: Bool, context: InterfaceContext,
        now: Timestamp
    ) -> [SSDPTransmission] {
        self.statistics.searches += 1
        guard search.isDiscover, let target = search.searchTarget, !target.isEmpty else {
            self.statistics.malformed += 1
            return []
        }
        var wait = 0
        if multicast {
            guard let mx = search.maximumWait, mx >= SSDPRules.minimumSearchWait else {
                self.statistics.malformed += 1
                return []
            }
            wait = mx
        }
        guard let keys = self.speaking[context.name], !keys.isEmpty else { return [] }
        let (family, scope) = (IPFamily(source), SSDPScope(of: source))
        let destination = SSDPTransmission.Destination.unicast(
            address: source, port: port, interfaceIndex: context.index)
        if wait > 0 {
            _ = self.recentSearches.takeDue(now: now)
            let recent = RecentSearch(destination: destination, target: SSDPMessage.lowercased(target))
            if self.recentSearches[recent] != nil {
                self.statistics.repeatedSearches += 1
                return []
            }
            guard self.recentSearches.count < SSDPRules.maximumPendingResponses else {
                self.statistics.overLimit += 1
                return []
            }
            let until = now + .seconds(Int64(wait))
            self.recentSearches.schedule(until, for: recent, at: until)
        }
        var immediate: [SSDPTransmission] = []
        for key in keys {
            guard let host = self.hosts[key] else { continue }
            for entry in host.learned.entries.values where entry.family == family && entry.scope == scope {
                guard let (searchTarget, usn) = Self.match(target, entry) else { continue }
                let transmission = SSDPTransmission(
                    destination: destination,
                    bytes: Self.response(entry, searchTarget: searchTarget, uniqueServiceName: usn).encoded())
                if wait == 0 {
                    immediate.append(transmission)
                    self.statistics.responsesSent += 1
                    continue
                }
                // A control point repeating its search within the delay gets one response per entry, not one per
                // search: an M-SEARCH flood costs at most the entries times the searchers.
                let pendingKey = PendingKey(
                    destination: destination, uniqueServiceName: usn, searchTarget: searchTarget)
                guard self.pending[pendingKey] == nil else { continue }
                guard self.pending.count < SSDPRules.maximumPendingResponses else {
                    self.statistics.overLimit += 1
                    continue
                }
                let delay = self.jitter.milliseconds(0...Int64(wait) * 1_000)
                self.pending.schedule(
                    PendingResponse(owner: key, transmission: transmission), for: pendingKey, at: now + delay)
            }
        }
        return immediate
    }

    /// Whether an entry answers a search target (UDA §1.3.2), and with which ST and USN: `ssdp:all` every entry
    /// with its own; `upnp:rootdevice`, a `uuid:` or a type the same; a type of a lower version than the entry's
    /// too, answered with the version searched for (a device of version 2 is also one of version 1).
    static func match(_ target: String, _ entry: SSDPEntry) -> (String, String)? {
        let wanted = SSDPMessage.lowercased(target)
        if wanted == "ssdp:all" { return (entry.notificationType, entry.uniqueServiceName) }
        if wanted == SSDPMessage.lowercased(entry.notificationType) { return (target, entry.uniqueServiceName) }
        guard wanted.hasPrefix("urn:"), let (base, version) = Self.splitVersion(target),
            let (entryBase, entryVersion) = Self.splitVersion(entry.notificationType),
            SSDPMessage.lowercased(String(base)) == SSDPMessage.lowercased(String(entryBase)), entryVersion >= version
        else { return nil }
        let usn = entry.uniqueServiceName
        let device = usn.utf8.firstRange(of: "::".utf8).map { String(usn[..<$0.lowerBound]) } ?? usn
        return (target, "\(device)::\(target)")
    }

    static func splitVersion(_ type: String) -> (Substring, Int)? {
        guard let colon = type.lastIndex(of: ":"), let version = Int(type[type.index(after: colon)...]), version > 0
        else { return nil }
        return (type[..<colon], version)
    }
}
