import SleepProxyWire

/// A registration's outcome in the log: each accepted registration on a line of its own (at notice, when
/// `logsRegistrations`), and what the network sends in bulk, refusals and malformed registrations, within a
/// budget (`LineBudget`: twenty a kind a minute, then counted), so that a storm or a flood is never a line a packet.
extension ProxyEngine {
    mutating func outcomeLines(
        _ outcome: RegistrationOutcome, from address: IPAddress, port: UInt16, interface: String, now: Timestamp
    ) -> [EngineAction] {
        let source: String
        switch address {
        case .v4: source = "\(address):\(port)"
        case .v6: source = "[\(address)]:\(port)"
        }
        var lines: [EngineAction] = []
        func admitted(_ kind: String, _ what: String) -> Bool {
            let verdict = self.lineBudget.admit(kind, now: now)
            if verdict.leftOut > 0 {
                lines.append(
                    .log(
                        .warning,
                        "\(verdict.leftOut) more registrations \(what) in the previous minute or more were not logged one by one"
                    ))
            }
            if verdict.last {
                lines.append(
                    .log(
                        .warning,
                        "registrations \(what): \(LineBudget.linesPerWindow) lines this minute; more are counted (sleepproxyctl status, metrics), not logged"
                    ))
            }
            return verdict.allowed && !verdict.last
        }
        switch outcome {
        case .accepted(let acceptance):
            // Deriving the summary costs as much as the registration itself: only when the line is wanted.
            guard self.logsRegistrations else { return [] }
            let summary = acceptance.registration.summary
            let services = summary.services.map {
                "\($0.type.labelStrings.prefix(2).joined(separator: ".")):\($0.port)"
            }.joined(separator: ", ")
            lines.append(
                .log(
                    .notice,
                    "registered \(summary.hostName?.description ?? "?") (\(acceptance.registration.key)) from \(source) on \(interface): \(acceptance.registration.records.count) records, lease \(acceptance.grantedLease) s, addresses \(summary.addresses.map(\.description).joined(separator: " ")), services [\(services)]\(acceptance.startedNewEpoch ? "" : " (update)")"
                ))
        case .malformed(let problem, _):
            guard admitted("malformed \(problem.rawValue)", "malformed (\(problem.rawValue))") else { return lines }
            lines.append(
                .log(
                    .warning,
                    "registration from \(source) on \(interface) malformed (\(problem.rawValue)); answered FORMERR"))
        case .refused(let reason, let reply):
            guard admitted("refused \(reason.rawValue)", "refused (\(reason.rawValue))") else { return lines }
            lines.append(
                .log(
                    .warning,
                    "registration from \(source) on \(interface) refused (\(reason.rawValue)); \(reply == nil ? "no reply sent" : "answered REFUSED")"
                ))
        case .notImplemented(let opcode, _):
            lines.append(
                .log(.info, "\(opcode) from \(source) on \(interface) on the registration port; answered NOTIMP"))
        case .ignored(let reason):
            lines.append(.log(.debug, "ignored a datagram from \(source) on \(interface) (\(reason.rawValue))"))
        }
        return lines
    }
}
