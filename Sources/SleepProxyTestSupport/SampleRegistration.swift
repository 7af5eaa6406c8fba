import SleepProxyCore
import SleepProxyWire

/// Registrations in the exact form Apple's sleep client sends (docs/protocol.md §2.3, §2.4): ZOCOUNT 0, reverse PTRs
/// for each address, each service's TXT, `_services` PTR, service PTR and SRV, then A/AAAA, all TTL 4500, unique
/// records with the cache-flush bit, and an OPT (class 1440, TTL 4500) with a 4-byte Lease and an 8-byte Owner.
public enum SampleRegistration {
    public static func message(
        id: UInt16 = 0x1234, mac: MACAddress, sequence: UInt8 = 0, lease: UInt32 = 7200,
        host: DNSName = "vm.local.", addresses: [IPAddress],
        services: [(String, UInt16)] = [("TestSvc._http._tcp", 8080)], extra: [DNSResourceRecord] = [],
        password: SecureOnPassword? = nil
    ) -> DNSMessage {
        let registration = SleepRegistration(
            hostName: host, addresses: addresses,
            services: services.map {
                SleepRegistration.Service(instance: try! DNSName(parsing: $0.0 + ".local."), port: $0.1)
            },
            owner: OwnerOption(
                sequence: sequence, primaryMAC: mac, wakeMAC: password == nil ? nil : mac, password: password),
            lease: lease)
        // One message whatever its size: tests of large registrations need exactly that.
        return registration.messages(id: id, maximumSize: .max, extra: extra)[0]
    }

    /// `d.c.b.a.in-addr.arpa.` or the 32-nibble `ip6.arpa.` name, nibbles upper case as Apple writes them.
    public static func reverseName(_ address: IPAddress) -> DNSName { ReverseMapping.name(for: address) }
}
