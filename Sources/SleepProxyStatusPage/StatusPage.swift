import FoundationEssentials
import SleepProxyControl

/// The status page (docs/status-page.md): HTML built from the control protocol's own values, the ones
/// `sleepproxyctl --json` and `/api/v1/` give, so the page shows nothing the API does not. Read-only: no form
/// on it changes anything, and every response is bounded (the hosts table comes a page at a time).
public enum StatusPage {
    /// The overview: the proxy, its hosts by state, the last day's wakes, and one page of the hosts table.
    public static func overview(
        status: DaemonStatus, hosts: [HostSummary], total: Int, query: StatusRoute.HostQuery, now: Date,
        time: LocalTime, savings: SavingsReport? = nil
    ) -> String {
        let byState = status.hostsByState ?? [:]
        var cards: [HTML] = [
            Self.card("\(status.hosts)", "hosts held, \(status.records) records")
        ]
        for state in PresenceState.held where (byState[state] ?? 0) > 0 || state == .asleep {
            cards.append(Self.card("\(byState[state] ?? 0)", state.rawValue, link: "/?state=\(state.rawValue)"))
        }
        if let day = status.lastDay {
            let reasons = day.wakesByReason.sorted { $0.key < $1.key }.map { "\($0.value) \($0.key)" }
            cards.append(
                Self.card(
                    "\(day.wakes)", "wakes in 24 h" + (reasons.isEmpty ? "" : " (\(reasons.joined(separator: ", ")))")))
            cards.append(Self.card("\(day.declined)", "declined wakes in 24 h"))
        }
        cards.append(Self.card("\(status.queriesAnswered)", "mDNS queries answered"))
        var body: HTML = "<section class=\"cards\">\(cards)</section>"
        if let warnings = status.warnings, !warnings.isEmpty {
            // Found at start and not in any log a person reads: shown first, with the remedy each carries.
            let items = warnings.map { warning -> HTML in "<li>\(warning)</li>" }
            body = "<section class=\"warnings\"><h2>Needs attention</h2><ul>\(items)</ul></section>" + body
        }
        if let others = status.otherProxies, !others.isEmpty {
            let rows = others.map { peer -> HTML in
                """
                <tr><td>\(peer.label)</td><td class="mono">\(peer.address)</td><td class="mono">\(peer.mac ?? "?")</td>\
                <td>\(peer.interface)</td><td>\(HumanDuration.format(peer.heardSecondsAgo)) ago</td></tr>
                """
            }
            body += """
                <h2>Other sleep proxies</h2><div class="table"><table><thead><tr><th>Name</th><th>Address</th>\
                <th>MAC</th><th>Interface</th><th>Heard</th></tr></thead><tbody>\(rows)</tbody></table></div>
                """
        }
        body += Self.hostsTable(hosts, total: total, query: query, time: time)
        if let savings, query.showsSavings {
            body += SavingsView.section(savings)
        }
        if let recent = status.recentHosts, !recent.isEmpty, query.state == nil, query.search == nil {
            let rows = recent.map { host -> HTML in
                let wake: HTML =
                    host.lastWake.map { wake in
                        "\(time.clock(wake.time)) <span class=\"muted\">\(Timeline.describe(wake))</span>"
                    } ?? "<span class=\"muted\">–</span>"
                return """
                    <tr><td><a href="/host/\(component: host.mac)">\(host.name ?? host.mac)</a></td>\
                    <td class="mono hide-narrow">\(host.mac)</td>\
                    <td><span class="badge \(host.state.rawValue)">\(host.state.rawValue)</span> \
                    <span class="muted">since \(time.clock(host.since))</span></td><td>\(wake)</td></tr>
                    """
            }
            body += """
                <h2>Not held now, seen in the last 24 hours</h2><div class="table"><table><thead><tr><th>Host</th>\
                <th class="hide-narrow">MAC</th><th>State</th><th>Last wake</th></tr></thead><tbody>\(rows)</tbody>\
                </table></div>
                """
        }
        let name = Self.proxyName(status)
        let header: HTML = """
            <header><h1><a href="/">sleep-proxy</a></h1><span class="muted">\(name.name)\
            \(name.metric.map { " · metric \($0)" } ?? "") · \(status.interfaces.joined(separator: ", ")) · \
            <a href="/neighbours">machines on the link</a></span></header>
            """
        return Self.document(
            title: "sleep-proxy: \(status.hosts) hosts", header: header + Self.filterForm(query), live: body,
            footer: Self.footer(status, time: time))
    }

