import SleepProxyWire

/// What the proxy learns of a host's UPnP devices from its own SSDP, and the messages it sends for them (docs/ssdp.md).
extension SSDPProxy {
    // MARK: - Learning

    mutating func learnAnnouncement(
        _ message: SSDPMessage, from source: IPAddress, interface: String, owner: OwnerKey?, now: Timestamp
    ) {
        switch message.notificationSubtype.map(SSDPMessage.lowercased) {
        case "ssdp:alive":
            self.learn(
                message, type: message.notificationType, from: source, interface: interface, owner: owner,
                announcement: true, now: now)
        case "ssdp:byebye":
            guard let usn = message.uniqueServiceName else {
                self.statistics.malformed += 1
                return
            }
            // The device is gone, whichever scope told us of it.
            self.update(owner: owner, source: Source(interface: interface, address: source)) { learned in
                for scope in [SSDPScope.link, .global] {
                    Self.remove(
                        SSDPEntryKey(family: IPFamily(source), scope: scope, uniqueServiceName: usn), from: &learned)
                }
                return true
            }
        case "ssdp:update":
            // UDA §1.2.4: the device's BOOTID moves to NEXTBOOTID; the rest of the entry is as announced.
            guard let next = message["NEXTBOOTID.UPNP.ORG"].flatMap({ UInt32($0) }) else {
                self.statistics.malformed += 1
                return
            }
            var updated = message
            updated.headers.removeAll { SSDPMessage.lowercased($0.name) == "bootid.upnp.org" }
            updated.headers.append(.init("BOOTID.UPNP.ORG", "\(next)"))
            self.learn(
                updated, type: message.notificationType, from: source, interface: interface, owner: owner,
                announcement: false, now: now)
        default:
            self.statistics.malformed += 1
        }
    }

    mutating func learn(
        _ message: SSDPMessage, type: String?, from source: IPAddress, interface: String, owner: OwnerKey?,
        announcement: Bool, now: Timestamp
    ) {
        guard let type, Self.isValidType(type), let usn = message.uniqueServiceName,
            SSDPMessage.lowercased(usn).hasPrefix("uuid:"), let location = message.location,
            SSDPLocation(location)?.isUsable == true
        else {
            self.statistics.malformed += 1
            return
        }
        let age = min(
            max(message.maxAge ?? SSDPRules.defaultMaximumAge, SSDPRules.maximumAgeRange.lowerBound),
            SSDPRules.maximumAgeRange.upperBound)
        let entry = SSDPEntry(
            family: IPFamily(source), scope: SSDPScope(of: source), notificationType: type, uniqueServiceName: usn,
            location: location,
            server: message.server, maximumAge: age, bootID: message.bootID, configID: message.configID,
            refreshedAt: now)
        self.update(owner: owner, source: Source(interface: interface, address: source)) { learned in
            Self.merge(entry, into: &learned, announcement: announcement)
        }
    }

    /// Changes what is known of a registered host, or of an address not registered.
    /// `change` returns false when a bound refused it.
    private mutating func update(owner: OwnerKey?, source: Source, _ change: (inout Learned) -> Bool) {
        if let owner, var host = self.hosts[owner] {
            let old = host.learned
            if !change(&host.learned) { self.statistics.overLimit += 1 }
            guard self.fits(host.learned, replacing: old) else {
                self.statistics.overLimit += 1
                return
            }
            self.put(host, for: owner)
            self.revision += 1
        } else {
            let old = self.unclaimed[source]
            var heard = self.unclaimedSlot(source)
            if !change(&heard) { self.statistics.overLimit += 1 }
            guard self.fits(heard, replacing: old) else {
                self.statistics.overLimit += 1
                return
            }
            heard.heardAt = max(heard.heardAt, self.latest(heard))
            self.putUnclaimed(heard.entries.isEmpty ? nil : heard, for: source)
        }
    }

    /// Whether `new` in place of `old` stays within `maximumTotalBytes` (shrinking always does).
    func fits(_ new: Learned, replacing old: Learned?) -> Bool {
        let growth = new.bytes - (old?.bytes ?? 0)
        return growth <= 0 || self.totalBytes + growth <= self.maximumTotalBytes
    }

    /// Every change to `hosts` goes through here and `putUnclaimed`, which keep `totalBytes` in step.
    mutating func put(_ host: Host?, for key: OwnerKey) {
        self.totalBytes += (host?.learned.bytes ?? 0) - (self.hosts[key]?.learned.bytes ?? 0)
        self.hosts[key] = host
    }

    /// A new source takes the place of the one heard from longest ago when all `maximumUnclaimedSources` are
    /// taken: only once what it brings is kept, so a refused packet evicts nothing.
    mutating func putUnclaimed(_ heard: Learned?, for source: Source) {
        if heard != nil, self.unclaimed[source] == nil, self.unclaimed.count >= SSDPRules.maximumUnclaimedSources,
            let oldest = self.unclaimed.min(by: { $0.value.heardAt < $1.value.heardAt })?.key
        {
            self.totalBytes -= self.unclaimed[oldest]?.bytes ?? 0
            self.unclaimed[oldest] = nil
            self.statistics.overLimit += 1
        }
        self.totalBytes += (heard?.bytes ?? 0) - (self.unclaimed[source]?.bytes ?? 0)
        self.unclaimed[source] = heard
    }

