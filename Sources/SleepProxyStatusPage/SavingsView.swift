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
            StatusPage.card(Self.kilowattHours(report.total.savedWattHours), "saved this month"),
            StatusPage.card(Self.hours(report.total.asleepSeconds), "asleep this month"),
            StatusPage.card("\(report.total.declinedWakes)", "wakes declined this month"),
        ]
        if let used = report.proxy.usedWattHours {
            cards.append(
                StatusPage.card(
                    Self.kilowattHours(report.netWattHours), "net of this proxy's \(Self.kilowattHours(used))"))
        }
        let rows = report.hosts.prefix(Self.maximumRows).map { host -> HTML in
            let figures = host.figures
            return """
                <tr><td><a href="/host/\(component: host.mac)">\(host.name.map(Self.bareName) ?? host.mac)</a></td>\
                <td class="num">\(Self.hours(figures.asleepSeconds))</td>\
                <td class="num hide-narrow">\(Self.hours(figures.awakeSeconds))</td>\
                <td class="num">\(Self.kilowattHours(figures.savedWattHours))</td>\
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
                "\(day.date): \(Self.kilowattHours(day.savedWattHours)) saved, \(Self.hours(day.asleepSeconds)) asleep"
            bars.append(
                """
                <rect class="bar" x="\(Self.number(x))" y="\(Self.number(Self.chartBottom - barHeight))" \
                width="\(Self.number(slot * 0.7))" height="\(Self.number(barHeight))"><title>\(title)</title></rect>
                """)
            // Every week's first day, and the last; not one so close to the last that their labels overlap.
            if index == days.count - 1 || (index % 7 == 0 && days.count - 1 - index >= 4) {
                bars.append(
                    """
                    <text x="\(Self.number(x + slot * 0.35))" y="\(Self.number(Self.height - 8))" \
                    text-anchor="middle">\(String(day.date.suffix(5)))</text>
                    """)
            }
        }
        return """
            <svg class="savings-chart" viewBox="0 0 \(Int(Self.width)) \(Int(Self.height))" role="img" \
            aria-label="Energy saved on each of the last \(days.count) days, tallest \(Self.kilowattHours(tallest))">\
            <line class="axis" x1="0" y1="\(Self.number(Self.chartBottom))" x2="\(Int(Self.width))" \
            y2="\(Self.number(Self.chartBottom))"/>\(bars)</svg>
            """
    }

    /// Hours with one decimal; under an hour, whole minutes (a host that slept ten minutes is not "0.2 h").
    static func hours(_ seconds: Double) -> String {
        if seconds >= 3600 { return "\(Self.number(seconds / 3600, digits: 1)) h" }
        return seconds < 60 ? (seconds > 0 ? "<1 min" : "0 h") : "\(Int(seconds / 60)) min"
    }

    static func kilowattHours(_ wattHours: Double) -> String {
        if wattHours >= 1000 { return "\(Self.number(wattHours / 1000, digits: 2)) kWh" }
        return "\(Self.number(wattHours, digits: wattHours < 10 ? 1 : 0)) Wh"
    }

    static func bareName(_ name: String) -> String {
        var bare = name.hasSuffix(".") ? String(name.dropLast()) : name
        if bare.lowercased().hasSuffix(".local") { bare = String(bare.dropLast(".local".count)) }
        return bare
    }

    /// Plain digits, `digits` after the point at most (SVG coordinates and figures; no locale, no exponent).
    static func number(_ value: Double, digits: Int = 1) -> String {
        guard value.isFinite else { return "0" }
        var scale = 1.0
        for _ in 0..<digits { scale *= 10 }
        let scaled = (value * scale).rounded()
        guard scaled.magnitude < 1e15 else { return "0" }
        let units = Int64(scaled)
        let whole = units.magnitude / UInt64(scale)
        var text = (units < 0 ? "-" : "") + String(whole)
        if digits > 0 {
            var fraction = String(units.magnitude % UInt64(scale))
            while fraction.count < digits { fraction = "0" + fraction }
            text += "." + fraction
        }
        return text
    }
}
