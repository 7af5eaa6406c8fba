import Foundation
import SleepProxyIO
import Testing

/// The redirect check reads /proc/sys; here it reads a tree of the same shape, so every combination is covered
/// without touching the machine (the lab test covers the real files in a namespace).
@Suite("Kernel settings", .ownThread)
struct KernelSettingsTests {
    static func tree(_ values: [String: Int]) throws -> URL {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent(
            "sleepproxy-sysctl-\(UUID().uuidString)")
        for (path, value) in values {
            let file = root.appendingPathComponent(path)
            try FileManager.default.createDirectory(
                at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
            try "\(value)\n".write(to: file, atomically: true, encoding: .utf8)
        }
        return root
    }

    @Test func redirectsAreReportedOnlyWhenTheKernelWouldSendThem() throws {
        let cases: [([String: Int], ipv4: Bool, ipv6: Bool)] = [
            // A NAS or a Pi: nothing forwards.
            (
                [
                    "ipv4/conf/eth0/forwarding": 0, "ipv4/conf/all/send_redirects": 1,
                    "ipv4/conf/eth0/send_redirects": 1, "ipv6/conf/eth0/forwarding": 0,
                ], false, false
            ),
            // Docker's ip_forward, redirects at their defaults.
            (
                [
                    "ipv4/conf/eth0/forwarding": 1, "ipv4/conf/all/send_redirects": 1,
                    "ipv4/conf/eth0/send_redirects": 1,
                ], true, false
            ),
            // Either switch left on still sends (the kernel ORs `all` and the interface).
            (
                [
                    "ipv4/conf/eth0/forwarding": 1, "ipv4/conf/all/send_redirects": 0,
                    "ipv4/conf/eth0/send_redirects": 1,
                ], true, false
            ),
            (
                [
                    "ipv4/conf/eth0/forwarding": 1, "ipv4/conf/all/send_redirects": 1,
                    "ipv4/conf/eth0/send_redirects": 0,
                ], true, false
            ),
            (
                [
                    "ipv4/conf/eth0/forwarding": 1, "ipv4/conf/all/send_redirects": 0,
                    "ipv4/conf/eth0/send_redirects": 0,
                ], false, false
            ),
            // IPv6 forwarding has no redirect switch.
            (["ipv6/conf/eth0/forwarding": 1], false, true),
            // Unreadable or odd files are not problems (no IPv6, an interface gone meanwhile).
            (["ipv4/conf/eth0/forwarding": 1], false, false),
            ([:], false, false),
        ]
        for (values, ipv4, ipv6) in cases {
            let root = try Self.tree(values)
            defer { try? FileManager.default.removeItem(at: root) }
            let problems = KernelSettings.takeoverProblems(interface: "eth0", root: root.path)
            #expect(problems.contains { $0.hasPrefix("IPv4 forwarding") } == ipv4, "\(values): \(problems)")
            #expect(problems.contains { $0.hasPrefix("IPv6 forwarding") } == ipv6, "\(values): \(problems)")
            #expect(problems.count == (ipv4 ? 1 : 0) + (ipv6 ? 1 : 0))
        }
    }
}
