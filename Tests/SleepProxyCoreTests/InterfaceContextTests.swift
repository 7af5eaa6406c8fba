import SleepProxyCore
import SleepProxyWire
import Testing

@Suite("Interface context")
struct InterfaceContextTests {
    static let context = InterfaceContext(
        name: "eth0", index: 2, macAddress: MACAddress("02:53:50:00:00:01")!,
        prefixes: [IPPrefix("192.0.2.1/24")!, IPPrefix("198.51.100.7/31")!, IPPrefix("2001:db8::1/64")!])

    /// What a datagram's source can claim that no reply may go to (docs/linux.md §1.10), beside ordinary peers.
    @Test(arguments: [
        ("192.0.2.2", 5353, true), ("192.0.2.254", 49152, true), ("203.0.113.9", 80, true),
        ("fe80::1", 5353, true), ("2001:db8::2", 1, true), ("198.51.100.6", 9, true), ("198.51.100.7", 9, true),
        ("192.0.2.2", 0, false), ("fe80::1", 0, false),
        ("192.0.2.255", 5353, false), ("255.255.255.255", 9, false), ("0.0.0.0", 9, false),
        ("224.0.0.251", 5353, false), ("239.255.255.250", 1900, false), ("ff02::fb", 5353, false), ("::", 9, false),
    ])
    func aReplyGoesOnlyToAUnicastAddressAndAPort(address: String, port: Int, accepted: Bool) {
        #expect(Self.context.acceptsReply(to: IPAddress(address)!, port: UInt16(port)) == accepted)
    }
}
