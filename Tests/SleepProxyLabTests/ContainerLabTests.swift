import Foundation
import SleepProxyControl
import SleepProxyTestSupport
import SleepProxyWire
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The image under test and the tool that runs it.
enum ContainerImage {
    static let podman = "/usr/bin/podman"
    static var name: String? { ProcessInfo.processInfo.environment["SLEEPPROXY_TEST_IMAGE"] }
}

/// The container image as a NAS user runs it: podman, in the proxy's lab namespace (`--network ns:`, never the
/// host's network), with NET_RAW and NET_ADMIN and a named volume for the state. `scripts/test-image` builds the
/// image and runs this suite with `SLEEPPROXY_TEST_IMAGE` set; without it the suite is skipped.
@Suite("The container image in the lab", .lab(.namespaces, .containerImage, serialized: true))
final class ContainerLabTests: ThreeHostSuite {
    static let podman = ContainerImage.podman
    static var image: String? { ContainerImage.name }

    let setup: ThreeHostLab
    var client: LabHost { self.setup.third }
    /// Bound over the container's /run/sleep-proxy, so the control socket can be reached from outside too.
    let runDirectory: URL
    let name: String
    let volume: String

    init() throws {
        let setup = try ThreeHostLab(thirdName: "client")
        self.setup = setup
        self.runDirectory = setup.lab.directory.appendingPathComponent("run")
        try FileManager.default.createDirectory(at: self.runDirectory, withIntermediateDirectories: true)
        // The daemon runs as the image's unprivileged user, whose uid this side does not know.
        chmod(self.runDirectory.path, 0o1777)
        let suffix = "\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        self.name = "sleepproxy-lab-\(suffix)"
        self.volume = "sleepproxy-lab-state-\(suffix)"
    }

    deinit {
        _ = try? Command.run([Self.podman, "rm", "--force", "--time", "0", self.name], timeout: .seconds(60))
        _ = try? Command.run([Self.podman, "volume", "rm", "--force", self.volume], timeout: .seconds(30))
        // The lab itself closes when `setup` goes, after this.
    }

    /// Starts podman with nothing of this process but its output files: Foundation's Process learns that a child
    /// ended when a socket it passed down closes, and `run --detach` or `restart` hands every open descriptor to
    /// conmon, which stays for as long as the container runs (so the call would seem never to return).
    static let detachedExec = """
        import os, sys
        os.closerange(3, 1 << 16)
        for fd, path, flags in ((0, '/dev/null', os.O_RDONLY), (1, sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (2, sys.argv[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
            os.dup2(os.open(path, flags, 0o644), fd)
        os.execv(sys.argv[3], sys.argv[3:])
        """

    @discardableResult
    func podman(_ arguments: [String], timeout: Duration = .seconds(60)) throws -> CommandResult {
        let out = self.lab.directory.appendingPathComponent("podman.out").path
        let err = self.lab.directory.appendingPathComponent("podman.err").path
        var result = try Command.run(
            ["/usr/bin/python3", "-c", Self.detachedExec, out, err, Self.podman] + arguments, timeout: timeout)
        result.stdout = (try? String(contentsOfFile: out, encoding: .utf8)) ?? ""
        result.stderr = (try? String(contentsOfFile: err, encoding: .utf8)) ?? ""
        return result
    }

    /// What this test machine needs and a NAS does not: its cgroups are a v1/v2 hybrid that crun refuses (runc
    /// handles it), and root here lacks CAP_SYS_RESOURCE, so podman's default rootful limits (a million open
    /// files) cannot be set; these are the limits of the lab's other processes, and the daemon needs far fewer.
    static let sandbox = ["--runtime", "runc", "--ulimit", "nofile=4096:4096", "--ulimit", "nproc=4096:4096"]

    /// `podman run` in the proxy's namespace, detached; `capabilities` as a NAS user's compose file grants them.
    func runContainer(capabilities: [String] = ["--cap-add", "NET_RAW", "--cap-add", "NET_ADMIN"], detach: Bool = true)
        throws -> CommandResult
    {
        try self.podman(
            ["run"] + (detach ? ["--detach", "--name", self.name] : ["--rm"]) + Self.sandbox
                + ["--network", "ns:/proc/\(self.proxy.namespace.pid)/ns/net"] + capabilities
                + [
                    "--volume", "\(self.volume):/var/lib/sleep-proxy", "--volume",
                    "\(self.runDirectory.path):/run/sleep-proxy", Self.image!, "--interface", "eth0",
                    "--log-level", "info",
                ])
    }

    /// Ready when `sleepproxyctl status` answers inside the container (bounded).
    func waitUntilReady(timeout: TimeInterval = 30) throws -> Bool {
        try waitUntil(timeout: timeout, interval: 0.25) {
            try self.podman(["exec", self.name, "sleepproxyctl", "status"], timeout: .seconds(15)).succeeded
        }
    }