    private func latest(_ learned: Learned) -> Timestamp {
        learned.entries.values.map(\.refreshedAt).max() ?? learned.heardAt
    }

    /// What is held for the unregistered `source`, or an empty slot (room is made only when it is kept: `putUnclaimed`).
    func unclaimedSlot(_ source: Source) -> Learned {
        self.unclaimed[source] ?? Learned()
    }

    /// Adds or refreshes an entry; false (and nothing changed) when that would break a bound.
    static func merge(_ entry: SSDPEntry, into learned: inout Learned, announcement: Bool = false) -> Bool {
        var entry = entry
        let old = learned.entries[entry.key]
        if let old {
            let gap = entry.refreshedAt - old.refreshedAt
            entry.interval = announcement && gap >= SSDPRules.minimumObservedInterval ? gap : old.interval
        }
        let bytes = learned.bytes - (old?.byteCount ?? 0) + entry.byteCount
        guard bytes <= SSDPRules.maximumBytesPerHost,
            old != nil || learned.entries.count < SSDPRules.maximumEntriesPerHost
        else { return false }
        learned.entries[entry.key] = entry
        learned.bytes = bytes
        learned.heardAt = max(learned.heardAt, entry.refreshedAt)
        return true
    }

    static func remove(_ key: SSDPEntryKey, from learned: inout Learned) {
        guard let old = learned.entries.removeValue(forKey: key) else { return }
        learned.bytes -= old.byteCount
    }

    // MARK: - Messages

    /// The host's own response, as UDA §1.3.3 lays it out, with what it said of itself.
    static func response(_ entry: SSDPEntry, searchTarget: String, uniqueServiceName: String) -> SSDPMessage {
        var headers: [SSDPMessage.Header] = [
            .init("CACHE-CONTROL", "max-age=\(entry.maximumAge)"), .init("EXT", ""),
            .init("LOCATION", entry.location),
        ]
        if let server = entry.server { headers.append(.init("SERVER", server)) }
        headers += [.init("ST", searchTarget), .init("USN", uniqueServiceName)]
        headers += Self.identity(entry)
        return SSDPMessage(kind: .response, headers: headers)
    }

    /// The host's announcement (UDA §1.2.2) or its withdrawal (§1.2.3). The same BOOTID, CONFIGID and LOCATION as
    /// the host's own: a control point that knows the device takes it as a refresh and fetches nothing.
    static func announcement(_ entry: SSDPEntry, byebye: Bool) -> SSDPMessage {
        let host = entry.family == .v4 ? "239.255.255.250:\(SSDPRules.port)" : "[FF02::C]:\(SSDPRules.port)"
        var headers: [SSDPMessage.Header] = [.init("HOST", host)]
        if !byebye {
            headers += [.init("CACHE-CONTROL", "max-age=\(entry.maximumAge)"), .init("LOCATION", entry.location)]
        }
        headers += [.init("NT", entry.notificationType), .init("NTS", byebye ? "ssdp:byebye" : "ssdp:alive")]
        if !byebye, let server = entry.server { headers.append(.init("SERVER", server)) }
        headers.append(.init("USN", entry.uniqueServiceName))
        headers += Self.identity(entry)
        return SSDPMessage(kind: .notify, headers: headers)
    }

    private static func identity(_ entry: SSDPEntry) -> [SSDPMessage.Header] {
        var headers: [SSDPMessage.Header] = []
        if let bootID = entry.bootID { headers.append(.init("BOOTID.UPNP.ORG", "\(bootID)")) }
        if let configID = entry.configID { headers.append(.init("CONFIGID.UPNP.ORG", "\(configID)")) }
        return headers
    }

    /// The host's interval between two sets of announcements: as seen, or a little under half the shortest
    /// `max-age` (UDA §1.2.2); at most half of it, at least `SSDPRules.minimumAnnouncementInterval`.
    static func cadence(_ learned: Learned) -> Duration {
        var shortest: Duration? = nil
        for entry in learned.entries.values {
            let age = Double(entry.maximumAge) * 1_000
            let largest = Duration.milliseconds(Int64(age * SSDPRules.largestShareOfMaximumAge))
            let interval = min(
                entry.interval ?? .milliseconds(Int64(age * SSDPRules.intervalShareOfMaximumAge)), largest)
            if shortest == nil || interval < shortest! { shortest = interval }
        }
        return max(shortest ?? SSDPRules.minimumAnnouncementInterval, SSDPRules.minimumAnnouncementInterval)
    }

    /// NT and ST values a device advertises (UDA §1.2.2): `upnp:rootdevice`, `uuid:…`, `urn:…`.
    static func isValidType(_ type: String) -> Bool {
        let lower = SSDPMessage.lowercased(type)
        return lower == "upnp:rootdevice" || lower.hasPrefix("uuid:") || lower.hasPrefix("urn:")
    }

    func context(named name: String) -> InterfaceContext? {
        self.interfaces.values.first { $0.name == name }
    }
}
