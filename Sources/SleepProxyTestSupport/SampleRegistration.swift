import SleepProxyCore
import SleepProxyWire

/// Registrations in the exact form Apple's sleep client sends (sps-protocol §2.3, §2.4): ZOCOUNT 0, reverse PTRs
/// for each address, each service's TXT, `_services` PTR, service PTR and SRV, then A/AAAA, all TTL 4500, unique
/// records with the cache-flush bit, and an OPT (class 1440, TTL 4500) with a 4-byte Lease and an 8-byte Owner.
public enum SampleRegistration {
    public static func message(
        id: UInt16 = 0x1234, mac: MACAddress, sequence: UInt8 = 0, lease: UInt32 = 7200,
        host: DNSName = "vm.local.", addresses: [IPAddress],
        services: [(String, UInt16)] = [("TestSvc._http._tcp", 8080)], extra: [DNSResourceRecord] = [],
        password: SecureOnPassword? = nil
    ) -> DNSMessage {
        var records: [DNSResourceRecord] = []
        for address in addresses {
            records.append(DNSResourceRecord(name: reverseName(address), cacheFlush: true, ttl: 4500, rdata: .ptr(PTRRecord(target: host))))
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
                .updateLease(UpdateLeaseOption(lease: lease)), .owner(OwnerOption(sequence: sequence, primaryMAC: mac, wakeMAC: password == nil ? nil : mac, password: password)),
            ])]
        )
    }

    /// `d.c.b.a.in-addr.arpa.` or the 32-nibble `ip6.arpa.` name, nibbles upper case as Apple writes them.
    public static func reverseName(_ address: IPAddress) -> DNSName { ReverseMapping.name(for: address) }
}
