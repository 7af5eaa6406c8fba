import Foundation
import SleepProxyControl
import SleepProxyTestSupport
import SleepProxyWire

#if canImport(Glibc)
    import Glibc
#endif

/// SSDP for a sleeping minidlna server against the real daemon in a lab (docs/ssdp.md): how soon a TV's search is
/// answered for it, and how long a TV opening it waits when the server wakes half a second after the magic
/// packet.
enum SSDPBenchmarks {
    static let proxyMAC = MACAddress("02:53:50:00:00:01")!
    static let sleeperMAC = MACAddress("02:53:50:00:00:02")!
    static let mediaServer = "urn:schemas-upnp-org:device:MediaServer:1"
    static let searches = 40
    static let opens = 5

    static func runLab(daemon: URL) throws {
        guard Command.canBuildNetworks, MiniDLNA.isInstalled else {
            print("SSDP benchmark: skipped (needs root, iproute2, util-linux and minidlna)")
            return
        }
        guard FileManager.default.isExecutableFile(atPath: daemon.path) else {
            print("SSDP benchmark: skipped (\(daemon.path) not built; run swift build -c release)")
            return
        }
        print("SSDP for a sleeping minidlna server in a lab (daemon: \(daemon.path))")
        let lab = try LabNetwork()
        defer { lab.close() }
        let proxy = try lab.addHost("proxy", mac: proxyMAC, ipv4: ["192.0.2.1/24"])
        let sleeper = try SleepingHost(lab: lab, name: "sleeper", mac: sleeperMAC, ipv4: ["192.0.2.2/24"])
        defer { sleeper.close() }
        let tv = try lab.addHost("tv", mac: MACAddress("02:53:50:00:00:20")!, ipv4: ["192.0.2.20/24"])
        let state = lab.directory.appendingPathComponent("state")
        let socket = state.appendingPathComponent("control.sock").path
        let ctl = daemon.deletingLastPathComponent().appendingPathComponent("sleepproxyctl").path
        // minidlna announces every 10 s here, so that on resuming after more than that it announces at once.
        let minidlna = try MiniDLNA(
            on: sleeper.host, address: "192.0.2.2", directory: lab.directory, notifyInterval: 10)
        defer { minidlna.stop() }
        let process = try proxy.spawn(
            [
                daemon.path, "--interface", "eth0", "--state-directory", state.path, "--control-socket", socket,
                "--log-level", "warning",
            ], logName: "bench-ssdp")
        defer { process.stop() }
        guard self.wait(timeout: 15, { (try? proxy.run([ctl, "status", "--socket", socket]))?.succeeded == true })
        else { throw CommandError("sleepproxyd did not start: \(process.output)") }

        func detail() -> HostDetail? {
            guard let result = try? proxy.run([ctl, "host", "sleeper", "--socket", socket, "--json"]),
                let line = result.stdout.split(separator: "\n").first
            else { return nil }
            return try? ControlProtocol.decode(ControlResponse.self, from: Array(line.utf8)).host
        }
        func fallAsleep(round: Int) throws {
            let message = SampleRegistration.message(
                id: 0x5300 + UInt16(round), mac: sleeperMAC, sequence: UInt8(round), host: "sleeper.local.",
                addresses: [IPAddress("192.0.2.2")!], services: [("NAS._http._tcp", 8080)])
            _ = try UDPClient.exchange(
                in: sleeper.host, to: "192.0.2.1", port: 5599, from: "192.0.2.2",
                payloads: [message.encoded(options: .appleUpdate)])
            guard self.wait(timeout: 10, { (detail()?.upnp?.count ?? 0) >= 6 }) else {
                throw CommandError("the proxy learned nothing of minidlna")
            }
            minidlna.freeze()
            try sleeper.sleep()
            guard self.wait(timeout: 15, { detail()?.summary.state == .asleep }) else {
                throw CommandError("the sleeper was never taken over")
            }
        }

        // Two control points watch the whole search phase: a raw listener counting the NOTIFYs on the group, and
        // async-upnp-client's tracker, which calls a device new or changed exactly when a control point like Home
        // Assistant fetches its description again.
        let python = SSDPControlPoint.asyncUPnPClientPath ?? ""
        let watcher = try tv.spawn(
            [
                "env", "PYTHONPATH=\(python)", "/usr/bin/python3", "-c", SSDPControlPoint.listenScript, "192.0.2.20",
                "120",
            ],
            logName: "bench-watcher")
        defer { watcher.stop() }
        let notifies = try tv.spawn(
            ["/usr/bin/python3", "-c", SSDPControlPoint.notifyScript, "192.0.2.20", "120"], logName: "bench-notifies")
        defer { notifies.stop() }
        let gupnp = try tv.spawn(
            ["/usr/bin/python3", "-c", SSDPControlPoint.gupnpScript, "eth0", self.mediaServer, "120"],
            logName: "bench-gupnp")
        defer { gupnp.stop() }
        _ = watcher.waitForOutput(minidlna.location, timeout: 10)
        _ = gupnp.waitForOutput("\"available\"", timeout: 10)
        try fallAsleep(round: 0)
        let sleptAt = Date().timeIntervalSince1970
        let packetsBefore = sleeper.magicPackets.count
        var firstResponses: [Double] = []
        var missed = 0
        for _ in 0..<self.searches {
            let result = try tv.run(
                ["/usr/bin/python3", "-c", SSDPControlPoint.searchScript, "192.0.2.20", self.mediaServer, "1", "1.5"])
            let times = result.stdout.split(separator: "\n").compactMap { line -> Double? in
                guard line.contains("\"192.0.2.1\""), let range = line.range(of: "\"t\": ") else { return nil }
                return Double(line[range.upperBound...].prefix { $0 != "," })
            }
            if let first = times.min() { firstResponses.append(first * 1000) } else { missed += 1 }
        }
        print(
            String(
                format:
                    "  M-SEARCH (MX 1) → the proxy's response for the sleeping server: p50 %.0f ms, p99 %.0f ms, max %.0f ms over %d searches, %d unanswered (UDA spreads responses over 0–MX s on purpose)",
                percentile(firstResponses, 0.5), percentile(firstResponses, 0.99),
                firstResponses.max() ?? .nan, self.searches, missed))

        // Long enough for the proxy's first set of announcements for the server (27 s after its last: 0.45 of
        // minidlna's max-age of 30 s, clamped to 60).
        if Date().timeIntervalSince1970 - sleptAt < 40 {
            usleep(useconds_t((40 - (Date().timeIntervalSince1970 - sleptAt)) * 1e6))
        }
        let watchedUntil = Date().timeIntervalSince1970
        func during(_ output: String, _ matches: (Substring) -> Bool) -> Int {
            SSDPControlPoint.lines(of: output, after: sleptAt, before: watchedUntil, matching: matches).count
        }
        let proxyNotifies = during(notifies.output) { $0.contains("\"192.0.2.1\"") && $0.contains("ssdp:alive") }
        let refreshes = during(watcher.output) { $0.contains("\"search_alive\"") }
        let changes = during(watcher.output) { $0.contains("uuid:") && !$0.contains("\"search_alive\"") }
        let gupnpEvents = during(gupnp.output) { $0.contains("\"event\"") }
        print(
            "  while asleep \(Int(watchedUntil - sleptAt)) s: \(proxyNotifies) alive NOTIFYs from the proxy for the server, \(refreshes) search responses seen as unchanged, \(changes) seen as new or changed by async-upnp-client's tracker (a description fetch each), \(gupnpEvents) GUPnP control point events (available again or unavailable), \(sleeper.magicPackets.count - packetsBefore) magic packets"
        )
        watcher.stop()
        notifies.stop()
        gupnp.stop()

        var totals: [Double] = []
        for round in 1...self.opens {
            if round > 1 { try fallAsleep(round: round) }
            let before = sleeper.magicPackets.count
            let open = try tv.spawn(
                [
                    "env", "PYTHONPATH=\(SSDPControlPoint.asyncUPnPClientPath ?? "")", "/usr/bin/python3", "-c",
                    SSDPControlPoint.openScript, "192.0.2.20", self.mediaServer,
                ], logName: "bench-open-\(round)")
            defer { open.stop() }
            guard sleeper.waitForMagicPackets(before + 1, timeout: 10).count > before else {
                throw CommandError("opening the server sent no magic packet: \(open.output)")
            }
            usleep(500_000)
            try sleeper.wake()
            minidlna.thaw()
            guard open.waitForOutput("opened", timeout: 20),
                let range = open.output.range(of: "\"fetch\": ")
            else { throw CommandError("the description fetch did not complete: \(open.output)") }
            if let seconds = Double(open.output[range.upperBound...].prefix { $0 != "}" && $0 != "," }) {
                totals.append(seconds * 1000)
            }
            // Handed back once minidlna announces itself: wait for that before the next round.
            _ = self.wait(timeout: 15, { detail() == nil })
        }
        print(
            String(
                format:
                    "  description fetch → complete, the server waking 0.5 s after the magic packet: p50 %.0f ms, max %.0f ms over %d opens (async-upnp-client)",
                percentile(totals, 0.5), totals.max() ?? .nan, totals.count))
    }

    static func wait(timeout: TimeInterval, _ condition: () -> Bool) -> Bool {
        let deadline = Date(timeIntervalSinceNow: timeout)
        repeat {
            if condition() { return true }
            usleep(100_000)
        } while Date() < deadline
        return false
    }
}