    /// One host's page: what it is, its day, its wake decisions, its addresses and records. `detail` is nil for a
    /// host the proxy no longer holds, whose history is still shown.
    public static func host(detail: HostDetail?, history: HostHistory?, status: DaemonStatus?, time: LocalTime)
        -> String
    {
        let summary = detail?.summary
        let title = summary?.name ?? history?.hostName ?? summary?.mac ?? history?.mac ?? "?"
        var body: HTML = ""
        if let summary {
            var facts: [HTML] = [
                Self.fact("State", "<span class=\"badge \(summary.state.rawValue)\">\(summary.state.rawValue)</span>"),
                Self.fact("MAC", "<span class=\"mono\">\(summary.mac)</span>"),
                Self.fact("Interface", "\(summary.interface)"),
                Self.fact("Lease left", "\(HumanDuration.format(summary.leaseSeconds))"),
            ]
            if let detail {
                if detail.wakeMAC != summary.mac {
                    facts.append(Self.fact("Wakes via", "<span class=\"mono\">\(detail.wakeMAC)</span>"))
                }
                facts.append(Self.fact("Registered", "\(HumanDuration.format(detail.registeredSecondsAgo)) ago"))
            }
            if let seen = summary.lastSeenAwake, let ago = summary.lastSeenAwakeSecondsAgo {
                facts.append(Self.fact("Last seen awake", "\(seen), \(HumanDuration.format(ago)) ago"))
            }
            if let wake = summary.lastWake {
                facts.append(Self.fact("Last wake", "\(time.clock(wake.time)): \(Timeline.describe(wake))"))
            }
            body += "<dl class=\"facts\">\(facts)</dl>"
        } else {
            body += """
                <p class="muted">The proxy does not hold this host now; this is its history.</p>
                """
        }
        body += "<h2>The last 24 hours</h2>"
        if let history {
            body += Timeline.svg(history, time: time)
            // The last hour again, drawn larger: a day's scale makes a wake a minute ago a dot at the edge.
            body += "<h2>The last hour</h2>" + Timeline.svg(history.window(lastSeconds: 3600), time: time)
            body += Timeline.legend
            body += Self.decisionsTable(history, time: time)
        } else {
            body += "<p class=\"muted\">Nothing recorded yet.</p>"
        }
        if let detail {
            body += Self.addressesAndServices(detail)
            body += Self.recordsTable(detail)
        }
        let header: HTML = """
            <header><h1><a href="/">sleep-proxy</a> › \(title)</h1></header>
            """
        return Self.document(
            title: "\(title) · sleep-proxy", header: header, live: body,
            footer: status.map { Self.footer($0, time: time) } ?? Self.footer(nil, time: time))
    }

