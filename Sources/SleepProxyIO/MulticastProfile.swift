import NIOCore
import SleepProxyCore
import SleepProxyWire

/// What differs between the multicast protocols the proxy speaks on every served interface.
struct MulticastProfile: Sendable {
    /// For log lines: "mdns", "ssdp".
    var name: String
    var port: UInt16
    var group4: String
    var group6: String
    /// TTL / hop limit of multicast sends.
    var multicastHops: CInt
    /// TTL / hop limit of unicast sends; nil keeps the system's.
    var unicastHops: CInt?
    /// Larger datagrams are dropped on arrival.
    var maximumSize: Int
    /// Sends go out of a second socket on a port of the system's choosing, which also takes the unicast answers
    /// to them: they must not go to another program bound to the well-known port on this machine.
    var separateSender: Bool
    var event:
        @Sendable (
            _ bytes: [UInt8], _ source: IPAddress, _ port: UInt16, _ interfaceIndex: Int, _ destination: IPAddress?
        ) -> EngineRunner.Event

    /// RFC 6762: port 5353, TTL / hop limit 255 for multicast and unicast alike (§11, docs/linux.md §1.6), and
    /// answers from port 5353.
    static let mdns = MulticastProfile(
        name: "mdns", port: MDNSRules.port, group4: "224.0.0.251", group6: "ff02::fb", multicastHops: 255,
        unicastHops: 255, maximumSize: DNSMessage.maximumSize, separateSender: false,
        event: { .mdns(bytes: $0, source: $1, port: $2, interfaceIndex: $3, destination: $4) })

    /// UDA §1.1.2: port 1900, TTL 2 (docs/ssdp.md). A NAS running the proxy may run minidlna too, bound to port
    /// 1900 as well: the proxy's searches and answers go out of a port of its own.
    static let ssdp = MulticastProfile(
        name: "ssdp", port: SSDPRules.port, group4: "239.255.255.250", group6: "ff02::c",
        multicastHops: CInt(SSDPRules.multicastTTL), unicastHops: nil, maximumSize: SSDPMessage.maximumSize,
        separateSender: true,
        event: { .ssdp(bytes: $0, source: $1, port: $2, interfaceIndex: $3, destination: $4) })
}
