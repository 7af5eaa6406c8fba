import Foundation

/// A PC's Windows name services in a lab host's namespace (docs/windows.md): Samba's nmbd under the NetBIOS name
/// `name` in workgroup WORKGROUP (it registers its names by broadcast at start and answers queries and node
/// status as Windows does), and an LLMNR responder that answers A for `name` as Windows does (unicast from 5355,
/// TTL 30), and wsdd for WS-Discovery. All are started by PID and stopped with SIGKILL: a PC falling asleep releases
/// no name and says no Bye.
public final class WindowsNameServers: @unchecked Sendable {
    // @unchecked: started and stopped on the test's thread only.
    public let nmbd: ManagedProcess
    public let llmnr: ManagedProcess
    /// wsdd (Debian's), the PC's WS-Discovery: its Hello at start, its matches, its metadata on port 5357.
    public let wsdd: ManagedProcess

    static let llmnrScript = """
        import socket, struct, sys
        name, address = sys.argv[1].lower().encode(), socket.inet_aton(sys.argv[2])
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(('0.0.0.0', 5355))
        s.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, socket.inet_aton('224.0.0.252') + socket.inet_aton('0.0.0.0'))
        print('listening', flush=True)
        while True:
            data, peer = s.recvfrom(1500)
            if len(data) < 17 or data[2] & 0x80: continue
            label = data[13:13 + data[12]]
            qtype = data[13 + data[12] + 1:13 + data[12] + 3]
            if label.lower() != name or qtype != b'\\x00\\x01': continue
            question = data[12:13 + data[12] + 5]
            answer = b'\\xc0\\x0c' + struct.pack('>HHIH', 1, 1, 30, 4) + address
            s.sendto(data[:2] + b'\\x80\\x00\\x00\\x01\\x00\\x01\\x00\\x00\\x00\\x00' + question + answer, peer)
        """

    public init(in host: LabHost, name: String, address: String, directory: URL) throws {
        let root = directory.appendingPathComponent("nmbd-\(host.name)")
        let config = root.appendingPathComponent("smb.conf")
        try """
        [global]
        workgroup = WORKGROUP
        netbios name = \(name.uppercased())
        server role = standalone server
        \(try FileServers.privateSambaPaths(under: root))
        local master = no
        """.write(to: config, atomically: true, encoding: .utf8)
        // The LLMNR responder and wsdd first: nmbd's registration broadcasts are what the proxy hears first, and a
        // PC answers all three once it is up.
        self.llmnr = try host.spawn(
            ["/usr/bin/python3", "-c", Self.llmnrScript, name, address], logName: "llmnr")
        self.wsdd = try host.spawn(
            ["/usr/sbin/wsdd", "-i", host.interface, "-4", "-n", name.uppercased(), "-w", "WORKGROUP", "-s"],
            logName: "wsdd")
        guard self.llmnr.waitForOutput("listening", timeout: 10) else {
            self.llmnr.stop(signal: SIGKILL)
            self.wsdd.stop(signal: SIGKILL)
            throw CommandError("the LLMNR responder did not start: \(self.llmnr.output)")
        }
        self.nmbd = try host.spawn(
            ["/usr/sbin/nmbd", "--foreground", "--no-process-group", "--debug-stdout", "-s", config.path],
            logName: "nmbd")
    }

    public func stop() {
        self.nmbd.stop(signal: SIGKILL)
        self.llmnr.stop(signal: SIGKILL)
        self.wsdd.stop(signal: SIGKILL)
    }
}