    /// The machines heard on the served links in the last day, registered or not: what each said of itself, to
    /// choose which to keep present (docs/neighbours.md). Every name and service came from the network.
    public static func neighbours(
        _ neighbours: [NeighbourSummary], adopted: [AdoptedSummary] = [], now: Date, time: LocalTime
    ) -> String {
        let rows = neighbours.map { neighbour -> HTML in
            let name: HTML =
                neighbour.registered
                ? "<a href=\"/host/\(component: neighbour.mac)\">\(neighbour.names.first ?? neighbour.mac)</a>"
                : "\(neighbour.names.first ?? "")"
            let services = neighbour.services.map { service -> HTML in "<div>\(service)</div>" }
            return """
                <tr><td>\(name)</td><td class="mono">\(neighbour.mac)</td>\
                <td class="mono">\(neighbour.addresses.joined(separator: ", "))</td><td>\(services)</td>\
                <td>\(neighbour.registered ? "registered" : neighbour.adopted == true ? "adopted" : "")</td>\
                <td>\(HumanDuration.format(now.timeIntervalSince(neighbour.lastHeard))) ago</td></tr>
                """
        }
        let body: HTML =
            neighbours.isEmpty
            ? "<p class=\"muted\">No machine heard on the served links yet.</p>"
            : """
            <div class="table"><table><thead><tr><th>Name</th><th>MAC</th><th>Addresses</th><th>Services</th>\
            <th>Held</th><th>Heard</th></tr></thead><tbody>\(rows)</tbody></table></div>
            """
        let adoptedRows = adopted.map { host -> HTML in
            let services = host.services.map { service -> HTML in "<div>\(service)</div>" }
            let state = host.nicAnswers ? "\(host.state); its NIC answers for it" : host.state
            return """
                <tr><td>\(host.names.first ?? "")</td><td class="mono">\(host.mac)</td><td>\(state)</td>\
                <td class="mono">\(host.addresses.joined(separator: ", "))</td><td>\(services)</td>\
                <td>\(host.records)</td></tr>
                """
        }
        let adoptedSection: HTML =
            adopted.isEmpty
            ? ""
            : """
            <h2>Adopted hosts</h2><div class="table"><table><thead><tr><th>Name</th><th>MAC</th><th>State</th>\
            <th>Addresses</th><th>Services</th><th>Records</th></tr></thead><tbody>\(adoptedRows)</tbody></table>\
            </div><h2>Heard on the link</h2>
            """
        let header: HTML = """
            <header><h1><a href="/">sleep-proxy</a> › machines on the link</h1><span class="muted">\
            heard in the last 24 hours, with the names and services each publishes</span></header>
            """
        return Self.document(
            title: "machines on the link · sleep-proxy", header: header, live: "\(adoptedSection)\(body)",
            footer: Self.footer(nil, time: time))
    }

    /// A page for a request the page could not serve: not found, a bad query, the daemon busy.
    public static func problem(_ title: String, _ message: String) -> String {
        Self.document(
            title: "\(title) · sleep-proxy",
            header: "<header><h1><a href=\"/\">sleep-proxy</a> › \(title)</h1></header>",
            live: "<p>\(message)</p><p><a href=\"/\">Back to the overview</a></p>", footer: "")
    }

    // MARK: - Parts

    private static func document(title: String, header: HTML, live: HTML, footer: HTML) -> String {
        let page: HTML = """
            <!DOCTYPE html>
            <html lang="en"><head><meta charset="utf-8">\
            <meta name="viewport" content="width=device-width, initial-scale=1">\
            <title>\(title)</title><link rel="stylesheet" href="/static/style.css">\
            <link rel="icon" href="/static/icon.svg" type="image/svg+xml">\
            <script src="/static/live.js" defer></script></head>
            <body>\(header)<main id="live">\(live)</main><footer>\(footer)</footer></body></html>

            """
        return page.text
    }

    static func card(_ value: String, _ label: String, link: String? = nil) -> HTML {
        let inner: HTML = "<b>\(value)</b><span>\(label)</span>"
        guard let link else { return "<div class=\"card\">\(inner)</div>" }
        return "<a class=\"card\" href=\"\(link)\">\(inner)</a>"
    }

    private static func fact(_ name: String, _ value: HTML) -> HTML { "<dt>\(name)</dt><dd>\(value)</dd>" }

