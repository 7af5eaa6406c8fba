import Foundation

/// A UDP client run inside a lab host (Debian's python3: no third-party modules needed).
public enum UDPClient {
    public static let script = """
        import socket, sys, binascii
        family = socket.AF_INET6 if ':' in sys.argv[1] else socket.AF_INET
        dest, port, src, sport = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
        s = socket.socket(family, socket.SOCK_DGRAM)
        if family == socket.AF_INET6:
            scope = socket.if_nametoindex('eth0')
            s.bind((src, sport, 0, scope)); target = (dest, port, 0, scope)
        else:
            s.bind((src, sport)); target = (dest, port)
        s.settimeout(float(sys.argv[5]))
        for payload in sys.argv[6:]:
            s.sendto(binascii.unhexlify(payload), target)
            try:
                reply, _ = s.recvfrom(9000)
                print(binascii.hexlify(reply).decode(), flush=True)
            except socket.timeout:
                print('timeout', flush=True)
        """

    /// Sends each payload in turn from `source`:`sourcePort` and returns each reply (nil on silence).
    public static func exchange(
        in host: LabHost, to destination: String, port: Int, from source: String, sourcePort: Int = 0,
        timeout: Double = 2, payloads: [[UInt8]]
    ) throws -> [[UInt8]?] {
        let hex = payloads.map { $0.map { String(format: "%02x", $0) }.joined() }
        let result = try host.run(
            ["/usr/bin/python3", "-c", self.script, destination, "\(port)", source, "\(sourcePort)", "\(timeout)"]
                + hex, timeout: .seconds(Int64(timeout * Double(payloads.count) + 10)))
        guard result.succeeded else { throw CommandError("client failed: \(result)") }
        return result.stdout.split(separator: "\n").map { line in
            line == "timeout"
                ? nil
                : stride(from: 0, to: line.count, by: 2).map { offset in
                    let start = line.index(line.startIndex, offsetBy: offset)
                    return UInt8(line[start..<line.index(start, offsetBy: 2)], radix: 16)!
                }
        }
    }
}
