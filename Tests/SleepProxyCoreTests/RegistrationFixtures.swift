import Foundation
import SleepProxyCore
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
        let url = Bundle.module.url(forResource: "apple-posix-registration", withExtension: "bin", subdirectory: "Fixtures")!
        return Array(try Data(contentsOf: url))
    }

    static func appleVector() throws -> DNSMessage { try DNSMessage(decoding: try appleVectorBytes()) }

    /// A registration in Apple's form for a host with `services` (name, port) and the given addresses.
    static func registration(
        id: UInt16 = 0x1234, mac: MACAddress = hostMAC, sequence: UInt8 = 0, lease: UInt32 = 7200,
        host: DNSName = "vm.local.", addresses: [IPAddress] = [hostV4, hostV6],
        services: [(String, UInt16)] = [("TestSvc._http._tcp", 8080)], extra: [DNSResourceRecord] = []
    ) -> DNSMessage {
        var records: [DNSResourceRecord] = []
        for address in addresses {
            records.append(DNSResourceRecord(name: ReverseMapping.name(for: address), cacheFlush: true, ttl: 4500, rdata: .ptr(PTRRecord(target: host))))
        }
        for (instanceText, port) in services {
            let instance = try! DNSName(parsing: instanceText + ".local.")
            records.append(DNSResourceRecord(name: instance, cacheFlush: true, ttl: 4500, rdata: .txt(.empty)))
            records.append(DNSResourceRecord(name: "_services._dns-sd._udp.local.", ttl: 4500, rdata: .ptr(PTRRecord(target: instance.parent))))
            records.append(DNSResourceRecord(name: instance.parent, ttl: 4500, rdata: .ptr(PTRRecord(target: instance))))
            records.append(DNSResourceRecord(name: instance, cacheFlush: true, ttl: 4500, rdata: .srv(SRVRecord(port: port, target: host))))
        }
        for address in addresses {
            switch address {
            case .v4(let v4): records.append(DNSResourceRecord(name: host, cacheFlush: true, ttl: 4500, rdata: .a(ARecord(address: v4))))
            case .v6(let v6): records.append(DNSResourceRecord(name: host, cacheFlush: true, ttl: 4500, rdata: .aaaa(AAAARecord(address: v6))))
            }
        }
        records += extra
        return DNSMessage(
            id: id,
            flags: DNSHeaderFlags(response: false, opcode: .update),
            authorities: records,
            additionals: [.opt(EDNSHeader(udpPayloadSize: 1440, z: 0x1194), options: [
                .updateLease(UpdateLeaseOption(lease: lease)), .owner(OwnerOption(sequence: sequence, primaryMAC: mac)),
            ])]
        )
    }
}
