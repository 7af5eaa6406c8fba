import CSleepProxyLinux
import FoundationEssentials
import Logging
import NIOCore
import SleepProxyControl
import SleepProxyCore
import SleepProxyWire

extension RegistrationEngine {
    func log(_ outcome: RegistrationOutcome, source socketAddress: SocketAddress, interface: String, now: Timestamp) {
        let source = socketAddress.logDescription
        // What the network sends us in bulk is logged within a budget (`LineBudget`): refusals and malformed
        // registrations, the lines a storm or a flood repeats.
        func admitted(_ kind: String, _ what: String) -> Bool {
            let verdict = self.lineBudget.admit(kind, now: now)
            if verdict.leftOut > 0 {
                self.logger.warning(
                    "\(verdict.leftOut) more registrations \(what) in the previous minute or more were not logged one by one"
                )
            }
            if verdict.last {
                self.logger.warning(
                    "registrations \(what): \(LineBudget.linesPerWindow) lines this minute; more are counted (sleepproxyctl status, metrics), not logged"
                )
            }
            return verdict.allowed && !verdict.last
        }
        switch outcome {
        case .accepted(let acceptance):
            // Deriving the summary costs as much as the registration itself: only when the line is logged.
            guard self.logger.logLevel <= .notice else { return }
            let summary = acceptance.registration.summary
            let services = summary.services.map {
                "\($0.type.labelStrings.prefix(2).joined(separator: ".")):\($0.port)"
            }.joined(separator: ", ")
            self.logger.notice(
                "registered \(summary.hostName?.description ?? "?") (\(acceptance.registration.key)) from \(source) on \(interface): \(acceptance.registration.records.count) records, lease \(acceptance.grantedLease) s, addresses \(summary.addresses.map(\.description).joined(separator: " ")), services [\(services)]\(acceptance.startedNewEpoch ? "" : " (update)")"
            )
        case .malformed(let problem, _):
            guard admitted("malformed \(problem.rawValue)", "malformed (\(problem.rawValue))") else { return }
            self.logger.warning(
                "registration from \(source) on \(interface) malformed (\(problem.rawValue)); answered FORMERR")
        case .refused(let reason, let reply):
            guard admitted("refused \(reason.rawValue)", "refused (\(reason.rawValue))") else { return }
            self.logger.warning(
                "registration from \(source) on \(interface) refused (\(reason.rawValue)); \(reply == nil ? "no reply sent" : "answered REFUSED")"
            )
        case .notImplemented(let opcode, _):
            self.logger.info("\(opcode) from \(source) on \(interface) on the registration port; answered NOTIMP")
        case .ignored(let reason):
            self.logger.debug("ignored a datagram from \(source) on \(interface) (\(reason.rawValue))")
        }
    }
}

extension EngineLogLevel {
    var loggerLevel: Logger.Level {
        switch self {
        case .debug: .debug
        case .info: .info
        case .notice: .notice
        case .warning: .warning
        case .error: .error
        }
    }
}

public struct RegistrationEngineError: Error, CustomStringConvertible {
    public var description: String
}

extension SocketAddress {
    /// "192.0.2.2:5353" or "[fe80::2%eth0]:5353" for log lines.
    var logDescription: String {
        guard let ip = IPAddress(self), let port = self.port else { return "\(self)" }
        switch ip {
        case .v4: return "\(ip):\(port)"
        case .v6:
            if case .v6(let v6) = self, v6.address.sin6_scope_id != 0 {
                return "[\(ip)%\(v6.address.sin6_scope_id)]:\(port)"
            }
            return "[\(ip)]:\(port)"
        }
    }
}
