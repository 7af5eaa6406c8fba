/// The page's stylesheet, script and icon, served from `/static/` so that the Content-Security-Policy can forbid
/// every inline script and style: markup that slipped through would still run nothing.
public enum StatusAssets {
    public enum Asset: String, Hashable, Sendable, CaseIterable {
        case style = "style.css"
        case script = "live.js"
        case icon = "icon.svg"

        public var contentType: String {
            switch self {
            case .style: "text/css; charset=utf-8"
            case .script: "text/javascript; charset=utf-8"
            case .icon: "image/svg+xml"
            }
        }

        public var body: String {
            switch self {
            case .style: StatusAssets.style
            case .script: StatusAssets.script
            case .icon: StatusAssets.icon
            }
        }
    }

    /// The headers every page carries: nothing but our own files, no framing, no sniffing, no referrer.
    public static let securityHeaders: [(String, String)] = [
        (
            "Content-Security-Policy",
            "default-src 'none'; style-src 'self'; script-src 'self'; connect-src 'self'; img-src 'self'; "
                + "form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
        ),
        ("X-Content-Type-Options", "nosniff"),
        ("Referrer-Policy", "no-referrer"),
        ("X-Frame-Options", "DENY"),
    ]

    /// Refreshes the live part of the page every 10 s while it is visible; the page is complete without it.
    static let script = """
        (function () {
          'use strict';
          var busy = false;
          function refresh() {
            if (document.hidden || busy) { return; }
            busy = true;
            fetch(window.location.href, { headers: { 'Accept': 'text/html' }, cache: 'no-store' })
              .then(function (response) {
                if (!response.ok) { throw new Error('HTTP ' + response.status); }
                return response.text();
              })
              .then(function (text) {
                var fresh = new DOMParser().parseFromString(text, 'text/html').getElementById('live');
                var current = document.getElementById('live');
                if (fresh && current) { current.replaceWith(document.importNode(fresh, true)); }
                document.body.classList.remove('stale');
              })
              .catch(function () { document.body.classList.add('stale'); })
              .then(function () { busy = false; });
          }
          window.setInterval(refresh, 10000);
          document.addEventListener('visibilitychange', refresh);
        })();

        """

    static let icon = """
        <svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><circle cx="8" cy="8" r="7" fill="#3b5bdb"/>\
        <path d="M10.5 3.5a5 5 0 1 0 2 6.5a4 4 0 1 1-2-6.5z" fill="#fff"/></svg>

        """

