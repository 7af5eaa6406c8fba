import FoundationEssentials
import SleepProxyControl
import SleepProxyStatusPage
import Testing

/// The status page's markup: text from the wire stays text, routes parse every path to a route or a clear
/// refusal, the hosts table pages, and the timeline marks wakes and declines.
@Suite("Status page")
struct StatusPageTests {
    static let hostile = "<script>alert('x')</script>&\"quoted\""
    static let now = Date(timeIntervalSince1970: 1_790_000_000)
    static let utc = LocalTime(offsetSeconds: 0, zone: "UTC")

    static func status(hosts: Int = 1) -> DaemonStatus {
        DaemonStatus(
            version: "0.6.0", startedAt: now, uptimeSeconds: 60, interfaces: ["eth0"],
            advertisedName: "10-34-10-70.0 " + hostile, hosts: hosts, records: 8, registrationsAccepted: 1,
            refusals: [:], queriesAnswered: 3, wakes: 1, magicPackets: 2, hostsByState: [.asleep: hosts],
            otherProxies: [
                .init(interface: "eth0", address: "192.0.2.7", label: hostile, mac: nil, heardSecondsAgo: 3)
            ], lastDay: .init(wakes: 1, declined: 4, wakesByReason: ["connection": 1]),
            recentHosts: [
                .init(mac: "02:53:50:00:00:09", name: hostile, state: .handedBack, since: now, lastWake: nil)
            ],
            warnings: [hostile]
        )
    }

    static func summary(_ index: Int = 0, name: String = hostile) -> HostSummary {
        HostSummary(
            name: name, mac: "02:53:50:00:00:\(index < 10 ? "0" : "")\(index)", interface: "eth0",
            addresses: ["192.0.2.2"], services: ["_http._tcp:8080"], leaseSeconds: 3600, state: .asleep,
            lastWake: nil, addressStates: [.init(address: "192.0.2.2", state: .answering)])
    }

    static func history() -> HostHistory {
        let wake = WakeLogEntry(
            kind: .wake, time: now.addingTimeInterval(-600), mac: "02:53:50:00:00:02", interface: "eth0",
            hostName: hostile, trigger: .init(type: .connection, transport: "tcp", client: "192.0.2.20", port: 8080),
            seconds: nil, attempts: nil, rule: "resolved-first", summary: hostile)
        let declined = WakeLogEntry(
            kind: .declined, time: now.addingTimeInterval(-1200), mac: "02:53:50:00:00:02", interface: "eth0",
            hostName: hostile, trigger: .init(type: .connection, transport: "tcp", client: "<b>9</b>", port: 22),
            seconds: nil, attempts: nil, rule: "scanner", count: 40, summary: hostile)
        return HostHistory(
            mac: "02:53:50:00:00:02", hostName: hostile, from: now.addingTimeInterval(-86_400), to: now,
            stateAtStart: .asleep,
            records: [HistoryRecord(declined), HistoryRecord(wake)])
    }

    /// Every `<` in the page is ours: a tag from the list the page uses, never one from the data.
    static func tags(_ html: String) -> Set<String> {
        var names: Set<String> = []
        for part in html.split(separator: "<").dropFirst() {
            let name = part.prefix { $0.isLetter || $0.isNumber || $0 == "/" || $0 == "!" }
            names.insert(String(name.filter { $0 != "/" }).lowercased())
        }
        return names
    }

    static let ourTags: Set<String> = [
        "!doctype", "html", "head", "meta", "title", "link", "script", "body", "header", "h1", "h2", "a", "span",
        "main", "section", "div", "b", "table", "thead", "tbody", "tr", "th", "td", "nav", "form", "label",
        "select", "option", "input", "button", "footer", "p", "dl", "dt", "dd", "svg", "rect", "line", "text",
        "circle", "i", "ul", "li",
    ]