    private static func filterForm(_ query: StatusRoute.HostQuery) -> HTML {
        var options: [HTML] = ["<option value=\"\">every state</option>"]
        for state in PresenceState.held {
            let selected: HTML = query.state == state ? " selected" : ""
            options.append("<option value=\"\(state.rawValue)\"\(selected)>\(state.rawValue)</option>")
        }
        return """
            <nav class="filter"><form method="get" action="/"><label>Hosts \
            <select name="state">\(options)</select></label>\
            <input type="search" name="q" value="\(query.search ?? "")" placeholder="name, MAC or address" \
            aria-label="Search hosts"><button type="submit">Show</button></form></nav>
            """
    }

    private static func hostsTable(
        _ hosts: [HostSummary], total: Int, query: StatusRoute.HostQuery, time: LocalTime
    ) -> HTML {
        guard total > 0 else {
            let filtered = query.state != nil || query.search != nil
            return filtered
                ? "<p class=\"muted\">No held host matches.</p>"
                : "<p class=\"muted\">No host has handed its records to this proxy yet.</p>"
        }
        let rows = hosts.map { host -> HTML in
            let states = Dictionary(
                (host.addressStates ?? []).map { ($0.address, $0.state.rawValue) }, uniquingKeysWith: { a, _ in a })
            let addresses = host.addresses.map { address -> HTML in
                let state = states[address].map { state -> HTML in " <span class=\"badge \(state)\">\(state)</span>" }
                return "<span class=\"addr mono\">\(address)\(state ?? .empty)</span>"
            }
            let services = host.services.map { service -> HTML in "<span class=\"addr\">\(service)</span>" }
            let wake: HTML =
                host.lastWake.map { wake in
                    "\(time.clock(wake.time)) <span class=\"muted\">\(Timeline.describe(wake))</span>"
                } ?? "<span class=\"muted\">–</span>"
            return """
                <tr><td><a href="/host/\(component: host.mac)">\(host.name ?? host.mac)</a></td>\
                <td class="mono hide-narrow">\(host.mac)</td><td>\(addresses)</td>\
                <td class="hide-narrow">\(services)</td><td>\(HumanDuration.format(host.leaseSeconds))</td>\
                <td><span class="badge \(host.state.rawValue)">\(host.state.rawValue)</span></td><td>\(wake)</td></tr>
                """
        }
        let first = (query.page - 1) * StatusRoute.HostQuery.rowsPerPage
        guard !hosts.isEmpty else {
            return """
                <p class="muted">Page \(query.page) is past the last of the \(total) hosts. \
                <a href="\(Self.link(query, page: 1))">First page</a></p>
                """
        }
        var pager: [HTML] = []
        if query.page > 1 { pager.append("<a href=\"\(Self.link(query, page: query.page - 1))\">← previous</a>") }
        pager.append("<span class=\"muted\">\(first + 1)–\(first + hosts.count) of \(total)</span>")
        if first + hosts.count < total {
            pager.append("<a href=\"\(Self.link(query, page: query.page + 1))\">next →</a>")
        }
        return """
            <div class="table"><table><thead><tr><th>Host</th><th class="hide-narrow">MAC</th><th>Addresses</th>\
            <th class="hide-narrow">Services</th><th>Lease left</th><th>State</th><th>Last wake</th></tr></thead>\
            <tbody>\(rows)</tbody></table></div><nav class="pager">\(pager)</nav>
            """
    }

    private static func link(_ query: StatusRoute.HostQuery, page: Int) -> HTML {
        var parts: [String] = []
        if let state = query.state { parts.append("state=\(state.rawValue)") }
        if let search = query.search { parts.append("q=" + HTML.percentEncoded(search)) }
        parts.append("page=\(page)")
        return "/?\(parts.joined(separator: "&"))"
    }