    static let style = """
        :root { --fg: #1d2330; --muted: #5c6577; --line: #dde1e8; --bg: #f6f7f9; --card: #fff;
          --asleep: #3b5bdb; --awake: #2f9e44; --waking: #f08c00; --starting: #adb5bd; --standby: #9775fa;
          --handed-back: #8ce99a; --gone: #e9ecef; --unknown: #f1f3f5; --declined: #c92a2a; }
        @media (prefers-color-scheme: dark) {
          :root { --fg: #e9ecef; --muted: #adb5bd; --line: #343a40; --bg: #16181d; --card: #1f2229;
            --gone: #2b2f36; --unknown: #23262d; --handed-back: #2b8a3e; }
        }
        * { box-sizing: border-box; }
        body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg);
          background: var(--bg); }
        header, main, footer, nav.filter { max-width: 1200px; margin: 0 auto; padding: 0 16px; }
        header { display: flex; flex-wrap: wrap; align-items: baseline; gap: 4px 16px; padding-top: 16px; }
        header h1 { font-size: 1.35em; margin: 0; }
        header a { color: inherit; text-decoration: none; }
        .muted, footer { color: var(--muted); }
        footer { font-size: 0.85em; padding-bottom: 24px; }
        a { color: var(--asleep); }
        h2 { font-size: 1.1em; margin: 24px 0 8px; }
        .warnings { background: var(--card); border: 1px solid var(--line); border-left: 4px solid #c77700;
          border-radius: 8px; padding: 2px 12px; margin-top: 16px; }
        .warnings h2 { margin: 8px 0 4px; }
        .cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(170px, 1fr)); gap: 10px;
          margin-top: 16px; }
        .card { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 10px 12px; }
        a.card { color: inherit; text-decoration: none; } a.card:hover { border-color: var(--asleep); }
        .card b { display: block; font-size: 1.5em; }
        .card span { color: var(--muted); font-size: 0.9em; }
        .table { overflow-x: auto; background: var(--card); border: 1px solid var(--line); border-radius: 8px; }
        table { border-collapse: collapse; width: 100%; }
        th, td { text-align: left; padding: 6px 10px; border-bottom: 1px solid var(--line); vertical-align: top; }
        th { font-weight: 600; color: var(--muted); font-size: 0.85em; white-space: nowrap; }
        tr:last-child td { border-bottom: 0; }
        td.wrap { word-break: break-all; }
        code, .mono { font-family: ui-monospace, "SFMono-Regular", Menlo, monospace; font-size: 0.92em; }
        .badge { display: inline-block; padding: 0 7px; border-radius: 10px; font-size: 0.82em; color: #fff;
          background: var(--starting); white-space: nowrap; }
        .badge.asleep, .badge.answering { background: var(--asleep); }
        .badge.awake, .badge.owner-seen { background: var(--awake); }
        .badge.waking { background: var(--waking); }
        .badge.standby { background: var(--standby); }
        .badge.handed-back { background: var(--handed-back); color: #0b3d17; }
        .badge.gone, .badge.stopped { background: var(--gone); color: var(--fg); }
        .addr { display: block; white-space: nowrap; }
        nav.filter form { display: flex; flex-wrap: wrap; gap: 8px; align-items: center; margin: 24px 0 8px; }
        nav.filter input, nav.filter select, nav.filter button { font: inherit; padding: 4px 8px; }
        .pager { display: flex; gap: 16px; margin: 8px 0; }
        svg.timeline { width: 100%; height: auto; display: block; background: var(--card);
          border: 1px solid var(--line); border-radius: 8px; }
        svg .band { stroke: none; }
        svg .asleep { fill: var(--asleep); } svg .awake { fill: var(--awake); }
        svg .waking { fill: var(--waking); } svg .starting { fill: var(--starting); }
        svg .standby { fill: var(--standby); } svg .handed-back { fill: var(--handed-back); }
        svg .gone { fill: var(--gone); } svg .unknown { fill: var(--unknown); }
        svg .tick { stroke: var(--line); } svg text { fill: var(--muted); font-size: 11px; }
        svg .wake { fill: var(--waking); stroke: var(--fg); stroke-width: 1; }
        svg .declined { fill: var(--declined); }
        svg.savings-chart { width: 100%; height: auto; display: block; background: var(--card);
          border: 1px solid var(--line); border-radius: 8px; margin: 8px 0; }
        svg .bar { fill: var(--asleep); } svg .axis { stroke: var(--line); }
        td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
        .legend { display: flex; flex-wrap: wrap; gap: 6px 14px; font-size: 0.85em; color: var(--muted);
          margin: 6px 0; }
        .legend i { display: inline-block; width: 12px; height: 12px; border-radius: 2px; margin-right: 4px;
          vertical-align: -1px; background: var(--starting); }
        .legend i.asleep { background: var(--asleep); } .legend i.awake { background: var(--awake); }
        .legend i.waking { background: var(--waking); } .legend i.standby { background: var(--standby); }
        .legend i.handed-back { background: var(--handed-back); } .legend i.gone { background: var(--gone); }
        .legend i.wake { background: var(--waking); border-radius: 6px; }
        .legend i.declined { background: var(--declined); width: 3px; }
        dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 4px 16px; margin: 16px 0; }
        dl.facts dt { color: var(--muted); } dl.facts dd { margin: 0; word-break: break-word; }
        body.stale main { opacity: 0.6; }
        @media (max-width: 640px) {
          body { font-size: 14px; }
          th, td { padding: 5px 6px; }
          .hide-narrow { display: none; }
        }

        """
}
