import NIOCore
import SleepProxyCore
import SleepProxyWire

/// The machines of `HomeMonth`'s home and what they put on the link, as real ones do (docs/long-running.md).
/// Addresses are the documentation ones: the proxy 192.0.2.1, hosts from .10, noise devices from .100, the person's
/// laptop .200, Home Assistant .250, the router .254.
public enum HomeDevices {
    public static let interface = InterfaceContext(
        name: "eth0", index: 2, macAddress: MACAddress("02:53:50:00:00:01")!,
        prefixes: [IPPrefix("192.0.2.1/24")!, IPPrefix("fe80::53:50ff:fe00:1/64")!])
    public static let person = IPAddress("192.0.2.200")!
    public static let personMAC = MACAddress("02:53:50:00:00:c8")!
    public static let scanner = IPAddress("192.0.2.250")!
    public static let scannerMAC = MACAddress("02:53:50:00:00:fa")!
    static let router = IPv4Address(192, 0, 2, 254)
    static let routerLinkLocal = IPv6Address(high: 0xFE80_0000_0000_0000, low: 0x0053_50FF_FE00_00FE)

    // MARK: - Hosts that sleep

    public static func mac(_ host: Int) -> MACAddress { MACAddress(rawValue: 0x0253_5000_1000 + UInt64(host)) }
    public static func v4(_ host: Int) -> IPv4Address { IPv4Address(192, 0, 2, UInt8(10 + host)) }
    static func linkLocal(_ host: Int) -> IPv6Address {
        IPv6Address(high: 0xFE80_0000_0000_0000, low: 0x0053_50FF_FE00_1000 + UInt64(host))
    }
    public static func name(_ host: Int) -> DNSName { try! DNSName(labels: ["host-\(host)", "local"]) }
    static let serviceTypes: [(type: String, port: UInt16)] = [("_smb", 445), ("_http", 80)]
    static func instance(_ host: Int, _ type: String) -> DNSName {
        try! DNSName(labels: ["Host \(host)", type, "_tcp", "local"])
    }
    static func serviceType(_ type: String) -> DNSName { try! DNSName(labels: [type, "_tcp", "local"]) }
    static let servicesMeta: DNSName = "_services._dns-sd._udp.local."

    /// What a registering host hands the proxy before it sleeps (Apple's form, docs/protocol.md §2.3).
    static func registration(_ host: Int, sequence: UInt8, id: UInt16, lease: UInt32) -> [[UInt8]] {
        SleepRegistration(
            hostName: self.name(host), addresses: [.v4(self.v4(host)), .v6(self.linkLocal(host))],
            services: self.serviceTypes.map {
                SleepRegistration.Service(instance: self.instance(host, $0.type), port: $0.port)
            },
            owner: OwnerOption(sequence: sequence, primaryMAC: self.mac(host)), lease: lease
        ).messages(id: id, maximumSize: 1440).map { $0.encoded(options: .appleUpdate) }
    }

    /// Everything a host's responder says of itself: its address, its services (PTR, SRV, TXT) and their types.
    static func ownRecords(_ host: Int) -> [DNSResourceRecord] {
        var records = [
            DNSResourceRecord(
                name: self.name(host), cacheFlush: true, ttl: 120, rdata: .a(.init(address: self.v4(host))))
        ]
        for (type, port) in self.serviceTypes {
            let instance = self.instance(host, type)
            records += [
                DNSResourceRecord(name: self.serviceType(type), ttl: 4500, rdata: .ptr(.init(target: instance))),
                DNSResourceRecord(
                    name: instance, cacheFlush: true, ttl: 120,
                    rdata: .srv(SRVRecord(priority: 0, weight: 0, port: port, target: self.name(host)))),
                DNSResourceRecord(name: instance, cacheFlush: true, ttl: 4500, rdata: .txt(.empty)),
                DNSResourceRecord(
                    name: self.servicesMeta, ttl: 4500, rdata: .ptr(.init(target: self.serviceType(type)))),
            ]
        }
        return records
    }

    /// Whether a question is one the host's responder answers.
    static func answers(_ host: Int, _ question: DNSQuestion) -> Bool {
        question.name == self.name(host) || question.name == self.servicesMeta
            || self.serviceTypes.contains {
                question.name == self.serviceType($0.type) || question.name == self.instance(host, $0.type)
            }
    }

    /// The host's announcement (or answer), with its Owner option when it registers (Apple announces with the
    /// sequence of its new wake).
    static func announcement(_ host: Int, owner: UInt8?) -> [UInt8] {
        var message = DNSMessage(
            id: 0, flags: .init(response: true, authoritative: true), answers: self.ownRecords(host))
        if let owner {
            message.additionals.append(
                .opt(
                    EDNSHeader(udpPayloadSize: 1440),
                    options: [.owner(OwnerOption(sequence: owner, primaryMAC: self.mac(host)))]))
        }
        return message.encoded(options: .mdns)
    }

