import Foundation

/// Real servers a sleeping PC or NAS runs, in a lab host's namespace: Samba's smbd (an SMB share, as Windows and
/// every NAS serve) and Python's HTTP server (a NAS's or media server's web page). Each is started by PID, waited
/// for by connecting to its port, and stopped by PID.
public final class FileServers: @unchecked Sendable {
    // @unchecked: started and stopped on the test's thread only.
    public let smbd: ManagedProcess
    public let http: ManagedProcess
    public static let httpPort = 80

    /// Serves `share` (one file, `hello.txt`) over SMB as a guest share and the same directory over HTTP.
    public init(in host: LabHost, directory: URL) throws {
        let root = directory.appendingPathComponent("samba-\(host.name)")
        let share = root.appendingPathComponent("share")
        let paths = try Self.privateSambaPaths(under: root)
        try FileManager.default.createDirectory(at: share, withIntermediateDirectories: true)
        try "awake\n".write(to: share.appendingPathComponent("hello.txt"), atomically: true, encoding: .utf8)
        let config = root.appendingPathComponent("smb.conf")
        // NetBIOS off (nmbd is not run); every path private to the lab, so that nothing of the machine's own
        // Samba is read or written.
        try """
        [global]
        workgroup = LAB
        netbios name = \(host.name.uppercased())
        server role = standalone server
        map to guest = Bad User
        disable netbios = yes
        smb ports = 445
        \(paths)
        load printers = no
        printing = bsd
        printcap name = /dev/null
        disable spoolss = yes
        [share]
        path = \(share.path)
        guest ok = yes
        read only = yes
        """.write(to: config, atomically: true, encoding: .utf8)
        self.smbd = try host.spawn(
            ["/usr/sbin/smbd", "--foreground", "--no-process-group", "--debug-stdout", "-s", config.path],
            logName: "smbd")
        self.http = try host.spawn(
            ["/usr/bin/python3", "-m", "http.server", "\(Self.httpPort)", "--bind", "::", "--directory", share.path],
            logName: "http")
        for port in [445, Self.httpPort] {
            let up = try waitUntil(timeout: 20, interval: 0.2) {
                try host.run(
                    [
                        "/usr/bin/python3", "-c",
                        "import socket; socket.create_connection(('127.0.0.1', \(port)), 1).close()",
                    ], timeout: .seconds(5)
                ).succeeded
            }
            guard up else {
                self.stop()
                throw CommandError("port \(port) did not open: smbd \(self.smbd.output) http \(self.http.output)")
            }
        }
    }

    /// The `[global]` lines that keep a Samba program's state under `root` (its directories made), so that nothing
    /// of the machine's own Samba is read or written.
    public static func privateSambaPaths(under root: URL) throws -> String {
        let directories = [
            ("lock directory", "lock"), ("state directory", "state"), ("cache directory", "cache"),
            ("private dir", "private"), ("pid directory", "pid"), ("ncalrpc dir", "ncalrpc"),
        ]
        for (_, sub) in directories {
            try FileManager.default.createDirectory(
                at: root.appendingPathComponent(sub), withIntermediateDirectories: true)
        }
        return (directories.map { "\($0.0) = \(root.path)/\($0.1)" } + ["log file = \(root.path)/log.%m"])
            .joined(separator: "\n")
    }

    public func stop() {
        self.smbd.stop(signal: SIGKILL)
        self.http.stop(signal: SIGKILL)
    }
}
