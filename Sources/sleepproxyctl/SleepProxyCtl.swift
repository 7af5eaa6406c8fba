import ArgumentParser
import FoundationEssentials
import SleepProxyControl

#if canImport(Glibc)
    import Glibc
#endif

@main
struct SleepProxyCtl: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sleepproxyctl",
        abstract: "Inspect and steer a running sleepproxyd: proxied hosts, their records, and why they woke.",
        discussion: """
            --socket and --json may come before the command or after it.

            Exit status: 0 done; 1 the daemon is not running, refused the request, or failed it (the sentence \
            on stderr says which); 64 a usage error.
            """,
        version: "\(SleepProxyVersion.current) (control protocol \(ControlProtocol.version))",
        subcommands: [
            Status.self, Hosts.self, Host.self, History.self, Wake.self, Forget.self, Events.self, ReleaseAll.self,
            Neighbours.self, Adopt.self, Unadopt.self, Adopted.self, Sync.self, Savings.self,
        ]
    )

    // Declared here too, so that `--socket PATH` and `--json` are accepted before the subcommand as well as after
    // it (`sleepproxyctl --socket PATH hosts`), as with systemctl, ip and the avahi tools; the subcommand reads
    // whichever was given.
    @OptionGroup var connection: Connection
}

struct Connection: ParsableArguments {
    @Option(name: .long, help: "The daemon's control socket.")
    var socket: String = "/run/sleep-proxy/control.sock"

    @Flag(
        name: .long, help: "Print the daemon's JSON response (one object per line; schema in docs/status-page.md §4).")
    var json = false
}

// MARK: - Commands

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Interfaces, hosts, records, uptime, version, refusals by reason.")
    @OptionGroup var connection: Connection

    func run() throws {
        let response = try Client.ask(ControlRequest(command: .status), connection)
        guard !connection.json, let status = response.status else { return }
        print("sleepproxyd \(status.version), up \(HumanDuration.format(status.uptimeSeconds))")
        print("advertised as: \(status.advertisedName ?? "-")")
        print("interfaces:    \(status.interfaces.isEmpty ? "none" : status.interfaces.joined(separator: ", "))")
        if let byState = status.hostsByState {
            // Only the states some host is in: "2 asleep, 1 awake".
            let parts = [PresenceState.asleep, .waking, .starting, .awake, .standby].compactMap { state in
                byState[state].flatMap { $0 > 0 ? "\($0) \(state.rawValue)" : nil }
            }
            print(
                "hosts:         \(status.hosts) held (\(parts.isEmpty ? "none" : parts.joined(separator: ", "))), \(status.records) records"
            )
        } else {
            print("hosts:         \(status.hosts) sleeping, \(status.records) records")
        }
        print("registrations: \(status.registrationsAccepted) accepted")
        print("answers:       \(status.queriesAnswered) queries answered")
        if let upnp = status.upnp {
            print(
                "UPnP:          \(upnp.hosts) hosts with \(upnp.entries) devices and services; \(upnp.responses) search responses, \(upnp.announcements) announcements sent for sleeping hosts"
            )
        }
        print("wakes:         \(status.wakes) (\(status.magicPackets) magic packet bursts)")
        if let others = status.otherProxies {
            // docs/coexistence.md: lower metrics win a client's choice, and decide which proxy keeps a shared host.
            print("other proxies: \(others.isEmpty ? "none heard" : "")")
            for other in others.sorted(by: { $0.label < $1.label }) {
                print(
                    "  \(other.label)  \(other.address)\(other.mac.map { " \($0)" } ?? "") on \(other.interface), heard \(HumanDuration.format(other.heardSecondsAgo)) ago"
                )
            }
        }
        if status.refusals.isEmpty {
            print("refusals:      none")
        } else {
            print("refusals:")
            for (reason, count) in status.refusals.sorted(by: { $0.key < $1.key }) { print("  \(reason): \(count)") }
        }
        for warning in status.warnings ?? [] { print("warning:       \(warning)") }
        if let mqtt = status.mqtt {
            print(
                "home assistant: \(mqtt.connected ? "connected to" : "not connected to") \(mqtt.broker), \(mqtt.retained) retained messages, \(mqtt.presses) wake presses"
            )
        }
        if let reload = status.lastReload {
            let ago = HumanDuration.format(max(0, Date().timeIntervalSince(reload.time)))
            print(
                "last reload:   \(ago) ago, \(reload.succeeded ? "taken" : "refused, the running configuration kept"): \(reload.message)"
            )
        }
    }
}

struct Hosts: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "The sleeping hosts: name, MAC, addresses, services, lease left, state, last wake.")
    @OptionGroup var connection: Connection
    @Option(name: .long, help: "Only hosts in this state (starting, asleep, awake, waking, standby).")
    var state: PresenceState?
    @Option(name: .long, help: "Only hosts whose name, MAC or an address contains this text.") var search: String?

    func run() throws {
        let response = try Client.ask(
            ControlRequest(command: .hosts, state: self.state, search: self.search), connection)
        guard !connection.json else { return }
        let hosts = response.hosts ?? []
        guard !hosts.isEmpty else {
            print("no sleeping hosts")
            return
        }
        let rows = hosts.map { host in
            [
                host.name ?? "?", host.mac, host.addresses.joined(separator: " "), host.services.joined(separator: " "),
                HumanDuration.format(host.leaseSeconds), host.state.rawValue,
                host.lastWake.map { "\(Client.ago($0.time)) (\(Client.reason($0)))" } ?? "-",
            ]
        }
        Client.table(["NAME", "MAC", "ADDRESSES", "SERVICES", "LEASE", "STATE", "LAST WAKE"], rows)
    }
}

