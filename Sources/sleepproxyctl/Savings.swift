import ArgumentParser
import SleepProxyControl

/// `sleepproxyctl savings [--month YYYY-MM]`: what each host's sleep saved over a month (docs/savings.md).
struct Savings: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "What the proxy saved over a month: each host's hours asleep, the energy not used, its wakes and the wakes declined."
    )
    @OptionGroup var connection: Connection
    @Option(help: ArgumentHelp("The month, such as 2026-11 (default: this one).", valueName: "YYYY-MM"))
    var month: String?

    func run() throws {
        var request = ControlRequest(command: .savings)
        request.month = self.month
        // The month is checked by the daemon, which says what it takes (`YYYY-MM`).
        let response = try Client.ask(request, connection)
        guard !connection.json, let report = response.savings else { return }
        print(Self.text(report), terminator: "")
    }

    static func kilowattHours(_ wattHours: Double) -> String { "\(DisplayText.fixed(wattHours / 1000, digits: 2)) kWh" }

    /// The report as a table: hosts by what they saved, then the total and the proxy's own use.
    static func text(_ report: SavingsReport) -> String {
        var text = "\(report.month): \(report.from) to \(report.to)\n"
        guard !report.hosts.isEmpty else {
            return text + "  no host was held this month\n"
        }
        let rows: [[String]] =
            [["HOST", "ASLEEP", "AWAKE", "SAVED", "WAKES", "DECLINED", "POWER (W)"]]
            + report.hosts.map { host in
                [
                    host.name.map(DisplayText.bareName) ?? host.mac, DisplayText.hours(host.figures.asleepSeconds),
                    DisplayText.hours(host.figures.awakeSeconds), Self.kilowattHours(host.figures.savedWattHours),
                    "\(host.figures.wakes)", "\(host.figures.declinedWakes)",
                    host.power + (host.powerIsDefault ? " (default)" : ""),
                ]
            }
            + [
                [
                    "all hosts", DisplayText.hours(report.total.asleepSeconds),
                    DisplayText.hours(report.total.awakeSeconds),
                    Self.kilowattHours(report.total.savedWattHours), "\(report.total.wakes)",
                    "\(report.total.declinedWakes)", "",
                ]
            ]
        let widths = (0..<rows[0].count).map { column in rows.map { $0[column].count }.max() ?? 0 }
        for row in rows {
            let cells = row.enumerated().map { column, cell in
                let pad = String(repeating: " ", count: widths[column] - cell.count)
                return column == 0 || column == row.count - 1 ? cell + pad : pad + cell
            }
            text += "  " + cells.joined(separator: "  ").trimmingTrailingSpaces() + "\n"
        }
        if let used = report.proxy.usedWattHours, let watts = report.proxy.watts {
            text +=
                "  this proxy: \(DisplayText.hours(report.proxy.runningSeconds)) at \(DisplayText.watts(watts)) W, \(Self.kilowattHours(used)) used; net saving \(Self.kilowattHours(report.netWattHours))\n"
        } else {
            text += "  this proxy's own draw is not set (proxy-power): the saving shown is before it\n"
        }
        return text
    }
}

extension String {
    fileprivate func trimmingTrailingSpaces() -> String {
        var text = Substring(self)
        while text.last == " " { text = text.dropLast() }
        return String(text)
    }
}