    @Test func wireTextIsEscapedEverywhere() {
        let overview = StatusPage.overview(
            status: Self.status(), hosts: [Self.summary()], total: 1, query: .init(search: Self.hostile),
            now: Self.now, time: Self.utc)
        let detail = HostDetail(
            summary: Self.summary(), sequence: 1, wakeMAC: "02:53:50:00:00:02", hasPassword: false,
            registeredSecondsAgo: 5,
            records: [.init(name: Self.hostile, type: "TXT", ttl: 4500, unique: true, data: Self.hostile)],
            wakeHistory: [], history: Self.history())
        let host = StatusPage.host(detail: detail, history: Self.history(), status: nil, time: Self.utc)
        for page in [overview, host] {
            #expect(!page.contains("<script>alert"), "raw markup from the data")
            #expect(page.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&amp;&quot;quoted&quot;"))
            #expect(Self.tags(page).subtracting(Self.ourTags).isEmpty, "\(Self.tags(page).subtracting(Self.ourTags))")
            // The only script is our own file.
            #expect(
                page.components(separatedBy: "<script").count == 2 && page.contains("<script src=\"/static/live.js\""))
        }
        #expect(!StatusPage.problem("x", Self.hostile).contains("<script>"))
        #expect(overview.contains("Not held now") == false, "the recent list is not shown under a search")
        let plain = StatusPage.overview(
            status: Self.status(), hosts: [Self.summary()], total: 1, query: .init(), now: Self.now, time: Self.utc)
        #expect(plain.contains("Not held now") && plain.contains("/host/02%3A53%3A50%3A00%3A00%3A09"))
        #expect(!plain.contains("<script>alert"))
    }

    /// What the daemon found at start (a forwarding proxy machine) is shown above everything else, and nothing is
    /// shown when it found nothing.
    @Test func startUpWarningsComeFirstAndOnlyWhenThereAreAny() {
        var status = Self.status()
        status.warnings = ["IPv4 forwarding is on for eth0: set net.ipv4.conf.all.send_redirects=0"]
        let warned = StatusPage.overview(
            status: status, hosts: [], total: 0, query: .init(), now: Self.now, time: Self.utc)
        let notice = warned.firstRange(of: "Needs attention")?.lowerBound
        let cards = warned.firstRange(of: "class=\"cards\"")?.lowerBound
        #expect(notice != nil && cards != nil && notice! < cards!, "\(warned)")
        #expect(warned.contains("<li>IPv4 forwarding is on for eth0: set net.ipv4.conf.all.send_redirects=0</li>"))
        for none in [[], nil] as [[String]?] {
            status.warnings = none
            let quiet = StatusPage.overview(
                status: status, hosts: [], total: 0, query: .init(), now: Self.now, time: Self.utc)
            #expect(!quiet.contains("Needs attention"))
        }
    }

    @Test func theTableShowsAPageAndLinksTheNext() {
        let hosts = (0..<StatusRoute.HostQuery.rowsPerPage).map { Self.summary($0 % 90, name: "host-\($0)") }
        let first = StatusPage.overview(
            status: Self.status(hosts: 250), hosts: hosts, total: 250, query: .init(state: .asleep), now: Self.now,
            time: Self.utc)
        #expect(first.contains("1–100 of 250") && first.contains("href=\"/?state=asleep&amp;page=2\""))
        #expect(!first.contains("previous"))
        let last = StatusPage.overview(
            status: Self.status(hosts: 250), hosts: Array(hosts.prefix(50)), total: 250,
            query: .init(search: "a b&c", page: 3), now: Self.now, time: Self.utc)
        #expect(
            last.contains("201–250 of 250") && last.contains("href=\"/?q=a%20b%26c&amp;page=2\"")
                && !last.contains("next"))
        #expect(first.contains("/host/02%3A53%3A50%3A00%3A00%3A00"))
    }

    @Test func theTimelineMarksTheWakeAndTheDecline() {
        let svg = Timeline.svg(Self.history(), time: Self.utc).text
        #expect(svg.contains("<circle class=\"wake\""))
        #expect(svg.contains("wake: connection from 192.0.2.20 to tcp port 8080 (resolved-first)"))
        #expect(svg.contains("not woken: connection from &lt;b&gt;9&lt;/b&gt; to tcp port 22 (scanner) ×40"))
        #expect(svg.contains("class=\"band asleep\""))
        // A wake ten minutes ago sits near the right end (x from 8 to 992 over the day).
        let x = svg.components(separatedBy: "<circle class=\"wake\" cx=\"").dropFirst().first?.prefix { $0 != "\"" }
        #expect(Double(x ?? "").map { $0 > 980 && $0 < 992 } == true, "cx \(x ?? "none")")
    }

    /// docs/savings.md: the month per host and in all, and thirty days of bars with their figures as titles; names
    /// from the wire stay text there too.
    @Test func theSavingsSectionShowsTheMonthAndThirtyBars() {
        let days = (1...30).map {
            SavingsReport.Day(
                date: "2026-11-\($0 < 10 ? "0" : "")\($0)", asleepSeconds: Double($0) * 3600,
                savedWattHours: Double($0) * 46)
        }
        let report = SavingsReport(
            month: "2026-11", from: "2026-11-01", to: "2026-11-30",
            hosts: [
                .init(
                    mac: "02:53:50:00:00:02", name: Self.hostile,
                    figures: .init(
                        asleepSeconds: 36_000, awakeSeconds: 3_600, savedWattHours: 460, wakes: 2, declinedWakes: 7),
                    power: "50/4", powerIsDefault: true)
            ],
            total: .init(asleepSeconds: 36_000, awakeSeconds: 3_600, savedWattHours: 1_460, wakes: 2, declinedWakes: 7),
            proxy: .init(watts: 3, runningSeconds: 86_400, usedWattHours: 72), netWattHours: 1_388,
            defaultPower: "50/4",
            days: days)
        let page = StatusPage.overview(
            status: Self.status(), hosts: [Self.summary()], total: 1, query: .init(), now: Self.now, time: Self.utc,
            savings: report)
        #expect(!page.contains("<script>alert"))
        #expect(page.contains("What it saves: 2026-11"))
        #expect(page.components(separatedBy: "<rect class=\"bar\"").count - 1 == 30)
        #expect(page.contains("<title>2026-11-30: 1.38 kWh saved, 30.0 h asleep</title>"))
        #expect(page.contains("1.46 kWh") && page.contains("1.39 kWh") && page.contains("460 Wh"))
        #expect(page.contains("50/4 W (default)"))
        let searched = StatusPage.overview(
            status: Self.status(), hosts: [], total: 0, query: .init(search: "x"), now: Self.now, time: Self.utc,
            savings: report)
        #expect(!searched.contains("What it saves"), "a search is about hosts")
    }

    @Test func routes() {
        #expect(
            StatusRoute(method: "GET", uri: "/api/v1/savings?month=2026-11")
                == .api(
                    {
                        var request = ControlRequest(command: .savings)
                        request.month = "2026-11"
                        return request
                    }()))
        #expect(StatusRoute(method: "GET", uri: "/api/v1/savings") == .api(ControlRequest(command: .savings)))
        if case .badRequest = StatusRoute(method: "GET", uri: "/api/v1/savings?month=2026-111") {
        } else {
            Issue.record("month")
        }
        #expect(StatusRoute(method: "GET", uri: "/") == .overview(.init()))
        #expect(StatusRoute(method: "HEAD", uri: "/metrics") == .metrics)
        #expect(
            StatusRoute(method: "GET", uri: "/?state=waking&q=mac%20mini&page=2")
                == .overview(.init(state: .waking, search: "mac mini", page: 2)))
        #expect(StatusRoute(method: "GET", uri: "/host/02%3A53%3A50%3A00%3A00%3A02") == .host("02:53:50:00:00:02"))
        #expect(StatusRoute(method: "GET", uri: "/static/style.css") == .asset(.style))
        #expect(StatusRoute(method: "GET", uri: "/static/../etc/passwd") == .notFound)
        #expect(StatusRoute(method: "GET", uri: "/static/nope.js") == .notFound)
        #expect(StatusRoute(method: "POST", uri: "/") == .methodNotAllowed)
        #expect(StatusRoute(method: "DELETE", uri: "/api/v1/hosts/x") == .methodNotAllowed)
        if case .badRequest = StatusRoute(method: "GET", uri: "/?page=0") {} else { Issue.record("page 0") }
        if case .badRequest = StatusRoute(method: "GET", uri: "/?state=sleepy") {} else { Issue.record("state") }
        if case .badRequest = StatusRoute(method: "GET", uri: "/?q=%zz") {} else { Issue.record("escape") }
        if case .badRequest = StatusRoute(method: "GET", uri: "/host/%ff%fe") {} else { Issue.record("UTF-8") }
        let long = "/?q=" + String(repeating: "a", count: StatusRoute.maximumQueryLength - 2)
        #expect(
            StatusRoute(method: "GET", uri: long)
                == .overview(.init(search: String(repeating: "a", count: StatusRoute.maximumQueryLength - 2))),
            "at the limit")
        if case .badRequest = StatusRoute(method: "GET", uri: long + "aa") {
        } else {
            Issue.record("one past the limit")
        }
        guard case .api(let hosts) = StatusRoute(method: "GET", uri: "/api/v1/hosts?state=asleep&offset=100&limit=50")
        else {
            Issue.record("api hosts")
            return
        }
        #expect(hosts.command == .hosts && hosts.state == .asleep && hosts.offset == 100 && hosts.limit == 50)
        guard case .api(let all) = StatusRoute(method: "GET", uri: "/api/v1/hosts") else {
            Issue.record("api")
            return
        }
        #expect(all.limit == ControlRequest.maximumPageSize, "the API pages by default")
        guard
            case .api(let events) = StatusRoute(method: "GET", uri: "/api/v1/events?host=vm&since=2026-11-25T06:00:00Z")
        else {
            Issue.record("events")
            return
        }
        #expect(events.command == .events && events.target == "vm" && events.since != nil)
        if case .badRequest = StatusRoute(method: "GET", uri: "/api/v1/events?since=yesterday") {
        } else {
            Issue.record("since")
        }
        #expect(StatusRoute(method: "GET", uri: "/api/v2/status") == .notFound)
    }

    @Test func percentEncodingRoundTrips() {
        for text in ["02:53:50:00:00:02", "a b&c=d", "ünïcode", Self.hostile] {
            #expect(HTML.percentDecoded(Substring(HTML.percentEncoded(text))) == text)
        }
        #expect(HTML.percentDecoded("%4") == nil && HTML.percentDecoded("a+b") == "a b")
    }
}

