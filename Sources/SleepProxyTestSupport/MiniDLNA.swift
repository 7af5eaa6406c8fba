import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// minidlna (the Debian package) serving a small media folder on a lab host: the UPnP/DLNA media server that
/// NAS boxes and Raspberry Pis run. Its SSDP socket is bound to 239.255.255.250, so it hears only searches sent to
/// the group, and it announces every `notifyInterval` seconds with `max-age` twice that plus ten.
public final class MiniDLNA: @unchecked Sendable {
    // @unchecked: the process is started once and only signalled afterwards.
    public static let port = 8200
    public let process: ManagedProcess
    public let friendlyName: String
    public let host: LabHost
    private let address: String

    public static var isInstalled: Bool { FileManager.default.isExecutableFile(atPath: "/usr/sbin/minidlnad") }

    /// Starts minidlna on `host` (reached at `address`) and waits (bounded) until it serves its description.
    public init(
        on host: LabHost, address: String, directory: URL, friendlyName: String = "LabNAS", notifyInterval: Int = 895
    ) throws {
        self.host = host
        self.address = address
        self.friendlyName = friendlyName
        let root = directory.appendingPathComponent("minidlna-\(host.name)")
        let media = root.appendingPathComponent("media")
        let database = root.appendingPathComponent("db")
        for folder in [media, database] {
            try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        }
        try Data("lab\n".utf8).write(to: media.appendingPathComponent("notes.txt"))
        let configuration = """
            media_dir=\(media.path)
            db_dir=\(database.path)
            log_dir=\(root.path)
            network_interface=\(host.interface)
            port=\(Self.port)
            friendly_name=\(friendlyName)
            notify_interval=\(notifyInterval)
            inotify=no
            """
        let file = root.appendingPathComponent("minidlna.conf")
        try Data(configuration.utf8).write(to: file)
        // -d: in the foreground, logging to standard output (the lab's log file for it).
        self.process = try host.spawn(
            ["/usr/sbin/minidlnad", "-f", file.path, "-P", root.appendingPathComponent("pid").path, "-d"],
            logName: "minidlna")
        guard self.description(timeout: 15) != nil else {
            self.process.stop(signal: SIGKILL)
            throw CommandError("minidlna did not serve its description: \(self.process.output.suffix(2000))")
        }
    }

    public var location: String { "http://\(self.address):\(Self.port)/rootDesc.xml" }

    /// The device description, fetched on the host itself (bounded), or nil.
    public func description(timeout: TimeInterval) -> String? {
        let deadline = Date(timeIntervalSinceNow: timeout)
        repeat {
            if let result = try? self.host.run(
                ["/usr/bin/python3", "-c", Self.fetchScript, self.location], timeout: .seconds(5)),
                result.succeeded, result.stdout.contains("<UDN>")
            {
                return result.stdout
            }
            usleep(100_000)
        } while Date() < deadline && self.process.isRunning
        return nil
    }

    /// The device's `uuid:…`, from its description.
    public func udn() -> String? {
        guard let text = self.description(timeout: 5), let start = text.range(of: "<UDN>"),
            let end = text.range(of: "</UDN>", range: start.upperBound..<text.endIndex)
        else { return nil }
        return String(text[start.upperBound..<end.lowerBound])
    }

    /// A suspended machine's processes stop where they are and go on when it resumes.
    public func freeze() { kill(self.process.pid, SIGSTOP) }
    public func thaw() { kill(self.process.pid, SIGCONT) }

    public func stop() {
        self.thaw()
        self.process.stop(signal: SIGKILL)
    }

    public static let fetchScript = """
        import sys, urllib.request
        print(urllib.request.urlopen(sys.argv[1], timeout=3).read().decode())
        """
}

