import FoundationEssentials
import NIOCore
import NIOHTTP1
import SleepProxyControl
import SleepProxyStatusPage

/// What each route of the HTTP server answers (docs/status-page.md). The engine is asked exactly what
/// `sleepproxyctl` would ask; pages are rendered on the event loop that asked, never on the engine thread.
extension HTTPEndpoint {
    func serve(
        _ route: StatusRoute, uri: String, loop: EventLoop, respond: @escaping @Sendable (HTTPReply) -> Void
    ) {
        let isAPI = uri.hasPrefix("/api/")
        switch route {
        case .metrics:
            respond(
                HTTPReply(
                    status: .ok, contentType: "text/plain; version=0.0.4; charset=utf-8", body: self.scrape()))
        case .asset(let asset):
            respond(
                HTTPReply(
                    status: .ok, contentType: asset.contentType, body: Array(asset.body.utf8),
                    headers: [("Cache-Control", "max-age=3600"), ("X-Content-Type-Options", "nosniff")]))
        case .methodNotAllowed:
            respond(.text(.methodNotAllowed, "the status page is read-only: GET and HEAD only"))
        case .notFound:
            respond(
                isAPI
                    ? Self.json(.notFound, .failure("no such API path; see \(StatusRoute.apiPrefix)/status", .notFound))
                    : .page(.notFound, StatusPage.problem("Not found", "Nothing is served at this address.")))
        case .badRequest(let reason):
            respond(
                isAPI
                    ? Self.json(.badRequest, .failure(reason, .invalid))
                    : .page(.badRequest, StatusPage.problem("Bad request", reason)))
        case .api(let request):
            self.engine.control(request) { response in respond(Self.json(Self.status(of: response), response))
            }
        case .overview(let query):
            self.engine.control(ControlRequest(command: .status)) { [self] statusResponse in
                self.engine.control(query.request) { [self] listing in
                    self.savingsIfShown(query) { savings in
                        loop.execute {
                            guard let status = statusResponse.status, let hosts = listing.hosts else {
                                let message = listing.error ?? statusResponse.error ?? "the daemon gave no answer"
                                respond(.page(.serviceUnavailable, StatusPage.problem("Unavailable", message)))
                                return
                            }
                            let now = Date()
                            respond(
                                .page(
                                    .ok,
                                    StatusPage.overview(
                                        status: status, hosts: hosts, total: listing.total ?? hosts.count, query: query,
                                        now: now, time: LocalTime.current(at: now), savings: savings)))
                        }
                    }
                }
            }
        case .neighbours:
            self.engine.control(ControlRequest(command: .neighbours)) { response in
                loop.execute {
                    guard let neighbours = response.neighbours else {
                        respond(
                            .page(
                                .serviceUnavailable,
                                StatusPage.problem("Unavailable", response.error ?? "the daemon gave no answer")))
                        return
                    }
                    // The adopted hosts come with it (docs/adoption.md); without them the list still shows.
                    self.engine.control(ControlRequest(command: .adopted)) { adoptedResponse in
                        loop.execute {
                            let now = Date()
                            respond(
                                .page(
                                    .ok,
                                    StatusPage.neighbours(
                                        neighbours, adopted: adoptedResponse.adopted ?? [], now: now,
                                        time: LocalTime.current(at: now))))
                        }
                    }
                }
            }
        case .host(let target):
            self.engine.control(ControlRequest(command: .host, target: target)) { [self] response in
                if let detail = response.host {
                    loop.execute {
                        let time = LocalTime.current(at: Date())
                        respond(
                            .page(
                                .ok, StatusPage.host(detail: detail, history: detail.history, status: nil, time: time)))
                    }
                    return
                }
                self.engine.control(ControlRequest(command: .history, target: target)) { past in
                    loop.execute {
                        guard let history = past.history else {
                            respond(
                                .page(
                                    .notFound,
                                    StatusPage.problem(
                                        "Not found", "The proxy holds no host \"\(target)\" and has no history of one.")
                                ))
                            return
                        }
                        let time = LocalTime.current(at: Date())
                        respond(.page(.ok, StatusPage.host(detail: nil, history: history, status: nil, time: time)))
                    }
                }
            }
        }
    }

    /// The month's savings for an overview that shows them (`HostQuery.showsSavings`), nil for one that does not:
    /// asked only then, since it adds up every host's month.
    func savingsIfShown(
        _ query: StatusRoute.HostQuery, _ body: @escaping @Sendable (SavingsReport?) -> Void
    ) {
        guard query.showsSavings else { return body(nil) }
        self.engine.control(ControlRequest(command: .savings)) { body($0.savings) }
    }

    /// 200 for an answer; for a refusal, by its kind: 404 when the host named is not held, 503 when the daemon
    /// is busy or stopping, 400 for a request that is wrong, 500 for one the daemon could not carry out.
    static func status(of response: ControlResponse) -> HTTPResponseStatus {
        guard !response.ok else { return .ok }
        switch response.refusal ?? .failed {
        case .invalid: return .badRequest
        case .notFound: return .notFound
        case .unavailable: return .serviceUnavailable
        case .failed: return .internalServerError
        }
    }

    static func json(_ status: HTTPResponseStatus, _ response: ControlResponse) -> HTTPReply {
        let body = (try? ControlProtocol.frame(response)) ?? Array("{\"ok\":false}\n".utf8)
        return HTTPReply(
            status: status, contentType: "application/json", body: body,
            headers: [("Cache-Control", "no-store"), ("X-Content-Type-Options", "nosniff")])
    }
}
