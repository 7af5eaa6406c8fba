import Foundation

/// An avahi-daemon running in a lab host, with a D-Bus system bus and a `/run` of its own.
///
/// Both live in a private mount namespace (a tmpfs over `/run`), so they never touch the machine's own avahi or
/// D-Bus. The daemon is tracked by its PID (nsenter, setpriv and unshare all exec, so the PID we start is
/// avahi-daemon's), and D-Bus is started with a parent-death signal, so it ends with the daemon. Clients such as
/// avahi-browse must run in the same mount and network namespaces: `run(_:)` does that.
public final class AvahiDaemon: @unchecked Sendable {
    public let host: LabHost
    public let process: ManagedProcess
    private var publishers: [ManagedProcess] = []

    /// `staticHosts` (address, name) are published from a private copy of /etc/avahi/hosts.
    /// `rateLimited: false` removes the packet rate limit the lab otherwise sets (for load tests).
    public init(
        in host: LabHost, hostName: String, directory: URL, staticHosts: [(String, String)] = [],
        rateLimited: Bool = true
    ) throws {
        self.host = host
        let hostsFile = directory.appendingPathComponent("avahi-hosts-\(host.name)")
        try staticHosts.map { "\($0.0) \($0.1)\n" }.joined().write(to: hostsFile, atomically: true, encoding: .utf8)
        let config = directory.appendingPathComponent("avahi-\(host.name).conf")
        try """
        [server]
        host-name=\(hostName)
        domain-name=local
        use-ipv4=yes
        use-ipv6=yes
        allow-interfaces=\(host.interface)
        enable-dbus=yes
        \(rateLimited ? "ratelimit-interval-usec=1000000\nratelimit-burst=1000" : "")
        [wide-area]
        enable-wide-area=no
        [publish]
        publish-hinfo=no
        publish-workstation=no
        """.write(to: config, atomically: true, encoding: .utf8)
        // D-Bus with a config of our own: the system one switches to the messagebus user, and a change of
        // credentials clears the parent-death signal, so a crashed test would leave it running.
        let busConfig = directory.appendingPathComponent("dbus-\(host.name).conf")
        try """
        <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
         "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
        <busconfig>
          <type>system</type>
          <listen>unix:path=/run/dbus/system_bus_socket</listen>
          <auth>EXTERNAL</auth>
          <policy context="default">
            <allow user="*"/>
            <allow own="*"/>
            <allow send_type="method_call"/>
            <allow send_type="signal"/>
            <allow send_type="method_return"/>
            <allow send_type="error"/>
            <allow receive_type="method_call"/>
            <allow receive_type="signal"/>
            <allow receive_type="method_return"/>
            <allow receive_type="error"/>
          </policy>
        </busconfig>
        """.write(to: busConfig, atomically: true, encoding: .utf8)
        let script = """
            set -e
            mount -t tmpfs sleepproxy-lab /run
            if [ -s \(hostsFile.path) ]; then mount --bind \(hostsFile.path) /etc/avahi/hosts; fi
            mkdir -p /run/dbus /run/avahi-daemon
            setpriv --pdeathsig KILL -- dbus-daemon --config-file=\(busConfig.path) --nofork --nopidfile &
            i=0; while [ ! -S /run/dbus/system_bus_socket ] && [ $i -lt 200 ]; do sleep 0.02; i=$((i+1)); done
            exec avahi-daemon -f \(config.path) --no-drop-root --no-chroot --no-rlimits --no-proc-title
            """
        self.process = try host.spawn(
            ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script], logName: "avahi")
        guard self.process.waitForOutput("Server startup complete", timeout: 15) else {
            self.process.stop(signal: SIGKILL)
            throw CommandError("avahi-daemon did not start: \(self.process.output)")
        }
    }

    /// Runs a client in the daemon's mount and network namespaces.
    @discardableResult
    public func run(_ arguments: [String], timeout: Duration = .seconds(20)) throws -> CommandResult {
        try Command.run(
            ["nsenter", "-t", "\(self.process.pid)", "-m", "-n", "--", "setpriv", "--pdeathsig", "KILL", "--"]
                + arguments, timeout: timeout)
    }

    /// Publishes a service through this daemon (avahi-publish keeps it registered while it runs).
    public func publish(name: String, type: String, port: Int, txt: [String] = [], logName: String) throws {
        let publisher = try self.host.spawn(
            [
                "nsenter", "-t", "\(self.process.pid)", "-m", "--", "setpriv", "--pdeathsig", "KILL", "--",
                "avahi-publish", "-s", name, type, "\(port)",
            ] + txt, logName: logName)
        guard publisher.waitForOutput("Established under name", timeout: 15) else {
            throw CommandError("avahi-publish did not register: \(publisher.output)")
        }
        self.publishers.append(publisher)
    }

    public func stop() {
        for publisher in self.publishers { publisher.stop() }
        self.process.stop()
    }
}