/// Control points a TV or a media player embeds, run on a lab host, printing what they see as JSON lines.
public enum SSDPControlPoint {
    /// One M-SEARCH to the group from the host's own address (MX as given), then every response for `seconds`:
    /// `{"t": seconds after the search, "from": source address, "st", "usn", "location"}`.
    public static let searchScript = """
        import json, socket, sys, time
        source, target, mx, seconds = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((source, 0))
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, socket.inet_aton(source))
        s.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 2)
        message = ('M-SEARCH * HTTP/1.1\\r\\nHOST: 239.255.255.250:1900\\r\\nMAN: "ssdp:discover"\\r\\n'
                   'MX: %s\\r\\nST: %s\\r\\n\\r\\n' % (mx, target))
        start = time.monotonic()
        s.sendto(message.encode(), ('239.255.255.250', 1900))
        while True:
            left = start + seconds - time.monotonic()
            if left <= 0:
                break
            s.settimeout(left)
            try:
                data, address = s.recvfrom(4096)
            except socket.timeout:
                break
            headers = {}
            for line in data.decode(errors='replace').split('\\r\\n')[1:]:
                if ':' in line:
                    name, value = line.split(':', 1)
                    headers[name.strip().lower()] = value.strip()
            print(json.dumps({'t': round(time.monotonic() - start, 4), 'from': address[0], 'st': headers.get('st'),
                              'usn': headers.get('usn'), 'location': headers.get('location'),
                              'bootid': headers.get('bootid.upnp.org')}), flush=True)
        print('done', flush=True)
        """

    /// A TV opening a media server: async-upnp-client (PyPI) searches for `target`, then fetches the first
    /// device's description the way a control point does before browsing it:
    /// `{"found": location, "search": seconds}` then `{"opened": friendly name, "fetch": seconds}` or
    /// `{"failed": why}`.
    public static let openScript = """
        import asyncio, json, sys, time
        from async_upnp_client.aiohttp import AiohttpRequester
        from async_upnp_client.client_factory import UpnpFactory
        from async_upnp_client.search import async_search
        source, target = sys.argv[1], sys.argv[2]
        async def main():
            found = []
            start = time.monotonic()
            async def seen(headers):
                if not found:
                    found.append(headers['location'])
                    print(json.dumps({'found': headers['location'], 'search': round(time.monotonic() - start, 4)}),
                          flush=True)
            await async_search(async_callback=seen, timeout=2, search_target=target, source=(source, 0))
            if not found:
                print(json.dumps({'failed': 'nothing answered the search'}), flush=True)
                return
            start = time.monotonic()
            try:
                device = await UpnpFactory(AiohttpRequester(timeout=20)).async_create_device(found[0])
                print(json.dumps({'opened': device.friendly_name, 'fetch': round(time.monotonic() - start, 4)}),
                      flush=True)
            except Exception as error:
                print(json.dumps({'failed': repr(error), 'fetch': round(time.monotonic() - start, 4)}), flush=True)
        asyncio.run(main())
        """

    /// A control point that acts on what is new or changed, as Home Assistant uses async-upnp-client: its device
    /// tracker calls back for an announcement only when the device, the service or its location is new or a
    /// header that matters (BOOTID, CONFIGID, USN…) changed, and for every search response, marked
    /// `search_changed` in those same cases and `search_alive` otherwise. A change is when such a control point
    /// fetches the description. It searches every 3 s for `seconds` and prints each call back:
    /// `{"at": wall-clock seconds, "source", "udn", "location", "type"}`.
    public static let listenScript = """
        import asyncio, json, sys, time
        from async_upnp_client.ssdp_listener import SsdpListener
        source, seconds = sys.argv[1], float(sys.argv[2])
        async def main():
            async def seen(device, kind, how):
                print(json.dumps({'at': time.time(), 'source': how.value, 'udn': device.udn,
                                  'location': device.location, 'type': str(kind)}), flush=True)
            listener = SsdpListener(async_callback=seen, source=(source, 0))
            await listener.async_start()
            print('listening', flush=True)
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                await asyncio.sleep(3)
                await listener.async_search()
            await listener.async_stop()
        asyncio.run(main())
        """

