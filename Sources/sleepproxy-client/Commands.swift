import ArgumentParser
import Foundation
import SleepProxyClient
import SleepProxyCore
import SleepProxyWire

struct Proxies: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Browse for _sleep-proxy._udp and list the proxies, best first, as Apple's clients rank them.")
    @OptionGroup var link: LinkOptions
    @OptionGroup var browse: BrowseOptions

    func run() throws {
        let link = try Link.find(self.link.interface, hostName: self.link.hostName)
        let proxies = try Browser.proxies(on: link, seconds: self.browse.browseSeconds, prefer: self.browse.prefer)
        guard !proxies.isEmpty else {
            print("no sleep proxy answered on \(link.name)")
            throw ExitCode(ClientExit.failure)
        }
        for proxy in proxies { print("\(proxy.label)  \(proxy.address):\(proxy.port)") }
    }
}

struct Register: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Register this host's records with the best proxy now and print the granted lease.",
        discussion:
            "The records are the ones this host's mDNS responder (avahi-daemon) publishes for it, read off the wire as it sends them, plus any --service."
    )
    @OptionGroup var link: LinkOptions
    @OptionGroup var state: StateOptions
    @OptionGroup var browse: BrowseOptions
    @OptionGroup var registration: RegistrationOptions

    func run() throws {
        try Client.register(link: self.link, state: self.state, browse: self.browse, options: self.registration)
    }
}

struct Hook: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "For systemd-sleep: `pre` registers before suspend, `post` announces the wake after resume.",
        discussion:
            "Installed as /usr/lib/systemd/system-sleep/sleepproxy-client, systemd runs it as `hook pre suspend` and `hook post suspend`. `pre` never blocks the suspend: it always exits 0 and says on stderr what went wrong."
    )
    @OptionGroup var link: LinkOptions
    @OptionGroup var state: StateOptions
    @OptionGroup var browse: BrowseOptions
    @OptionGroup var registration: RegistrationOptions
    @Argument(help: "pre or post") var phase: String
    @Argument(help: "What systemd is doing (suspend, hibernate, hybrid-sleep, suspend-then-hibernate); informational.")
    var what: String?

    func validate() throws {
        guard self.phase == "pre" || self.phase == "post" else {
            throw ValidationError("hook takes pre or post, not \"\(self.phase)\"")
        }
    }

    func run() throws {
        if self.phase == "pre" {
            // An announcer still running from the last wake would go on sending the old sequence number.
            Systemd.stopAnnouncer()
            do {
                try Client.register(link: self.link, state: self.state, browse: self.browse, options: self.registration)
            } catch let exit as ExitCode {
                // Already explained on stderr; the host sleeps anyway.
                _ = exit
                Client.warn("suspending without a sleep proxy")
            } catch {
                // The host sleeps anyway; a failed registration must not block the suspend.
                Client.warn("\(error); suspending without a sleep proxy")
            }
        } else {
            let sequence = try Client.nextSequence(self.state)
            // Apple's client repeats the Owner option for 60 s (docs/protocol.md §3.5). A sleep hook must return
            // quickly, so under systemd the repeats run in a transient unit; elsewhere the hook announces for a
            // few seconds itself.
            if Systemd.startAnnouncer(link: self.link, state: self.state) {
                print(
                    "announcing the wake (Owner sequence \(sequence)) for \(WakeAnnouncement.window.wholeSeconds) s from the systemd unit \(Systemd.announcerUnit)"
                )
            } else {
                let sent = try Client.announceWake(
                    link: self.link, state: self.state, window: Hook.inlineWindow, addressWait: Hook.inlineAddressWait)
                print("announced the wake (Owner sequence \(sequence)) with \(sent) probes")
            }
        }
    }

    /// Without systemd the hook itself announces: a probe burst and two more, then it returns.
    static let inlineWindow: Duration = .seconds(4)
    /// ... after waiting at most this long for the interface's address to come back.
    static let inlineAddressWait: Duration = .seconds(10)
}

struct Announce: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Tell every sleep proxy this host is awake: probes carrying the Owner option with the current sequence number, for 60 s once the interface has its address back (`hook post` runs this)."
    )
    @OptionGroup var link: LinkOptions
    @OptionGroup var state: StateOptions
    @Option(name: .long, help: "How long to keep announcing, in seconds (Apple's client: 60).")
    var seconds: Int = Int(WakeAnnouncement.window.wholeSeconds)

    /// An hour: far past Apple's 60 s window, yet a typo cannot leave an announcer running for days.
    static let maximumSeconds = 3600

    func validate() throws {
        guard (0...Self.maximumSeconds).contains(self.seconds) else {
            throw ValidationError("--seconds must be 0 to \(Self.maximumSeconds), not \(self.seconds)")
        }
    }

    func run() throws {
        let sent = try Client.announceWake(
            link: self.link, state: self.state, window: .seconds(self.seconds),
            addressWait: WakeAnnouncement.addressWait)
        print(
            "announced the wake (Owner sequence \(ClientState.load(self.state.stateDirectory).sequence)) with \(sent) probes"
        )
    }
}

struct Status: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "What was registered where, when, with which lease, and whether it was handed back.")
    @OptionGroup var state: StateOptions

    func run() throws {
        let state = ClientState.load(self.state.stateDirectory)
        print("Owner sequence: \(state.sequence)")
        guard let last = state.last else {
            print("no registration yet")
            return
        }
        let formatter = ISO8601DateFormatter()
        print(
            "last registration: with \(last.proxy) (\(last.address):\(last.port)) on \(last.interface) at \(formatter.string(from: last.at))"
        )
        print("  \(last.records) records in \(last.parts) UPDATE\(last.parts == 1 ? "" : "s"), lease \(last.lease) s")
        print("  " + ClientState.standing(of: last, now: Date(), formatter: formatter))
    }
}