struct Host: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "One host: its records with TTLs, owner data, wake history.")
    @OptionGroup var connection: Connection
    @Argument(help: "Host name (mac-mini or mac-mini.local) or MAC address.") var target: String

    func run() throws {
        let response = try Client.ask(ControlRequest(command: .host, target: self.target), connection)
        guard !connection.json, let host = response.host else { return }
        Client.printDetail(host)
    }
}

struct Wake: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Wake a sleeping host now (magic packets until it answers).")
    @OptionGroup var connection: Connection
    @Argument(help: "Host name or MAC address.") var target: String

    func run() throws {
        let response = try Client.ask(ControlRequest(command: .wake, target: self.target), connection)
        guard !connection.json, let host = response.host else { return }
        print(
            "waking \(host.summary.name ?? host.summary.mac) (\(host.wakeMAC)): magic packets every 2 s until it answers"
        )
    }
}

struct Forget: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Stop proxying a host: drop its records and release its addresses (it is not woken).")
    @OptionGroup var connection: Connection
    @Argument(help: "Host name or MAC address.") var target: String
    @Flag(name: .long, help: "Send goodbyes so that browsers drop its services at once (as on lease expiry).")
    var goodbyes = false

    func run() throws {
        let response = try Client.ask(
            ControlRequest(command: .forget, target: self.target, goodbyes: self.goodbyes), connection)
        guard !connection.json, let host = response.hosts?.first else { return }
        print("forgot \(host.name ?? host.mac)\(self.goodbyes ? " (goodbyes sent)" : "")")
    }
}

struct ReleaseAll: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "release-all",
        abstract:
            "Decommissioning: wake every sleeping host and stop proxying it (each re-registers with another proxy).")
    @OptionGroup var connection: Connection
    @Flag(name: .long, help: "Really do it.") var yes = false
    @Flag(
        name: .long,
        help:
            "Hand each host to the best other sleep proxy on its link first (with the host's own Owner option, as Apple's proxy does); wake only those none took."
    )
    var transfer = false

    func validate() throws {
        guard self.yes else { throw ValidationError("this wakes every sleeping host; add --yes to confirm") }
    }

    func run() throws {
        let response = try Client.ask(ControlRequest(command: .releaseAll, transfer: self.transfer), connection)
        guard !connection.json else { return }
        if let transferred = response.transferred {
            let hosts = response.hosts ?? []
            let taken = hosts.filter { transferred[$0.mac] != nil }
            let woken = hosts.filter { transferred[$0.mac] == nil }
            for host in taken { print("transferred \(host.name ?? host.mac) to \(transferred[host.mac]!)") }
            for host in woken { print("woke \(host.name ?? host.mac) (no other proxy took it)") }
            print(
                "\(taken.count) transferred, \(woken.count) woken and released; you can stop sleepproxyd now")
            return
        }
        let hosts = response.hosts ?? []
        print(
            "released \(hosts.count) host\(hosts.count == 1 ? "" : "s")\(hosts.isEmpty ? "" : ": " + hosts.map { $0.name ?? $0.mac }.joined(separator: ", ")); you can stop sleepproxyd now"
        )
    }
}

struct Sync: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Write what the daemon holds back to spare the SD card (the history's recent lines, journal entries no reply waits on) to the state directory now: before pulling the power or copying the state directory."
    )
    @OptionGroup var connection: Connection

    func run() throws {
        _ = try Client.ask(ControlRequest(command: .sync), connection)
        guard !connection.json else { return }
        print("the state directory is up to date")
    }
}

struct Events: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "The wake log: wakes and their reasons, outcomes, ignored connections.")
    @OptionGroup var connection: Connection
    @Option(name: .long, help: "Only this host (name or MAC).") var host: String?
    @Option(name: .long, help: "Only events in the last DURATION (90s, 15m, 2h, 7d).") var since: String?
    @Flag(name: .long, help: "Keep printing new events as they happen.") var follow = false

    func validate() throws {
        if let since, HumanDuration.parse(since) == nil {
            throw ValidationError("--since takes a duration such as 90s, 15m, 2h or 7d, not \"\(since)\"")
        }
    }

    func run() throws {
        let start = self.since.flatMap(HumanDuration.parse).map { Date(timeIntervalSinceNow: -$0) }
        let request = ControlRequest(command: .events, target: self.host, since: start, follow: self.follow)
        try Client.ask(request, connection, stream: self.follow) { response in
            guard !connection.json else { return }
            // Written straight to the descriptor: with --follow each line must show at once, even into a pipe.
            for event in response.events ?? [] {
                Client.writeOut(Array((Client.eventLine(event) + "\n").utf8))
            }
        }
    }
}
