import Foundation

/// A DNS-SD service instance as a querier saw it.
public struct ResolvedService: Hashable, Sendable, CustomStringConvertible {
    public var name: String
    public var type: String
    public var host: String
    public var port: Int
    public var addresses: [String]
    public var txt: [String]
    /// The transport it was found over, when the querier says ("IPv4"/"IPv6" for avahi-browse).
    public var family: String = ""

    public var description: String {
        "\(self.name).\(self.type) at \(self.host):\(self.port) \(self.addresses) \(self.txt)"
    }
}

/// Real third-party mDNS queriers, each returning parsed answers, never just an exit code.
public enum Queriers {
    // MARK: avahi

    /// `avahi-browse -rtp TYPE` through the given daemon: every resolved instance (one per address family).
    ///
    /// `--terminate` stops at avahi's "all for now", a guess that the network has answered (about a second after
    /// the browse starts); on a loaded machine one family's answer can come after it. With `until`, the browse is
    /// repeated (at most `attempts` times; the daemon's cache fills meanwhile) until `until` holds for what it
    /// found, and the last result is returned either way, for the caller to check.
    public static func avahiBrowse(
        _ avahi: AvahiDaemon, type: String, timeout: Duration = .seconds(15), attempts: Int = 3,
        until: (([ResolvedService]) -> Bool)? = nil
    ) throws -> [ResolvedService] {
        var found = try self.avahiBrowseOnce(avahi, type: type, timeout: timeout)
        var attempt = 1
        while let until, !until(found), attempt < attempts {
            usleep(500_000)
            found = try self.avahiBrowseOnce(avahi, type: type, timeout: timeout)
            attempt += 1
        }
        return found
    }

    private static func avahiBrowseOnce(_ avahi: AvahiDaemon, type: String, timeout: Duration) throws
        -> [ResolvedService]
    {
        let result = try avahi.run(
            ["avahi-browse", "--resolve", "--terminate", "--parsable", "--no-db-lookup", type], timeout: timeout)
        // =;eth0;IPv4;Name;_http._tcp;local;host.local;192.0.2.9;8080;"a=b" "c=d"
        return result.stdout.split(separator: "\n").compactMap { line in
            let fields = line.split(separator: ";", maxSplits: 9, omittingEmptySubsequences: false).map(String.init)
            guard fields.count == 10, fields[0] == "=" else { return nil }
            let txt = Self.avahiTXT(fields[9])
            return ResolvedService(
                name: Self.avahiUnescape(fields[3]), type: fields[4], host: fields[6], port: Int(fields[8]) ?? -1,
                addresses: [fields[7]], txt: txt, family: fields[2])
        }
    }

    /// `avahi-resolve -n NAME` (forward) or `-a ADDRESS` (reverse): the answer, or nil.
    public static func avahiResolve(
        _ avahi: AvahiDaemon, name: String? = nil, address: String? = nil, ipv6: Bool = false
    ) throws -> String? {
        let arguments =
            name != nil ? ["avahi-resolve", ipv6 ? "-6" : "-4", "-n", name!] : ["avahi-resolve", "-a", address!]
        let result = try avahi.run(arguments, timeout: .seconds(10))
        let fields = result.stdout.split(whereSeparator: { $0 == "\t" || $0 == "\n" })
        return fields.count >= 2 ? String(fields[1]) : nil
    }

    static func avahiTXT(_ field: String) -> [String] {
        // Space-separated, each in double quotes.
        var items: [String] = []
        var current = ""
        var inside = false
        for character in field {
            if character == "\"" {
                if inside { items.append(current); current = "" }
                inside.toggle()
            } else if inside {
                current.append(character)
            }
        }
        return items
    }