    func logs() -> String {
        guard let result = try? self.podman(["logs", self.name]) else { return "(no logs)" }
        return result.stdout + result.stderr
    }

    func register() throws {
        let message = SampleRegistration.message(
            id: 0x5A01, mac: ThreeHostLab.sleeperMAC, host: "sleeper.local.",
            addresses: [IPAddress("192.0.2.2")!, IPAddress("2001:db8::2")!], services: [("Web._http._tcp", 8080)])
        let replies = try UDPClient.exchange(
            in: self.sleeper.host, to: "192.0.2.1", port: 5599, from: "192.0.2.2",
            payloads: [message.encoded(options: .appleUpdate)])
        #expect(replies.first??.isEmpty == false, "the containerised proxy did not answer the registration")
    }

    /// A legacy unicast SRV query from the client, answered by the proxy for the sleeping host.
    func clientResolves() throws -> Bool {
        try waitUntil(timeout: 10, interval: 0.25) {
            let answers = try Queriers.dig(
                in: self.client, server: "192.0.2.1", name: "Web._http._tcp.local.", type: "SRV")
            return answers.contains(where: { $0.type == "SRV" && $0.data.contains("8080 sleeper.local.") })
        }
    }

    @Test func theImageServesAWakesAndKeepsItsRegistrationAcrossARestart() throws {
        let started = try self.runContainer()
        try #require(started.succeeded, "podman run failed: \(started)")
        try #require(try self.waitUntilReady(), "the container never answered on its control socket: \(self.logs())")

        // It runs as the image's unprivileged user, not as root.
        let user = try self.podman(["exec", self.name, "sh", "-c", "id -un; grep ^Cap /proc/1/status"])
        #expect(user.stdout.hasPrefix("sleep-proxy\n"), "\(user)")
        let uid = try self.podman(["top", self.name, "user"]).stdout
        #expect(uid.contains("sleep-proxy") && !uid.contains("root"), "the daemon runs as: \(uid)")

        try self.register()
        #expect(
            Daemon.waitForHost(
                "sleeper.local.", in: .starting, proxy: self.proxy, stateDirectory: self.runDirectory, timeout: 10)
                == .starting)
        try self.sleeper.sleep()
        #expect(
            Daemon.waitForHost(
                "sleeper.local.", in: .asleep, proxy: self.proxy, stateDirectory: self.runDirectory, timeout: 20)
                == .asleep, "\(self.logs())")
        let hosts = try self.podman(["exec", self.name, "sleepproxyctl", "hosts"])
        #expect(hosts.succeeded && hosts.stdout.contains("sleeper.local."), "\(hosts)")
        #expect(try self.clientResolves(), "the client could not resolve the sleeping host's service")

        // A connection from the client wakes the host; connect() completes once it is up.
        let connection = try self.client.spawn(
            [
                "/usr/bin/python3", "-c",
                "import socket; s=socket.create_connection(('192.0.2.2', 8080), timeout=8); print('connected', s.recv(64).decode().strip(), flush=True)",
            ], logName: "connect")
        defer { connection.stop() }
        #expect(!self.sleeper.waitForMagicPackets(1, timeout: 8).isEmpty, "no magic packet: \(self.logs())")
        usleep(Scenario.resumeAfterMagicPacket)
        try self.sleeper.wake()
        #expect(connection.waitForOutput("connected awake", timeout: 8), "\(connection.output)")

        // Asleep again, then `podman restart`: the registration comes back from the volume.
        try self.register()
        try self.sleeper.sleep()
        #expect(
            Daemon.waitForHost(
                "sleeper.local.", in: .asleep, proxy: self.proxy, stateDirectory: self.runDirectory, timeout: 20)
                == .asleep)
        let restarted = try self.podman(["restart", "--time", "15", self.name], timeout: .seconds(90))
        #expect(restarted.succeeded, "\(restarted)")
        try #require(try self.waitUntilReady(), "the container did not come back: \(self.logs())")
        let after = try self.podman(["exec", self.name, "sleepproxyctl", "hosts"])
        #expect(after.stdout.contains("sleeper.local."), "the registration did not survive the restart: \(after)")
        #expect(try self.clientResolves(), "after the restart the proxy no longer answers for the sleeping host")
        let health = try self.podman(["healthcheck", "run", self.name])
        #expect(health.succeeded, "the health check failed: \(health)")
    }

    @Test func withoutNetRawTheContainerRefusesToStartWithASentence() throws {
        let refused = try self.runContainer(capabilities: ["--cap-drop", "NET_RAW"], detach: false)
        #expect(!refused.succeeded, "\(refused)")
        #expect(refused.stderr.contains("CAP_NET_RAW") && refused.stderr.contains("--no-takeover"), "\(refused)")
    }
}
