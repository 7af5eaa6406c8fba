import Foundation
import SleepProxyControl
import SleepProxyTestSupport
import Testing

/// The conventions all three executables keep: one version, common options before or after the
/// command, help that lists only what applies, exit statuses documented. No root needed.
@Suite("Command-line conventions", .lab())
struct CommandLineTests {
    static func tool(_ name: String) -> String { Daemon.sibling(name) }

    @Test func everyExecutablePrintsThePackagesVersionAndDocumentsItsExitStatus() throws {
        for name in ["sleepproxyd", "sleepproxyctl", "sleepproxy-client"] {
            let version = try Command.run([Self.tool(name), "--version"])
            #expect(version.succeeded && version.stdout.hasPrefix(SleepProxyVersion.current), "\(name): \(version)")
            let help = try Command.run([Self.tool(name), "--help"])
            #expect(help.stdout.contains("Exit status:"), "\(name) --help: \(help)")
        }
    }

    @Test func commonOptionsWorkBeforeAndAfterTheCommand() throws {
        let socket = "/nonexistent/sleepproxy-\(getpid()).sock"
        for arguments in [
            ["--socket", socket, "hosts"], ["hosts", "--socket", socket], ["--json", "--socket", socket, "status"],
        ] {
            let result = try Command.run([Self.tool("sleepproxyctl")] + arguments)
            #expect(result.status == 1 && result.stderr.contains(socket), "\(arguments): \(result)")
        }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("sleepproxy-client-\(getpid())")
            .path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        for arguments in [["--state-directory", directory, "status"], ["status", "--state-directory", directory]] {
            let result = try Command.run([Self.tool("sleepproxy-client")] + arguments)
            #expect(result.succeeded && result.stdout.contains("no registration yet"), "\(arguments): \(result)")
        }
    }

    @Test func subcommandHelpListsOnlyWhatApplies() throws {
        let status = try Command.run([Self.tool("sleepproxy-client"), "status", "--help"])
        #expect(status.stdout.contains("--state-directory"))
        for irrelevant in ["--lease", "--service", "--password", "--prefer", "--interface"] {
            #expect(!status.stdout.contains(irrelevant), "status --help lists \(irrelevant): \(status.stdout)")
        }
        let register = try Command.run([Self.tool("sleepproxy-client"), "register", "--help"])
        for option in ["--lease", "--service", "--allow-empty", "--interface", "--prefer"] {
            #expect(register.stdout.contains(option), "register --help lacks \(option)")
        }
        let bad = try Command.run([Self.tool("sleepproxy-client"), "register", "--lease", "0"])
        #expect(bad.status == 64 && bad.stderr.contains("--lease must be positive"), "\(bad)")
    }
}