    /// avahi-browse escapes spaces and other bytes as \DDD.
    static func avahiUnescape(_ text: String) -> String {
        var bytes: [UInt8] = []
        let utf8 = Array(text.utf8)
        var index = 0
        while index < utf8.count {
            if utf8[index] == UInt8(ascii: "\\"), index + 3 < utf8.count,
                let value = UInt8(String(decoding: utf8[(index + 1)...(index + 3)], as: UTF8.self))
            {
                bytes.append(value)
                index += 4
            } else if utf8[index] == UInt8(ascii: "\\"), index + 1 < utf8.count {
                // "\." and "\\": an escaped dot or backslash inside a label.
                bytes.append(utf8[index + 1])
                index += 2
            } else {
                bytes.append(utf8[index])
                index += 1
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    // MARK: python-zeroconf

    static let zeroconfScript = """
        import json, sys, time
        from zeroconf import Zeroconf, ServiceBrowser, IPVersion, ServiceInfo
        service_type, seconds, family = sys.argv[1], float(sys.argv[2]), sys.argv[3]
        version = {'4': IPVersion.V4Only, '6': IPVersion.V6Only, 'all': IPVersion.All}[family]
        zc = Zeroconf(ip_version=version)
        found = []
        class Listener:
            def add_service(self, zc, type_, name): found.append(name)
            def update_service(self, zc, type_, name): pass
            def remove_service(self, zc, type_, name): pass
        browser = ServiceBrowser(zc, service_type, Listener())
        deadline = time.time() + seconds
        while time.time() < deadline and not found: time.sleep(0.05)
        time.sleep(0.3)
        for name in sorted(set(found)):
            info = zc.get_service_info(service_type, name, timeout=3000)
            if info is None:
                print(json.dumps({'name': name, 'resolved': False}), flush=True); continue
            txt = [k.decode(errors='replace') + ('=' + v.decode(errors='replace') if v is not None else '') for k, v in info.properties.items()]
            print(json.dumps({'name': name, 'resolved': True, 'host': info.server, 'port': info.port,
                              'addresses': info.parsed_addresses(), 'txt': txt}), flush=True)
        zc.close()
        """

    /// Browses `type` (e.g. `_http._tcp.local.`) with python-zeroconf and resolves every instance found.
    public static func zeroconf(in host: LabHost, type: String, family: String = "4", seconds: Double = 5) throws
        -> [ResolvedService]
    {
        let result = try host.run(
            ["/usr/bin/python3", "-c", self.zeroconfScript, type, "\(seconds)", family],
            timeout: .seconds(Int64(seconds) + 20))
        return result.stdout.split(separator: "\n").compactMap { line in
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                object["resolved"] as? Bool == true, let fullName = object["name"] as? String
            else { return nil }
            let instance = fullName.hasSuffix("." + type) ? String(fullName.dropLast(type.count + 1)) : fullName
            return ResolvedService(
                name: instance, type: type, host: object["host"] as? String ?? "", port: object["port"] as? Int ?? -1,
                addresses: object["addresses"] as? [String] ?? [], txt: object["txt"] as? [String] ?? [])
        }
    }

    /// A python-zeroconf browser left running (a Finder window left open): every add and remove it reports,
    /// with the time, one JSON line each, until `seconds` have passed. Read its view with `zeroconfEvents`.
    public static func zeroconfWatch(in host: LabHost, type: String, seconds: Int, logName: String = "browser") throws
        -> ManagedProcess
    {
        let script = """
            import json, sys, time
            from zeroconf import Zeroconf, ServiceBrowser, IPVersion
            zc = Zeroconf(ip_version=IPVersion.V4Only)
            def say(event, name): print(json.dumps({'t': time.time(), 'event': event, 'name': name}), flush=True)
            class Listener:
                def add_service(self, zc, type_, name): say('add', name)
                def update_service(self, zc, type_, name): pass
                def remove_service(self, zc, type_, name): say('remove', name)
            browser = ServiceBrowser(zc, sys.argv[1], Listener())
            print(json.dumps({'t': time.time(), 'event': 'ready', 'name': ''}), flush=True)
            time.sleep(float(sys.argv[2]))
            zc.close()
            """
        let process = try host.spawn(["/usr/bin/python3", "-c", script, type, "\(seconds)"], logName: logName)
        guard process.waitForOutput("ready", timeout: 15) else {
            throw CommandError("the python-zeroconf browser did not start: \(process.output)")
        }
        return process
    }

    /// What a `zeroconfWatch` browser reported so far: (wall-clock time, "add" or "remove", instance name).
    public static func zeroconfEvents(_ browser: ManagedProcess) -> [(at: Date, event: String, name: String)] {
        browser.output.split(separator: "\n").compactMap { line in
            guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                let t = object["t"] as? Double, let event = object["event"] as? String, event != "ready",
                let name = object["name"] as? String
            else { return nil }
            return (Date(timeIntervalSince1970: t), event, name)
        }
    }

    // MARK: dig

    /// A direct unicast query to `server` port 5353 (RFC 6762 §5.5); dig cannot read replies to multicast queries
    /// (docs/linux.md §1). Returns the answer-section lines as (name, ttl, type, data).
    public static func dig(in host: LabHost, server: String, name: String, type: String) throws -> [(
        name: String, ttl: Int, type: String, data: String
    )] {
        let result = try host.run(
            ["dig", "-p", "5353", "@\(server)", name, type, "+norecurse", "+noall", "+answer", "+time=2", "+tries=1"],
            timeout: .seconds(10))
        return result.stdout.split(separator: "\n").compactMap { line in
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" }).map(String.init)
            guard fields.count >= 5, let ttl = Int(fields[1]) else { return nil }
            return (fields[0], ttl, fields[3], fields[4...].joined(separator: " "))
        }
    }
}
