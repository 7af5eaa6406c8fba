import Foundation
import SleepProxyCore
import SleepProxyTestSupport
import SleepProxyWire

/// The lab's addressing: the proxy is 192.0.2.1 / fe80::53:50ff:fe00:1 on "eth0", the Apple vector's host is
/// 192.0.2.2 / fe80::53:50ff:fe00:2 with MAC 02:53:50:00:00:02.
enum Lab {
    static let proxyMAC = MACAddress("02:53:50:00:00:01")!
    static let hostMAC = MACAddress("02:53:50:00:00:02")!
    static let hostV4 = IPAddress("192.0.2.2")!
    static let hostV6 = IPAddress("fe80::53:50ff:fe00:2")!
    static let eth0 = InterfaceContext(
        name: "eth0", index: 2, macAddress: proxyMAC,
        prefixes: [IPPrefix("192.0.2.1/24")!, IPPrefix("fe80::53:50ff:fe00:1/64")!, IPPrefix("2001:db8::1/64")!]
    )
    static let t0 = Timestamp.seconds(1000)

    static func appleVectorBytes() throws -> [UInt8] {
        let url = Bundle.module.url(
            forResource: "apple-posix-registration", withExtension: "bin", subdirectory: "Fixtures")!
        return Array(try Data(contentsOf: url))
    }

    static func appleVector() throws -> DNSMessage { try DNSMessage(decoding: try appleVectorBytes()) }

    /// A registration in Apple's form for a host with `services` (name, port) and the given addresses.
    static func registration(
        id: UInt16 = 0x1234, mac: MACAddress = hostMAC, sequence: UInt8 = 0, lease: UInt32 = 7200,
        host: DNSName = "vm.local.", addresses: [IPAddress] = [hostV4, hostV6],
        services: [(String, UInt16)] = [("TestSvc._http._tcp", 8080)], extra: [DNSResourceRecord] = [],
        password: SecureOnPassword? = nil
    ) -> DNSMessage {
        SampleRegistration.message(
            id: id, mac: mac, sequence: sequence, lease: lease, host: host, addresses: addresses, services: services,
            extra: extra, password: password)
    }
}
