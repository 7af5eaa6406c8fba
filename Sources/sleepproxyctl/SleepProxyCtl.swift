import ArgumentParser
import SleepProxyControl

@main
struct SleepProxyCtl: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sleepproxyctl",
        abstract: "Inspect and steer a running sleepproxyd: proxied hosts, their records, and why they woke.",
        version: "0.1.0 (control protocol \(ControlProtocol.version))"
    )

    @Option(name: .long, help: "The daemon's control socket.")
    var socket: String = "/run/sleep-proxy/control.sock"

    func run() throws {
        throw ValidationError("no commands are available in this version yet; see --help and README.md")
    }
}
