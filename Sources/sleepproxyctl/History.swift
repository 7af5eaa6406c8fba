import ArgumentParser
import SleepProxyControl

/// `--state` takes the states a held host can be in.
extension PresenceState: ExpressibleByArgument {
    public init?(argument: String) { self.init(held: argument) }
    public static var allValueStrings: [String] { Self.held.map(\.rawValue) }
}

/// `sleepproxyctl history HOST`: the host's last day, as the status page's timeline draws it
/// (docs/status-page.md), held or not.
struct History: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "A host's last 24 hours: when it registered, slept, woke and why, and what the proxy declined to wake it for."
    )
    @OptionGroup var connection: Connection
    @Argument(help: "Host name (mac-mini or mac-mini.local) or MAC address; hosts no longer held by MAC.")
    var target: String

    func run() throws {
        let response = try Client.ask(ControlRequest(command: .history, target: self.target), connection)
        guard !connection.json, let history = response.history else { return }
        print("\(history.hostName ?? history.mac) (\(history.mac)), since \(Client.localTime(history.from))")
        if let state = history.stateAtStart { print("  \(state.rawValue) at the start") }
        for record in history.records {
            if let event = record.event {
                print("  " + Client.eventLine(event))
            } else if let state = record.state {
                print("  \(Client.localTime(record.time))  \(state.rawValue)\(record.note.map { ": \($0)" } ?? "")")
            }
        }
        if history.records.isEmpty { print("  nothing happened in the last 24 hours") }
    }
}
