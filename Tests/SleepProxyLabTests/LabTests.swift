import Foundation
import SleepProxyTestSupport
import SleepProxyWire
import Testing

/// Proof that the lab itself works, against avahi-daemon and real third-party clients, before any proxy code
/// is tested in it.
@Suite("Lab", .lab(.namespaces, .avahi, serialized: true))
struct LabTests {
    @Test func avahiPublishesAndEveryDriverResolvesOverIPv4AndIPv6() throws {
        let lab = try LabNetwork()
        defer { lab.close() }
        let publisherHost = try lab.addHost(
            "publisher", mac: MACAddress("02:53:50:00:00:10")!, ipv4: ["192.0.2.10/24"], ipv6: ["2001:db8::10/64"])
        let querier = try lab.addHost(
            "querier", mac: MACAddress("02:53:50:00:00:20")!, ipv4: ["192.0.2.20/24"], ipv6: ["2001:db8::20/64"])
        let publisher = try AvahiDaemon(in: publisherHost, hostName: "publisher", directory: lab.directory)
        defer { publisher.stop() }
        try publisher.publish(
            name: "Lab Printer", type: "_http._tcp", port: 8080, txt: ["path=/x", "model=LP-1"], logName: "publish")

        // python-zeroconf, IPv4 and IPv6.
        let v4 = try Queriers.zeroconf(in: querier, type: "_http._tcp.local.", family: "4")
        let printer4 = try #require(v4.first { $0.name == "Lab Printer" }, "zeroconf IPv4 found \(v4)")
        #expect(printer4.port == 8080 && printer4.host == "publisher.local.")
        #expect(Set(printer4.txt) == ["path=/x", "model=LP-1"])
        #expect(printer4.addresses.contains("192.0.2.10"))
        let v6 = try Queriers.zeroconf(in: querier, type: "_http._tcp.local.", family: "6")
        let printer6 = try #require(v6.first { $0.name == "Lab Printer" }, "zeroconf IPv6 found \(v6)")
        #expect(printer6.addresses.contains { $0.contains(":") })

        // avahi-browse and avahi-resolve through an avahi-daemon of the querier's own.
        let querierAvahi = try AvahiDaemon(in: querier, hostName: "querier", directory: lab.directory)
        defer { querierAvahi.stop() }
        let browsed = try Queriers.avahiBrowse(querierAvahi, type: "_http._tcp") { found in
            let printer = found.filter { $0.name == "Lab Printer" }.flatMap(\.addresses)
            return printer.contains("192.0.2.10") && printer.contains { $0.contains(":") }
        }.filter { $0.name == "Lab Printer" }
        #expect(Set(browsed.flatMap(\.addresses)).contains("192.0.2.10"), "\(browsed)")
        #expect(browsed.contains { $0.addresses.contains { $0.contains(":") } }, "no IPv6 resolution in \(browsed)")
        #expect(
            browsed.allSatisfy {
                $0.port == 8080 && $0.host == "publisher.local" && Set($0.txt) == ["path=/x", "model=LP-1"]
            })
        #expect(try Queriers.avahiResolve(querierAvahi, name: "publisher.local") == "192.0.2.10")
        #expect(try Queriers.avahiResolve(querierAvahi, name: "publisher.local", ipv6: true)?.contains(":") == true)
        #expect(try Queriers.avahiResolve(querierAvahi, address: "192.0.2.10") == "publisher.local")

