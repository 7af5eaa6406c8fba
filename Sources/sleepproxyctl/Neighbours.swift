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
            let held = (neighbour.registered ? ", registered" : "") + (neighbour.adopted == true ? ", adopted" : "")
            print(
                "\(neighbour.mac)  \(name)  on \(neighbour.interface)\(held), heard \(Client.ago(neighbour.lastHeard))")
            if !neighbour.addresses.isEmpty { print("    addresses: \(neighbour.addresses.joined(separator: ", "))") }
            if !neighbour.services.isEmpty { print("    services:  \(neighbour.services.joined(separator: ", "))") }
        }
    }
}

/// `sleepproxyctl adopt MAC`: keep a host that cannot register present while it sleeps (docs/adoption.md).
struct Adopt: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Keep a host that cannot register (a Mac on macOS 15+, a Windows PC, a NAS) present while it sleeps, by its MAC; kept across restarts.",
        discussion: "`sleepproxyctl neighbours` lists the machines heard on the link, with their MACs.")
    @Argument(help: "The host's MAC address, such as 02:00:00:00:00:05.") var mac: String
    @OptionGroup var connection: Connection

    func run() throws {
        let response = try Client.ask(ControlRequest(command: .adopt, target: self.mac), connection)
        guard !connection.json else { return }
        Adopted.show(response.adopted ?? [])
    }
}

/// `sleepproxyctl unadopt MAC`.
struct Unadopt: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Stop keeping an adopted host present; if the proxy answers for it now, it says goodbye for it.")
    @Argument(help: "The host's MAC address.") var mac: String
    @OptionGroup var connection: Connection

    func run() throws {
        let response = try Client.ask(ControlRequest(command: .unadopt, target: self.mac), connection)
        guard !connection.json else { return }
        Adopted.show(response.adopted ?? [])
    }
}

/// `sleepproxyctl adopted`: the adopted hosts and what the proxy learned of each.
struct Adopted: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "The adopted hosts: where each stands and what the proxy learned of it while it was awake.")
    @OptionGroup var connection: Connection

    func run() throws {
        let response = try Client.ask(ControlRequest(command: .adopted), connection)
        guard !connection.json else { return }
        Self.show(response.adopted ?? [])
    }

    static func show(_ hosts: [AdoptedSummary]) {
        if hosts.isEmpty {
            print("no host adopted (sleepproxyctl adopt MAC, or adopt = MAC in the configuration file)")
        }
        for host in hosts {
            let netbios = host.netbiosNames?.first { !$0.hasSuffix("(group)") }.map { "\\\\" + $0 }
            let name = host.names.first ?? netbios ?? "(no name heard yet)"
            let place = host.interface.map { " on \($0)" } ?? ""
            let origin = host.configured ? ", from the configuration file" : ""
            let nic = host.nicAnswers ? "; its NIC answers ARP for it" : ""
            print("\(host.mac)  \(name)\(place): \(host.state)\(nic)\(origin)")
            if !host.addresses.isEmpty { print("    addresses: \(host.addresses.joined(separator: ", "))") }
            if !host.services.isEmpty { print("    services:  \(host.services.joined(separator: ", "))") }
            if let names = host.netbiosNames, !names.isEmpty {
                let llmnr = host.llmnrName.map { "; LLMNR: \($0)" } ?? ""
                print("    NetBIOS:   \(names.joined(separator: ", "))\(llmnr)")
            }
            if let endpoint = host.wsdEndpoint { print("    WS-Discovery: \(endpoint)") }
            let refused = host.refused > 0 ? " (\(host.refused) refused by the bounds)" : ""
            print("    records:   \(host.records) learned\(refused)")
        }
    }
}
