import Foundation
import SleepProxyCore
import SleepProxyTestSupport
import SleepProxyWire
import Testing

/// A registration built by dnspython (as Linux SleepProxyClient builds it: a zone section, TTL 120, an 8-byte Owner
/// option), sent and its reply parsed by dnspython too.
@Suite("Registration from dnspython", .lab(.namespaces, .dnspython, serialized: true))
final class DNSPythonRegistrationTests {
    static let client = """
        import socket, struct, sys
        import dns.update, dns.edns, dns.message, dns.rcode
        zone = sys.argv[1]
        u = dns.update.UpdateMessage(zone)
        u.add('vm.local.', 120, 'A', '192.0.2.2')
        u.add('2.2.0.192.in-addr.arpa.', 120, 'PTR', 'vm.local.')
        u.add('_ssh._tcp.local.', 4500, 'PTR', 'vm._ssh._tcp.local.')
        u.add('vm._ssh._tcp.local.', 120, 'SRV', '0 0 22 vm.local.')
        u.add('vm._ssh._tcp.local.', 4500, 'TXT', '"u=me"')
        mac = bytes.fromhex('025350000002')
        options = [dns.edns.GenericOption(2, struct.pack('!I', 7200)), dns.edns.GenericOption(4, b'\\x00\\x00' + mac)]
        u.use_edns(edns=0, payload=1440, options=options)
        s = socket.socket(); s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind(('192.0.2.2', 0)); s.settimeout(2)
        s.sendto(u.to_wire(), ('192.0.2.1', 5599))
        reply = dns.message.from_wire(s.recv(2000))
        lease = [o for o in reply.options if o.otype == 2]
        print(dns.rcode.to_text(reply.rcode()), reply.id == u.id, struct.unpack('!I', lease[0].data)[0] if lease else None)
        """

    @Test(arguments: [".", "local."])
    func dnspythonRegistrationWithAZoneIsAccepted(zone: String) throws {
        let lab = try LabNetwork()
        defer { lab.close() }
        let proxy = try lab.addHost("proxy", mac: MACAddress("02:53:50:00:00:01")!, ipv4: ["192.0.2.1/24"])
        let sleeper = try lab.addHost("sleeper", mac: MACAddress("02:53:50:00:00:02")!, ipv4: ["192.0.2.2/24"])
        let daemon = try Daemon.start(in: proxy, stateDirectory: lab.directory.appendingPathComponent("state"))
        defer { daemon.stop() }
        let result = try sleeper.run(["/usr/bin/python3", "-c", Self.client, zone])
        #expect(result.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == "NOERROR True 7200", "\(result)")
        let state = lab.directory.appendingPathComponent("state")
        #expect(
            Daemon.waitForHosts(proxy: proxy, stateDirectory: state) {
                $0["vm.local."]?.services.contains("_ssh._tcp:22") == true
            })
    }
}