    /// GUPnP's control point (the library behind Rhythmbox, Totem and GNOME's media sharing), via its GObject
    /// bindings: it fetches a device's description before it reports the device available, and reports it
    /// unavailable when its announcements lapse. Watches `target` for `seconds`, printing
    /// `{"at": wall-clock seconds, "event": "available"|"unavailable", "name", "location"}`.
    public static let gupnpScript = """
        import gi, json, sys, time
        gi.require_version('GUPnP', '1.6')
        from gi.repository import GLib, GUPnP
        interface, target, seconds = sys.argv[1], sys.argv[2], int(sys.argv[3])
        context = GUPnP.Context.new(interface, 0)
        point = GUPnP.ControlPoint.new(context, target)
        def report(event):
            def handler(_point, proxy):
                print(json.dumps({'at': time.time(), 'event': event, 'name': proxy.get_friendly_name(),
                                  'location': proxy.get_location()}), flush=True)
            return handler
        point.connect('device-proxy-available', report('available'))
        point.connect('device-proxy-unavailable', report('unavailable'))
        point.set_active(True)
        print('listening', flush=True)
        loop = GLib.MainLoop()
        GLib.timeout_add_seconds(seconds, loop.quit)
        loop.run()
        """

    public static var hasGUPnP: Bool {
        FileManager.default.fileExists(atPath: "/usr/lib/x86_64-linux-gnu/girepository-1.0/GUPnP-1.6.typelib")
            || FileManager.default.fileExists(atPath: "/usr/lib/aarch64-linux-gnu/girepository-1.0/GUPnP-1.6.typelib")
    }

    /// Every NOTIFY heard on the group for `seconds`: `{"at": wall-clock seconds, "from", "nts", "usn"}`.
    public static let notifyScript = """
        import json, socket, struct, sys, time
        source, seconds = sys.argv[1], float(sys.argv[2])
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(('239.255.255.250', 1900))
        s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                     socket.inet_aton('239.255.255.250') + socket.inet_aton(source))
        print('listening', flush=True)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            s.settimeout(max(0.01, end - time.monotonic()))
            try:
                data, address = s.recvfrom(4096)
            except socket.timeout:
                break
            if not data.startswith(b'NOTIFY'):
                continue
            headers = {}
            for line in data.decode(errors='replace').split('\\r\\n')[1:]:
                if ':' in line:
                    name, value = line.split(':', 1)
                    headers[name.strip().lower()] = value.strip()
            print(json.dumps({'at': time.time(), 'from': address[0], 'nts': headers.get('nts'),
                              'usn': headers.get('usn')}), flush=True)
        """

    /// The lines of a control point's output (JSON with a wall-clock `"at"`) stamped strictly between `after` and
    /// `before` that `matching` accepts.
    public static func lines(
        of output: String, after: Double, before: Double, matching: (Substring) -> Bool = { _ in true }
    ) -> [Substring] {
        output.split(separator: "\n").filter { line in
            guard matching(line), let range = line.range(of: "\"at\": "),
                let at = Double(line[range.upperBound...].prefix { $0 != "," && $0 != "}" })
            else { return false }
            return at > after && at < before
        }
    }

    /// Where scripts/test installs async-upnp-client for the system Python (`pip install --target`), or nil.
    public static var asyncUPnPClientPath: String? {
        var candidates: [String] = []
        if let path = ProcessInfo.processInfo.environment["SLEEPPROXY_PYTHONPATH"] { candidates.append(path) }
        candidates.append(
            URL(fileURLWithPath: #filePath).deletingLastPathComponent()
                .appendingPathComponent("../../.build/python-lab").standardized.path)
        return candidates.first {
            FileManager.default.fileExists(
                atPath: URL(fileURLWithPath: $0).appendingPathComponent("async_upnp_client").path)
        }
    }

    public static var hasGSSDPDiscover: Bool { FileManager.default.isExecutableFile(atPath: "/usr/bin/gssdp-discover") }
}
