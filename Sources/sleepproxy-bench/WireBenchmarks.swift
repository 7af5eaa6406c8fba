import NIOCore
import SleepProxyWire

/// Decode and encode throughput of the DNS codec (issue: ≥ 1,000,000 typical queries decoded and ≥ 500,000
/// responses encoded per second on one core), plus the frames the packet watcher decodes on every packet.
enum WireBenchmarks {
    /// A browse for one service type, as most queriers send it (QM, ID 0, one question).
    static let typicalQuery = DNSMessage(questions: [DNSQuestion(name: "_airplay._tcp.local.", type: .ptr)])

    /// What an Apple device sends when it wakes: three QU questions, two known answers, and its Owner option.
    static let appleQuery: DNSMessage = {
        let owner = OwnerOption(
            sequence: 5, primaryMAC: MACAddress("02:53:50:00:00:02")!, wakeMAC: MACAddress("02:53:50:00:00:03")!)
        return DNSMessage(
            questions: [
                DNSQuestion(name: "_companion-link._tcp.local.", type: .ptr, unicastResponse: true),
                DNSQuestion(name: "_airplay._tcp.local.", type: .ptr, unicastResponse: true),
                DNSQuestion(name: "_raop._tcp.local.", type: .ptr, unicastResponse: true),
            ],
            answers: [
                DNSResourceRecord(
                    name: "_airplay._tcp.local.", ttl: 4400,
                    rdata: .ptr(PTRRecord(target: "Living Room._airplay._tcp.local."))),
                DNSResourceRecord(
                    name: "_raop._tcp.local.", ttl: 4400,
                    rdata: .ptr(PTRRecord(target: "0253500000 02@Living Room._raop._tcp.local."))),
            ],
            additionals: [.opt(EDNSHeader(udpPayloadSize: 1440, z: 0x1194), options: [.owner(owner)])]
        )
    }()

    /// The answer to a browse for a sleeping host's service: PTR, with SRV, TXT, A, AAAA and NSEC additionals
    /// (RFC 6763 §12), as the responder will send it.
    static let typicalResponse: DNSMessage = {
        let instance: DNSName = "Büro Mac._smb._tcp.local."
        let host: DNSName = "Bueros-Mac.local."
        return DNSMessage(
            flags: DNSHeaderFlags(response: true, authoritative: true),
            answers: [DNSResourceRecord(name: "_smb._tcp.local.", ttl: 4500, rdata: .ptr(PTRRecord(target: instance)))],
            additionals: [
                DNSResourceRecord(
                    name: instance, cacheFlush: true, ttl: 120, rdata: .srv(SRVRecord(port: 445, target: host))),
                DNSResourceRecord(
                    name: instance, cacheFlush: true, ttl: 4500, rdata: .txt(try! TXTRecord(["model=MacBookPro18,3"]))),
                DNSResourceRecord(
                    name: host, cacheFlush: true, ttl: 120, rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 2)))),
                DNSResourceRecord(
                    name: host, cacheFlush: true, ttl: 120,
                    rdata: .aaaa(AAAARecord(address: IPv6Address("fe80::53:50ff:fe00:2")!))),
                DNSResourceRecord(
                    name: instance, cacheFlush: true, ttl: 4500,
                    rdata: .nsec(NSECRecord(nextName: instance, types: [.txt, .srv]))),
                DNSResourceRecord(
                    name: host, cacheFlush: true, ttl: 120,
                    rdata: .nsec(NSECRecord(nextName: host, types: [.a, .aaaa]))),
            ]
        )
    }()

    static func run() throws {
        let registration = try DNSMessage(decoding: appleRegistrationBytes)
        let queryBytes = ByteBuffer(bytes: typicalQuery.encoded())
        let appleQueryBytes = ByteBuffer(bytes: appleQuery.encoded())
        let responseBytes = ByteBuffer(bytes: typicalResponse.encoded())
        let registrationBytes = ByteBuffer(bytes: appleRegistrationBytes)
        print(
            "DNS codec (message sizes: query \(queryBytes.readableBytes) B, Apple query \(appleQueryBytes.readableBytes) B, response \(responseBytes.readableBytes) B, registration \(registrationBytes.readableBytes) B)"
        )

        _ = try measure("decode typical query (1 PTR question)", iterations: 500_000, target: 1_000_000) {
            try DNSMessage(decoding: queryBytes).questions.count
        }
        _ = try measure("decode Apple query (3 QU, 2 known answers, Owner)", iterations: 200_000) {
            try DNSMessage(decoding: appleQueryBytes).answers.count
        }
        _ = try measure("decode typical response (PTR + 6 additionals)", iterations: 200_000) {
            try DNSMessage(decoding: responseBytes).additionals.count
        }
        _ = try measure("decode Apple registration (8 records + OPT)", iterations: 100_000) {
            try DNSMessage(decoding: registrationBytes).updates.count
        }
        var buffer = ByteBufferAllocator().buffer(capacity: 1500)
        _ = measure("encode typical response (compressed)", iterations: 300_000, target: 500_000) {
            buffer.clear()
            return typicalResponse.write(to: &buffer)
        }
        _ = measure("encode typical query", iterations: 500_000) {
            buffer.clear()
            return typicalQuery.write(to: &buffer)
        }
        _ = measure("encode Apple registration (Apple's form)", iterations: 100_000) {
            buffer.clear()
            return registration.write(to: &buffer, options: .appleUpdate)
        }

        print("Link layer")
        let arpRequest = ARPPacket(
            operation: .request, senderMAC: MACAddress("02:00:00:00:00:09")!, senderIP: IPv4Address(192, 0, 2, 9),
            targetMAC: .zero, targetIP: IPv4Address(192, 0, 2, 2))
        let arpFrame = ByteBuffer(
            bytes: arpRequest.frame(destination: .broadcast, source: MACAddress("02:00:00:00:00:09")!).bytes)
        var tcp = ByteBuffer()
        TCPSegment(sourcePort: 50_000, destinationPort: 445, sequenceNumber: 1, flags: .syn).write(to: &tcp)
        var ip = ByteBuffer()
        IPv4Packet(
            header: IPv4Header(source: IPv4Address(192, 0, 2, 9), destination: IPv4Address(192, 0, 2, 2), proto: .tcp),
            payload: tcp
        ).write(to: &ip)
        let synFrame = ByteBuffer(
            bytes: EthernetFrame(
                destination: MACAddress("02:53:50:00:00:01")!, source: MACAddress("02:00:00:00:00:09")!,
                etherType: .ipv4, payload: ip
            ).bytes)
        _ = try measure("decode ARP request frame", iterations: 500_000) {
            let frame = try EthernetFrame(decoding: arpFrame)
            return Int(try ARPPacket(decoding: frame.payload).targetIP.rawValue & 1)
        }
        _ = try measure("decode TCP SYN frame (Ethernet/IPv4/TCP)", iterations: 500_000) {
            let frame = try EthernetFrame(decoding: synFrame)
            let packet = try IPv4Packet(decoding: frame.payload)
            return Int(try TCPSegment(decoding: packet.payload).destinationPort)
        }
        let magic = MagicPacket(target: MACAddress("02:53:50:00:00:02")!)
        _ = measure("build magic packet frame", iterations: 300_000) {
            magic.frame(destination: .broadcast, source: MACAddress("02:53:50:00:00:01")!).payload.readableBytes
        }
    }
}
