import ArgumentParser
import FoundationEssentials
import Glibc
import Logging
import NIOConcurrencyHelpers
import ServiceLifecycle
import SleepProxyControl
import SleepProxyCore
import SleepProxyIO
import SleepProxySystem
import UnixSignals

/// The log level, changeable while running (SIGHUP).
final class LogLevelBox: @unchecked Sendable {
    // @unchecked: `value` is guarded by `lock`.
    private let lock = NIOLock()
    private var value: Logger.Level
    init(_ level: Logger.Level) { self.value = level }
    var level: Logger.Level {
        get { self.lock.withLock { self.value } }
        set { self.lock.withLock { self.value = newValue } }
    }
}

/// swift-log's stream handler with its level read from a shared box, so a reload reaches every logger.
struct ReloadableLogHandler: LogHandler {
    var base: StreamLogHandler
    let level: LogLevelBox

    init(base: StreamLogHandler, level: LogLevelBox) {
        self.base = base
        self.level = level
    }

    var logLevel: Logger.Level {
        get { self.level.level }
        set { self.level.level = newValue }
    }

    var metadata: Logger.Metadata {
        get { self.base.metadata }
        set { self.base.metadata = newValue }
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { self.base[metadataKey: key] }
        set { self.base[metadataKey: key] = newValue }
    }

    func log(event: LogEvent) {
        self.base.log(event: event)
    }
}

/// SIGHUP as a service: re-reads the configuration file. The log level, wake rules, expiry action and refusal
/// reply change at once; settings that need new sockets or a new state directory are reported as needing a
/// restart. A bad edit keeps the running configuration.
struct ReloadService: Service {
    let hangups: UnixSignalsSequence
    let config: String?
    let original: SleepProxyDaemon
    let engine: EngineRunner
    let levelBox: LogLevelBox
    let logger: Logger

    func run() async throws {
        for await _ in self.hangups.cancelOnGracefulShutdown() {
            guard let path = self.config else {
                self.logger.notice("SIGHUP: no configuration file in use; nothing to reload")
                self.engine.noteReload(succeeded: false, message: "no configuration file in use; nothing to reload")
                continue
            }
            do {
                let arguments = try SleepProxyDaemon.configArguments(path: path) + ["--config", path]
                guard let fresh = try SleepProxyDaemon.parseAsRoot(arguments) as? SleepProxyDaemon else { continue }
                try fresh.validate()
                self.levelBox.level = fresh.logLevel
                self.engine.reconfigure(
                    takeover: try fresh.takeoverConfiguration(),
                    expiryAction: fresh.expiryAction,
                    refusalReply: fresh.refusalReply, power: try fresh.powerFigures())
                self.engine.adopt(try fresh.adoptedMACs())
                let restartOnly = fresh.restartSettings != self.original.restartSettings
                self.engine.noteReload(
                    succeeded: true,
                    message: "\(path)\(restartOnly ? "; some settings change only on restart" : "")")
                self.logger.notice(
                    "SIGHUP: reloaded \(path)\(restartOnly ? "; interfaces, ports, state directory, limits, the advertised name and the mqtt settings change only on restart" : "")"
                )
            } catch {
                let reason = SleepProxyDaemon.message(for: error)
                self.engine.noteReload(succeeded: false, message: reason)
                self.logger.error("SIGHUP: \(reason); keeping the running configuration")
            }
        }
    }
}

// The option values are the enums themselves: ArgumentParser checks them and lists them in --help.