    /// The same datagram as a frame from the host's MAC (what the capture sees of an adopted host).
    static func mdnsFrame(_ host: Int, _ payload: [UInt8]) -> [UInt8] {
        TestFrames.udp(
            from: self.mac(host), to: MACAddress("01:00:5e:00:00:fb")!, source: .v4(self.v4(host)),
            destination: .v4(.mdnsGroup), sourcePort: 5353, port: 5353, payload: payload)
    }

    /// A media server's three SSDP announcements (minidlna's root device, UUID and MediaServer type).
    static func ssdpNotifies(_ device: Int, at address: IPv4Address) -> [[UInt8]] {
        let digits = String(device, radix: 16)
        let uuid = "uuid:4d696e69-444c-164e-9d41-" + String(repeating: "0", count: max(0, 12 - digits.count)) + digits
        return ["upnp:rootdevice", uuid, "urn:schemas-upnp-org:device:MediaServer:1"].map { type in
            SSDPMessage(
                kind: .notify,
                headers: [
                    .init("HOST", "239.255.255.250:1900"), .init("CACHE-CONTROL", "max-age=1810"),
                    .init("LOCATION", "http://\(address):8200/rootDesc.xml"), .init("NT", type),
                    .init("NTS", "ssdp:alive"), .init("SERVER", "Debian DLNADOC/1.50 UPnP/1.0 MiniDLNA/1.3.0"),
                    .init("USN", type == uuid ? uuid : "\(uuid)::\(type)"),
                ]
            ).encoded()
        }
    }

    // MARK: - The rest of the house

    public static func deviceMAC(_ device: Int) -> MACAddress {
        MACAddress(rawValue: 0x0253_5000_2000 + UInt64(device))
    }
    public static func deviceAddress(_ device: Int) -> IPAddress { .v4(IPv4Address(192, 0, 2, UInt8(100 + device))) }
    static let browsedTypes: [DNSName] = [
        "_airplay._tcp.local.", "_raop._tcp.local.", "_googlecast._tcp.local.", "_smb._tcp.local.",
        "_http._tcp.local.", "_spotify-connect._tcp.local.", "_companion-link._tcp.local.", "_hap._tcp.local.",
        "_ipp._tcp.local.", "_sleep-proxy._udp.local.",
    ]

    /// A browse, with known answers of the device's own or none (a device that just joined, or one that never
    /// sends them: docs/busy-lan.md).
    static func browse(_ type: DNSName, knownAnswer: DNSName?) -> [UInt8] {
        DNSMessage(
            questions: [DNSQuestion(name: type, type: .ptr)],
            answers: knownAnswer.map { [DNSResourceRecord(name: type, ttl: 4500, rdata: .ptr(.init(target: $0)))] }
                ?? []
        ).encoded(options: .mdns)
    }

    /// A device's own announcement: its name and one AirPlay service.
    static func deviceAnnouncement(_ device: Int) -> [UInt8] {
        let name = try! DNSName(labels: ["device-\(device)", "local"])
        let instance = try! DNSName(labels: ["Speaker \(device)", "_airplay", "_tcp", "local"])
        let address = IPv4Address(192, 0, 2, UInt8(100 + device))
        return DNSMessage(
            id: 0, flags: .init(response: true, authoritative: true),
            answers: [
                DNSResourceRecord(name: name, cacheFlush: true, ttl: 120, rdata: .a(.init(address: address))),
                DNSResourceRecord(name: "_airplay._tcp.local.", ttl: 4500, rdata: .ptr(.init(target: instance))),
                DNSResourceRecord(
                    name: instance, cacheFlush: true, ttl: 120,
                    rdata: .srv(SRVRecord(priority: 0, weight: 0, port: 7000, target: name))),
            ]
        ).encoded(options: .mdns)
    }

    static func deviceInstance(_ device: Int) -> DNSName {
        try! DNSName(labels: ["Speaker \(device)", "_airplay", "_tcp", "local"])
    }

    static func search() -> [UInt8] {
        SSDPMessage(
            kind: .search,
            headers: [
                .init("HOST", "239.255.255.250:1900"), .init("MAN", "\"ssdp:discover\""), .init("MX", "2"),
                .init("ST", "ssdp:all"),
            ]
        ).encoded()
    }

    /// nmap's `-F` list begins with these (its services file, most frequent first); the rest are filled in order.
    static func scanPorts(_ count: Int) -> [UInt16] {
        let top: [UInt16] = [
            80, 23, 443, 21, 22, 25, 3389, 110, 445, 139, 143, 53, 135, 3306, 8080, 1723, 111, 995, 993, 5900,
        ]
        return Array((top + (1000..<UInt16(1000 + max(0, count - top.count)))).prefix(count))
    }
}
