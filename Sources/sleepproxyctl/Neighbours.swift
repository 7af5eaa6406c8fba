import ArgumentParser
import SleepProxyControl

/// `sleepproxyctl neighbours`: the machines heard on the served links in the last day, to choose which to keep
/// present (docs/neighbours.md).
struct Neighbours: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "The machines heard on the link in the last day: MAC, addresses, the names and services they publish.")
    @OptionGroup var connection: Connection

    func run() throws {
        let response = try Client.ask(ControlRequest(command: .neighbours), connection)
        guard !connection.json, let neighbours = response.neighbours else { return }
        if neighbours.isEmpty { print("no machine heard on the served links yet") }
        for neighbour in neighbours {
            let name = neighbour.names.first ?? "(no name published)"
            let held = neighbour.registered ? ", registered" : ""
            print(
                "\(neighbour.mac)  \(name)  on \(neighbour.interface)\(held), heard \(Client.ago(neighbour.lastHeard))")
            if !neighbour.addresses.isEmpty { print("    addresses: \(neighbour.addresses.joined(separator: ", "))") }
            if !neighbour.services.isEmpty { print("    services:  \(neighbour.services.joined(separator: ", "))") }
        }
    }
}