extension StatusPageTests {
    @Test func aPagePastTheEndSaysSoAndLinksTheFirst() {
        let page = StatusPage.overview(
            status: Self.status(hosts: 5), hosts: [], total: 5, query: .init(page: 9), now: Self.now, time: Self.utc)
        #expect(page.contains("Page 9 is past the last of the 5 hosts") && page.contains("href=\"/?page=1\""))
    }

    /// The machines on the link: names and services from the wire stay text, a registered one links to its page,
    /// and the routes reach it (page and API).
    @Test func theMachinesOnTheLinkAreListedAsText() {
        let neighbours = [
            NeighbourSummary(
                interface: "eth0", mac: "02:53:50:00:00:44", addresses: ["192.0.2.44", "fe80::44"],
                names: [Self.hostile],
                services: [Self.hostile + "._smb._tcp.local."], lastHeard: Self.now.addingTimeInterval(-90),
                registered: false),
            NeighbourSummary(
                interface: "eth0", mac: "02:53:50:00:00:02", addresses: ["192.0.2.2"], names: ["sleeper.local."],
                services: [], lastHeard: Self.now, registered: true),
        ]
        let page = StatusPage.neighbours(neighbours, now: Self.now, time: Self.utc)
        #expect(!page.contains("<script>alert") && page.contains("&lt;script&gt;alert"))
        #expect(Self.tags(page).subtracting(Self.ourTags).isEmpty, "\(Self.tags(page).subtracting(Self.ourTags))")
        #expect(page.contains("192.0.2.44, fe80::44") && page.contains("1m 30s ago"))
        #expect(page.contains("<a href=\"/host/02%3A53%3A50%3A00%3A00%3A02\">sleeper.local.</a>"))
        #expect(StatusPage.neighbours([], now: Self.now, time: Self.utc).contains("No machine heard"))
        #expect(StatusRoute(method: "GET", uri: "/neighbours") == .neighbours)
        #expect(StatusRoute(method: "GET", uri: "/api/v1/neighbours") == .api(ControlRequest(command: .neighbours)))
        let overview = StatusPage.overview(
            status: Self.status(), hosts: [Self.summary()], total: 1, query: .init(), now: Self.now, time: Self.utc)
        #expect(overview.contains("<a href=\"/neighbours\">machines on the link</a>"))
    }

