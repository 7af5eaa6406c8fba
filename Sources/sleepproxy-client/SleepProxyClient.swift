import ArgumentParser
import SleepProxyClient
import SleepProxyControl
import SleepProxyCore
import SleepProxyWire

/// The Linux sleep client (docs/client.md): finds sleep proxies, hands them exactly the records this host's
/// own mDNS responder publishes before it suspends, and takes them back on resume, in the form Apple's clients
/// use.
@main
struct SleepProxyClient: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sleepproxy-client",
        abstract: "Let this Linux host hand its mDNS records to a Bonjour Sleep Proxy before it suspends.",
        discussion: """
            Options common to every command (--interface, --host-name, --state-directory) may come before the \
            command or after it.

            Exit status: \(ClientExit.success) done; \(ClientExit.failure) nothing was registered or announced (no proxy \
            answered or took the registration, no address); \(ClientExit.nothingToRegister) nothing to register \
            (this host's mDNS responder did not answer, or publishes no service; --allow-empty registers its addresses \
            anyway); \(ClientExit.usage) a usage error.
            """,
        version: SleepProxyVersion.current,
        subcommands: [Proxies.self, Register.self, Hook.self, Announce.self, Status.self]
    )

    // Declared here too, so that they are accepted before the command as well as after it (as with systemctl, ip
    // and the avahi tools); each command reads whichever was given.
    @OptionGroup var link: LinkOptions
    @OptionGroup var state: StateOptions
}

/// Exit statuses, as `--help` and docs/client.md list them.
enum ClientExit {
    static let success: Int32 = 0
    static let failure: Int32 = 1
    static let nothingToRegister: Int32 = 2
    /// ArgumentParser's own status for a bad command line (EX_USAGE).
    static let usage: Int32 = 64
}

/// Which interface and which host name.
struct LinkOptions: ParsableArguments {
    @Option(
        name: .long,
        help: "The interface to use (default: the first up, multicast-capable, non-loopback one with an IPv4 address).")
    var interface: String?

    @Option(
        name: .long,
        help:
            "This host's .local name without the domain (default: the name its mDNS responder publishes, else the system host name)."
    )
    var hostName: String?

    func validate() throws {
        if let hostName, hostName.isEmpty || hostName.utf8.count > 63 || hostName.contains(".") {
            throw ValidationError("--host-name takes one label of 1 to 63 bytes without dots, not \"\(hostName)\"")
        }
    }
}

/// Where the client keeps what it did.
struct StateOptions: ParsableArguments {
    @Option(name: .long, help: "Where the Owner sequence number and the last registration are kept.")
    var stateDirectory: String = "/var/lib/sleepproxy-client"
}

/// Finding a proxy.
struct BrowseOptions: ParsableArguments {
    @Option(name: .long, help: "Try this proxy first (its name, as `proxies` lists it, or part of it).")
    var prefer: String?

    @Option(
        name: .long,
        help: "How long to browse for proxies, in seconds (asked at once, then 1, 3, 7 ... s later within this time).")
    var browseSeconds: Double = 2

    func validate() throws {
        guard self.browseSeconds > 0, self.browseSeconds <= Self.maximumBrowseSeconds else {
            throw ValidationError("--browse-seconds must be more than 0 and at most \(Int(Self.maximumBrowseSeconds))")
        }
    }

    /// A minute: a suspend hook that browses longer delays the suspend for nothing.
    static let maximumBrowseSeconds = 60.0
}

/// What to register.
struct RegistrationOptions: ParsableArguments {
    @Option(name: .long, help: "Lease to ask for, in seconds (the proxy may grant less).")
    var lease: UInt32 = 7200

    @Option(
        name: .long,
        help:
            "A service to register besides the ones this host's mDNS responder publishes: NAME._type._tcp:PORT[:key=value,...]; repeat for several."
    )
    var service: [String] = []

    @Flag(
        name: .long,
        help:
            "Do not ask this host's mDNS responder (avahi-daemon) for the records it publishes; register only --service."
    )
    var noAvahi = false

    @Flag(
        name: .long,
        help:
            "Register even when there is no service to register (the proxy then keeps the host's name and addresses, but no connection can wake it)."
    )
    var allowEmpty = false

    @Option(name: .long, help: "SecureOn password for the magic packet, six bytes as aa:bb:cc:dd:ee:ff.")
    var password: String?

    @Flag(name: .long, help: "Set an RTC wake alarm at 90 % of the granted lease, so the host wakes to renew it.")
    var rtcWake = false

    func validate() throws {
        if let password, SecureOnPassword(password) == nil {
            throw ValidationError("--password must be six bytes written as aa:bb:cc:dd:ee:ff")
        }
        for text in self.service where SleepRegistration.Service(specification: text) == nil {
            throw ValidationError(
                "--service \"\(text)\": write it as NAME._type._tcp:PORT or NAME._type._udp:PORT[:key=value,...]")
        }
        guard self.lease > 0 else { throw ValidationError("--lease must be positive") }
    }
}