    private static func decisionsTable(_ history: HostHistory, time: LocalTime) -> HTML {
        let decisions = history.decisions
        guard !decisions.isEmpty else { return "<p class=\"muted\">No wake and no declined wake in this day.</p>" }
        let rows = decisions.reversed().map { event -> HTML in
            """
            <tr><td class="mono">\(time.clockSeconds(event.time))</td>\
            <td><span class="badge \(Self.kindClass(event.kind))">\(event.kind.rawValue)</span></td>\
            <td>\(event.rule ?? "")</td><td class="wrap">\(Timeline.describe(event))</td></tr>
            """
        }
        return """
            <h2>Wake decisions</h2><div class="table"><table><thead><tr><th>Time</th><th>What</th><th>Rule</th>\
            <th>Detail</th></tr></thead><tbody>\(rows)</tbody></table></div>
            """
    }

    private static func kindClass(_ kind: WakeLogEntry.Kind) -> String {
        switch kind {
        case .wake: "waking"
        case .awake: "awake"
        case .noResponse: "gone"
        case .declined, .ignored: "stopped"
        }
    }

    private static func addressesAndServices(_ detail: HostDetail) -> HTML {
        let states = Dictionary(
            (detail.addressStates ?? []).map { ($0.address, $0.state.rawValue) }, uniquingKeysWith: { a, _ in a })
        let rows = detail.summary.addresses.map { address -> HTML in
            let state = states[address] ?? "-"
            return """
                <tr><td class="mono">\(address)</td><td><span class="badge \(state)">\(state)</span></td></tr>
                """
        }
        let services = detail.summary.services.map { service -> HTML in "<tr><td>\(service)</td></tr>" }
        var html: HTML = """
            <h2>Addresses</h2><div class="table"><table><thead><tr><th>Address</th><th>The proxy</th></tr></thead>\
            <tbody>\(rows)</tbody></table></div>
            """
        if !services.isEmpty {
            html += """
                <h2>Services</h2><div class="table"><table><tbody>\(services)</tbody></table></div>
                """
        }
        if let upnp = detail.upnp, !upnp.isEmpty {
            let rows = upnp.map { entry -> HTML in
                "<tr><td class=\"wrap\">\(entry.type)</td><td class=\"wrap mono\">\(entry.location)</td></tr>"
            }
            html += """
                <h2>UPnP</h2><div class="table"><table><thead><tr><th>Type</th><th>Description</th></tr></thead>\
                <tbody>\(rows)</tbody></table></div>
                """
        }
        return html
    }

    private static func recordsTable(_ detail: HostDetail) -> HTML {
        let rows = detail.records.map { record -> HTML in
            """
            <tr><td class="wrap">\(record.name)</td><td>\(record.type)</td><td>\(Int(record.ttl))</td>\
            <td class="wrap mono">\(record.data)</td></tr>
            """
        }
        return """
            <h2>Records</h2><div class="table"><table><thead><tr><th>Name</th><th>Type</th><th>TTL</th>\
            <th>Data</th></tr></thead><tbody>\(rows)</tbody></table></div>
            """
    }

    private static func footer(_ status: DaemonStatus?, time: LocalTime) -> HTML {
        let version: HTML =
            status.map { "sleepproxyd \($0.version), up \(HumanDuration.format($0.uptimeSeconds)) · " } ?? ""
        return """
            \(version)times in \(time.zone) · read-only · JSON: <a href="\(StatusRoute.apiPrefix)/status">status</a>, \
            <a href="\(StatusRoute.apiPrefix)/hosts">hosts</a> · <a href="/metrics">metrics</a>
            """
    }

    /// The advertised label `AA-BB-CC-DD.F name` as its name and metric (docs/protocol.md §2).
    static func proxyName(_ status: DaemonStatus) -> (name: String, metric: String?) {
        guard let label = status.advertisedName else { return ("not advertising", nil) }
        let parts = label.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, parts[0].contains("-") else { return (label, nil) }
        return (String(parts[1]), String(parts[0]))
    }
}
