import CSleepProxyLinux
import FoundationEssentials
import Logging
import NIOCore
import SleepProxyControl
import SleepProxyCore
import SleepProxyWire

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

extension EngineRunner {
    /// What the engine says while the runner is built: start-up steps run before the sockets exist and send
    /// nothing (restored hosts start silent), so their actions are log lines only.
    static func logLines(of actions: [EngineAction], to logger: Logger) {
        for case .log(let level, let message) in actions { logger.log(level: level.loggerLevel, "\(message)") }
    }
}

public struct EngineRunnerError: Error, CustomStringConvertible {
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
