import SleepProxyControl

/// The overview's "What it saves" section (docs/savings.md): the month so far per host and in all, and the last 30
/// days as bars, server-rendered SVG as the timeline is (no script). Each bar carries a `<title>` a browser shows on
/// hover and a screen reader reads.
public enum SavingsView {
    static let width = 1000.0
    static let height = 140.0
    static let chartTop = 10.0
    static let chartBottom = 112.0
    /// Hosts listed at most; the rest are in `sleepproxyctl savings` and the API.
    static let maximumRows = 20

    public static func section(_ report: SavingsReport) -> HTML {
        var cards: [HTML] = [
            StatusPage.card(DisplayText.energy(report.total.savedWattHours), "saved this month"),
            StatusPage.card(DisplayText.hours(report.total.asleepSeconds), "asleep this month"),
            StatusPage.card("\(report.total.declinedWakes)", "wakes declined this month"),
        ]
        if let used = report.proxy.usedWattHours {
            cards.append(
                StatusPage.card(
                    DisplayText.energy(report.netWattHours), "net of this proxy's \(DisplayText.energy(used))"))
        }
        let rows = report.hosts.prefix(Self.maximumRows).map { host -> HTML in
            let figures = host.figures
            return """
                <tr><td><a href="/host/\(component: host.mac)">\(host.name.map(DisplayText.bareName) ?? host.mac)</a></td>\
                <td class="num">\(DisplayText.hours(figures.asleepSeconds))</td>\
                <td class="num hide-narrow">\(DisplayText.hours(figures.awakeSeconds))</td>\
                <td class="num">\(DisplayText.energy(figures.savedWattHours))</td>\
                <td class="num">\(figures.wakes)</td><td class="num">\(figures.declinedWakes)</td>\
                <td class="hide-narrow">\(host.power) W\(host.powerIsDefault ? " (default)" : "")</td></tr>
                """
        }
        let table: HTML =
            rows.isEmpty
            ? "<p class=\"muted\">No host was held this month yet.</p>"
            : """
            <div class="table"><table><thead><tr><th>Host</th><th class="num">Asleep</th>\
            <th class="num hide-narrow">Awake</th><th class="num">Saved</th><th class="num">Wakes</th>\
            <th class="num">Declined</th><th class="hide-narrow">Power</th></tr></thead><tbody>\(rows)</tbody></table></div>
            """
        return """
            <section class="savings"><h2>What it saves: \(report.month)</h2>\
            <section class="cards">\(cards)</section>\(Self.chart(report.days))\(table)\
            <p class="muted">Energy is time asleep × (awake − asleep draw); hosts without their own figure use \
            \(report.defaultPower) W (host-power-default). From \(report.from) to \(report.to).</p></section>
            """
    }

    /// The last days as bars of energy saved, the tallest day at full height.
    static func chart(_ days: [SavingsReport.Day]) -> HTML {
        guard !days.isEmpty else { return .empty }
        let tallest = max(days.map(\.savedWattHours).max() ?? 0, 1)
        let slot = Self.width / Double(days.count)
        var bars: [HTML] = []
        for (index, day) in days.enumerated() {
            let barHeight = (Self.chartBottom - Self.chartTop) * day.savedWattHours / tallest
            let x = Double(index) * slot + slot * 0.15
            let title =
                "\(day.date): \(DisplayText.energy(day.savedWattHours)) saved, \(DisplayText.hours(day.asleepSeconds)) asleep"
            bars.append(
                """
                <rect class="bar" x="\(Timeline.number(x))" y="\(Timeline.number(Self.chartBottom - barHeight))" \
                width="\(Timeline.number(slot * 0.7))" height="\(Timeline.number(barHeight))"><title>\(title)</title></rect>
                """)
            // Every week's first day, and the last; not one so close to the last that their labels overlap.
            if index == days.count - 1 || (index % 7 == 0 && days.count - 1 - index >= 4) {
                bars.append(
                    """
                    <text x="\(Timeline.number(x + slot * 0.35))" y="\(Timeline.number(Self.height - 8))" \
                    text-anchor="middle">\(String(day.date.suffix(5)))</text>
                    """)
            }
        }
        return """
            <svg class="savings-chart" viewBox="0 0 \(Int(Self.width)) \(Int(Self.height))" role="img" \
            aria-label="Energy saved on each of the last \(days.count) days, tallest \(DisplayText.energy(tallest))">\
            <line class="axis" x1="0" y1="\(Timeline.number(Self.chartBottom))" x2="\(Int(Self.width))" \
            y2="\(Timeline.number(Self.chartBottom))"/>\(bars)</svg>
            """
    }
}