        // dig, a direct unicast query to port 5353 (RFC 6762 §5.5), over IPv4 and IPv6.
        for server in ["192.0.2.10", "2001:db8::10"] {
            let srv = try Queriers.dig(in: querier, server: server, name: "Lab\\ Printer._http._tcp.local", type: "SRV")
            #expect(
                srv.contains { $0.type == "SRV" && $0.data == "0 0 8080 publisher.local." }, "dig @\(server): \(srv)")
        }

        // JmDNS, bound to the querier's address.
        if JmDNSDriver.isAvailable {
            let java = try JmDNSDriver.browse(
                in: querier, bindAddress: "192.0.2.20", type: "_http._tcp.local.", directory: lab.directory)
            let printer = try #require(java.first { $0.name == "Lab Printer" }, "JmDNS found \(java)")
            #expect(printer.port == 8080)
            #expect(Set(printer.txt) == ["path=/x", "model=LP-1"])
            #expect(printer.addresses.contains("192.0.2.10"))
            // And bound to the querier's IPv6 address, so it queries ff02::fb.
            let java6 = try JmDNSDriver.browse(
                in: querier, bindAddress: "2001:db8::20", type: "_http._tcp.local.", directory: lab.directory)
            let printer6 = try #require(java6.first { $0.name == "Lab Printer" }, "JmDNS over IPv6 found \(java6)")
            #expect(printer6.port == 8080 && Set(printer6.txt) == ["path=/x", "model=LP-1"])
            #expect(printer6.addresses.contains { $0.contains(":") }, "\(printer6.addresses)")
        } else {
            Issue.record("JmDNS is not installed (libjmdns-java, openjdk-17-jdk-headless)")
        }

        // Our raw querier: a legacy unicast query from an ephemeral port gets a unicast answer that echoes the
        // ID and the question (RFC 6762 §6.7).
        let question = DNSQuestion(name: "publisher.local.", type: .a)
        let responses = try RawMDNS.exchange(
            in: querier, packets: [DNSMessage(id: 0x4242, questions: [question])], to: .v4(.mdnsGroup),
            listen: .seconds(2))
        let legacy = try #require(
            responses.first { $0.message.id == 0x4242 }, "no legacy unicast answer: \(responses.map(\.message))")
        #expect(legacy.message.questions == [question])
        #expect(legacy.message.answers.contains { $0.rdata == .a(ARecord(address: IPv4Address(192, 0, 2, 10))) })
        #expect(legacy.message.answers.allSatisfy { !$0.cacheFlush })
        #expect(legacy.hopLimit == 255)
    }

    @Test func magicPacketsReachTheSleeperWithTheirExactBytes() throws {
        let lab = try LabNetwork()
        defer { lab.close() }
        let sleeper = try SleepingHost(
            lab: lab, name: "sleeper", mac: MACAddress("02:53:50:00:00:02")!, ipv4: ["192.0.2.2/24"])
        defer { sleeper.close() }
        let waker = try lab.addHost("waker", mac: MACAddress("02:53:50:00:00:09")!, ipv4: ["192.0.2.9/24"])
        try sleeper.sleep()
        // An EtherType 0x0842 frame with a 6-byte SecureOn password, unicast to the sleeper.
        let withPassword = MagicPacket(target: sleeper.host.mac, password: SecureOnPassword(bytes: [1, 2, 3, 4, 5, 6]))
        let frame = withPassword.frame(destination: sleeper.host.mac, source: waker.mac).bytes
        try waker.namespace.sendFrame(frame)
        // And a plain one as a UDP broadcast to port 9, the way wakeonlan and etherwake -b send it.
        let plain = MagicPacket(target: sleeper.host.mac)
        let hex = plain.payload.map { String(format: "%02x", $0) }.joined()
        try waker.namespace.check([
            "/usr/bin/python3", "-c",
            "import socket,binascii; s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); s.setsockopt(socket.SOL_SOCKET,socket.SO_BROADCAST,1); s.bind(('192.0.2.9',0)); s.sendto(binascii.unhexlify('\(hex)'),('192.0.2.255',9))",
        ])
        let received = sleeper.waitForMagicPackets(2, timeout: 5)
        #expect(received.count == 2)
        #expect(received.first?.frame.bytes == frame)
        #expect(received.first?.packet == withPassword)
        #expect(received.last?.packet == plain)
    }

    @Test func aConnectionReachesTheSleeperOnlyWhileItIsAwake() throws {
        let lab = try LabNetwork()
        defer { lab.close() }
        let sleeper = try SleepingHost(
            lab: lab, name: "sleeper", mac: MACAddress("02:53:50:00:00:02")!, ipv4: ["192.0.2.2/24"])
        defer { sleeper.close() }
        let client = try lab.addHost("client", mac: MACAddress("02:53:50:00:00:09")!, ipv4: ["192.0.2.9/24"])
        let connect = [
            "/usr/bin/python3", "-c",
            "import socket,sys; s=socket.create_connection((sys.argv[1], 8080), timeout=1.5); print(s.recv(16).decode().strip())",
        ]
        #expect(try client.run(connect + ["192.0.2.2"]).stdout.contains("awake"))
        #expect(try client.run(connect + [sleeper.host.linkLocal.description + "%eth0"]).stdout.contains("awake"))
        try sleeper.sleep()
        let asleep = try client.run(connect + ["192.0.2.2"])
        #expect(!asleep.succeeded && !asleep.stdout.contains("awake"))
        try sleeper.wake()
        #expect(try client.run(connect + ["192.0.2.2"]).stdout.contains("awake"))
    }
}
