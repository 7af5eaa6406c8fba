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

    func validate() throws {
        if let month = self.month, !Self.isMonth(month) {
            throw ValidationError("--month must be YYYY-MM, such as 2026-11, not \"\(month)\"")
        }
    }

    static func isMonth(_ text: String) -> Bool {
        let parts = text.split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 2, parts[0].count == 4, parts[1].count == 2,
            parts.allSatisfy({ $0.allSatisfy { $0.isASCII && $0.isNumber } }), let month = Int(parts[1])
        else { return false }
        return (1...12).contains(month)
    }

    func run() throws {
        var request = ControlRequest(command: .savings)
        request.month = self.month
        let response = try Client.ask(request, connection)
        guard !connection.json, let report = response.savings else { return }
        print(Self.text(report), terminator: "")
    }

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
                    host.name.map(Self.shortName) ?? host.mac, Self.hours(host.figures.asleepSeconds),
                    Self.hours(host.figures.awakeSeconds), Self.kilowattHours(host.figures.savedWattHours),
                    "\(host.figures.wakes)", "\(host.figures.declinedWakes)",
                    host.power + (host.powerIsDefault ? " (default)" : ""),
                ]
            }
            + [
                [
                    "all hosts", Self.hours(report.total.asleepSeconds), Self.hours(report.total.awakeSeconds),
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
                "  this proxy: \(Self.hours(report.proxy.runningSeconds)) at \(Self.watts(watts)) W, \(Self.kilowattHours(used)) used; net saving \(Self.kilowattHours(report.netWattHours))\n"
        } else {
            text += "  this proxy's own draw is not set (proxy-power): the saving shown is before it\n"
        }
        return text
    }

    static func shortName(_ name: String) -> String {
        name.hasSuffix(".local.") ? String(name.dropLast(7)) : name.hasSuffix(".") ? String(name.dropLast()) : name
    }

    static func hours(_ seconds: Double) -> String { "\(Self.number(seconds / 3600, digits: 1)) h" }

    static func kilowattHours(_ wattHours: Double) -> String { "\(Self.number(wattHours / 1000, digits: 2)) kWh" }

    /// Watts as given: no trailing zeros (3 W, 3.5 W).
    static func watts(_ value: Double) -> String {
        var text = Self.number(value, digits: 2)
        while text.hasSuffix("0") { text.removeLast() }
        if text.hasSuffix(".") { text.removeLast() }
        return text
    }

    /// A plain decimal with at most `digits` after the point (no locale: the same everywhere).
    static func number(_ value: Double, digits: Int = 2) -> String {
        var scale = 1.0
        for _ in 0..<digits { scale *= 10 }
        let rounded = (value * scale).rounded() / scale
        let whole = Int(rounded.magnitude)
        let fraction = Int(((rounded.magnitude - Double(whole)) * scale).rounded())
        var text = (rounded < 0 ? "-" : "") + String(whole)
        guard digits > 0 else { return text }
        var fractionText = String(fraction)
        while fractionText.count < digits { fractionText = "0" + fractionText }
        text += "." + fractionText
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
