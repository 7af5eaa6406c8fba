import FoundationEssentials
import SleepProxyControl

/// What a request to the daemon's HTTP server asks for (docs/status-page.md). Parsing is pure, so that
/// every path a browser, a dashboard or a hostile client can send is tested without a socket.
public enum StatusRoute: Hashable, Sendable {
    /// Prometheus metrics.
    case metrics
    /// The overview with a page of the hosts table.
    case overview(HostQuery)
    /// One host's page, by MAC or name.
    case host(String)
    /// The machines heard on the link in the last day (docs/neighbours.md).
    case neighbours
    /// The JSON API: the control protocol's responses, as `sleepproxyctl --json` prints them.
    case api(ControlRequest)
    /// A stylesheet, script or icon of the page's own.
    case asset(StatusAssets.Asset)
    case notFound
    /// A method other than GET or HEAD: nothing on the page changes anything.
    case methodNotAllowed
    /// A query the page cannot have sent (a malformed escape, a negative page): answered 400 with the reason.
    case badRequest(String)

    /// The JSON API's version, in its paths; bumped with `ControlProtocol.version`.
    public static let apiPrefix = "/api/v\(ControlProtocol.version)"
    /// Requests longer than this are not ours (the page's own links are short): 414 from NIO's parser limits
    /// aside, a query string is read only up to this length.
    public static let maximumQueryLength = 2048

    /// A page of the hosts table: a filter and where the page starts.
    public struct HostQuery: Hashable, Sendable {
        public var state: PresenceState?
        public var search: String?
        public var page: Int

        /// Rows on one page of the overview: a screenful on a laptop, a short scroll on a phone, and a page that
        /// renders in well under a millisecond however many hosts the proxy holds.
        public static let rowsPerPage = 100

        public init(state: PresenceState? = nil, search: String? = nil, page: Int = 1) {
            self.state = state
            self.search = search
            self.page = page
        }

        /// The month's savings go on the first page of the unfiltered listing only: a search is about hosts.
        public var showsSavings: Bool { self.state == nil && self.search == nil && self.page == 1 }

        public var request: ControlRequest {
            ControlRequest(
                command: .hosts, state: self.state, search: self.search, offset: (self.page - 1) * Self.rowsPerPage,
                limit: Self.rowsPerPage)
        }
    }

    public init(method: String, uri: String) {
        guard method == "GET" || method == "HEAD" else {
            self = .methodNotAllowed
            return
        }
        let parts = uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let path = parts.first.map(String.init) ?? "/"
        let queryText = parts.count > 1 ? parts[1] : ""
        guard queryText.utf8.count <= Self.maximumQueryLength else {
            self = .badRequest("the query is longer than \(Self.maximumQueryLength) bytes")
            return
        }
        guard let query = Self.parseQuery(queryText) else {
            self = .badRequest("the query has a malformed %-escape or is not UTF-8")
            return
        }
        let segments = path.split(separator: "/", omittingEmptySubsequences: true)
        switch segments.first.map(String.init) {
        case nil:
            self = Self.overview(query)
        case "metrics" where segments.count == 1:
            self = .metrics
        case "neighbours" where segments.count == 1:
            self = .neighbours
        case "host" where segments.count == 2:
            guard let target = HTML.percentDecoded(segments[1]), !target.isEmpty else {
                self = .badRequest("the host in the path has a malformed %-escape")
                return
            }
            self = .host(target)
        case "static" where segments.count == 2:
            self = StatusAssets.Asset(rawValue: String(segments[1])).map { .asset($0) } ?? .notFound
        case "api":
            self = Self.api(Array(segments.dropFirst()), query)
        default:
            self = .notFound
        }
    }

    private static func overview(_ query: [String: String]) -> StatusRoute {
        var hosts = HostQuery()
        if let state = query["state"], !state.isEmpty {
            guard let parsed = PresenceState(held: state) else {
                return .badRequest(
                    "state must be one of \(PresenceState.held.map(\.rawValue).joined(separator: ", "))")
            }
            hosts.state = parsed
        }
        if let search = query["q"], !search.isEmpty { hosts.search = search }
        if let page = query["page"] {
            guard let number = Int(page), number >= 1, number <= 1_000_000 else {
                return .badRequest("page must be a number from 1 on")
            }
            hosts.page = number
        }
        return .overview(hosts)
    }

    private static func api(_ segments: [Substring], _ query: [String: String]) -> StatusRoute {
        guard segments.first.map(String.init) == "v\(ControlProtocol.version)" else { return .notFound }
        let rest = segments.dropFirst().map { HTML.percentDecoded($0) }
        guard !rest.contains(where: { $0 == nil }) else {
            return .badRequest("a path segment has a malformed %-escape")
        }
        let path = rest.map { $0! }
        switch (path.first, path.count) {
        case ("status", 1):
            return .api(ControlRequest(command: .status))
        case ("hosts", 1):
            var request = ControlRequest(command: .hosts)
            if let state = query["state"], !state.isEmpty {
                guard let parsed = PresenceState(held: state) else { return .badRequest("unknown state") }
                request.state = parsed
            }
            request.search = query["q"].flatMap { $0.isEmpty ? nil : $0 }
            for (key, keyPath) in [("offset", \ControlRequest.offset), ("limit", \ControlRequest.limit)] {
                guard let text = query[key] else { continue }
                guard let number = Int(text) else { return .badRequest("\(key) must be a number") }
                request[keyPath: keyPath] = number
            }
            // The API pages too: a dashboard polling a 10,000-host proxy gets the first page unless it asks.
            if request.limit == nil { request.limit = ControlRequest.maximumPageSize }
            return .api(request)
        case ("hosts", 2):
            return .api(ControlRequest(command: .host, target: path[1]))
        case ("history", 2):
            return .api(ControlRequest(command: .history, target: path[1]))
        case ("neighbours", 1):
            return .api(ControlRequest(command: .neighbours))
        case ("adopted", 1):
            return .api(ControlRequest(command: .adopted))
        case ("savings", 1):
            var request = ControlRequest(command: .savings)
            if let month = query["month"], !month.isEmpty {
                // Checked here as well as by the daemon: a query the page never sends gets its 400 without a trip.
                guard month.utf8.count == 7 else { return .badRequest("month must be YYYY-MM, such as 2026-11") }
                request.month = month
            }
            return .api(request)
        case ("events", 1):
            var request = ControlRequest(command: .events, target: query["host"].flatMap { $0.isEmpty ? nil : $0 })
            if let since = query["since"] {
                guard let date = try? Date(since, strategy: .iso8601) else {
                    return .badRequest("since must be an ISO 8601 time such as 2026-11-25T06:00:00Z")
                }
                request.since = date
            }
            return .api(request)
        default:
            return .notFound
        }
    }

    /// `a=1&b=two` into a dictionary (the first of repeated keys wins); nil when an escape is malformed.
    static func parseQuery(_ text: Substring) -> [String: String]? {
        var query: [String: String] = [:]
        for pair in text.split(separator: "&") {
            let halves = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard let key = HTML.percentDecoded(halves[0]),
                let value = HTML.percentDecoded(halves.count > 1 ? halves[1] : "")
            else { return nil }
            if query[key] == nil { query[key] = value }
        }
        return query
    }
}