    /// Adopted hosts head the machines page, their learned names and services as text, a NIC that answers for a
    /// sleeping one said in words; the API has them too.
    @Test func adoptedHostsAreListedWithWhereTheyStand() {
        let adopted = [
            AdoptedSummary(
                mac: "02:53:50:00:00:44", interface: "eth0", state: "asleep", configured: true,
                addresses: ["192.0.2.44"], names: [Self.hostile], services: [Self.hostile + "._smb._tcp.local."],
                records: 7, refused: 0, lastSignOfLifeSecondsAgo: 30, nicAnswers: true)
        ]
        let neighbours = [
            NeighbourSummary(
                interface: "eth0", mac: "02:53:50:00:00:44", addresses: ["192.0.2.44"], names: [], services: [],
                lastHeard: Self.now, registered: false, adopted: true)
        ]
        let page = StatusPage.neighbours(neighbours, adopted: adopted, now: Self.now, time: Self.utc)
        #expect(!page.contains("<script>alert") && page.contains("&lt;script&gt;alert"))
        #expect(Self.tags(page).subtracting(Self.ourTags).isEmpty, "\(Self.tags(page).subtracting(Self.ourTags))")
        #expect(page.contains("<h2>Adopted hosts</h2>") && page.contains("asleep; its NIC answers for it"))
        #expect(page.contains("<td>adopted</td>"))
        #expect(!StatusPage.neighbours(neighbours, now: Self.now, time: Self.utc).contains("Adopted hosts"))
        #expect(StatusRoute(method: "GET", uri: "/api/v1/adopted") == .api(ControlRequest(command: .adopted)))
    }
}
