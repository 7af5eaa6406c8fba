import NIOCore
import SleepProxyCore
import SleepProxyWire

/// What listing the machines on the link costs (docs/neighbours.md): every ARP frame of a busy link goes through
/// the packet side, and every mDNS response through the book.
enum NeighbourBenchmarks {
    static let machines = 500

    static func run() {
        print("Neighbours: \(Self.machines) machines on the link (docs/neighbours.md)")
        let macs = (0..<Self.machines).map { MACAddress(rawValue: 0x0253_5002_0000 + UInt64($0)) }
        let addresses = (0..<Self.machines).map {
            IPAddress.v4(IPv4Address(rawValue: 0xC000_0200 &+ UInt32($0 % 250 + 2)))
        }
        var book = NeighbourBook()
        var index = 0
        var now = Timestamp.seconds(1000)
        _ = measure("ARP sender filed in the book, 500 machines", iterations: 200_000) {
            index = (index + 1) % Self.machines
            now = now + .microseconds(10)
            book.heard(macs[index], at: addresses[index], on: "eth0", now: now)
            return book.count
        }
        // A flood of forged senders, each new: the book stays full, and makes room an eighth at a time.
        var flooded = NeighbourBook()
        var forged: UInt64 = 0
        _ = measure("ARP sender filed, a flood of new forged MACs", iterations: 200_000) {
            forged &+= 1
            now = now + .microseconds(10)
            flooded.heard(
                MACAddress(rawValue: 0x0253_6000_0000 + forged & 0xFFFF_FFFF),
                at: .v4(IPv4Address(rawValue: 0xC633_6400 &+ UInt32(truncatingIfNeeded: forged % 250 + 1))), on: "eth0",
                now: now)
            return flooded.count
        }
        // The whole path of one frame: decoded and judged by the packet side, and filed.
        var takeover = Takeover(configuration: TakeoverConfiguration())
        let context = InterfaceContext(
            name: "eth0", index: 2, macAddress: MACAddress("02:53:50:00:00:01")!, prefixes: [IPPrefix("192.0.2.1/24")!])
        _ = takeover.setInterfaces([context])
        let frames = (0..<Self.machines).map { n -> [UInt8] in
            guard case .v4(let sender) = addresses[n] else { return [] }
            return ARPPacket(
                operation: .request, senderMAC: macs[n], senderIP: sender, targetMAC: .zero,
                targetIP: IPv4Address(192, 0, 2, 1)
            ).frame(destination: .broadcast, source: macs[n]).bytes
        }
        _ = measure("ARP request through the packet side, 500 machines", iterations: 200_000) {
            index = (index + 1) % Self.machines
            now = now + .microseconds(10)
            return takeover.receive(frame: frames[index], interfaceIndex: 2, outgoing: false, now: now).count
        }
        // A NAS answering a browse: its name's address and six services on that name.
        let nas = macs[0]
        book.heard(nas, at: IPAddress("192.0.2.2")!, on: "eth0", now: now)
        var answer = DNSMessage(
            answers: [
                DNSResourceRecord(
                    name: "nas.local.", cacheFlush: true, ttl: 120,
                    rdata: .a(ARecord(address: IPv4Address(192, 0, 2, 2))))
            ]
                + ["smb", "afpovertcp", "http", "ssh", "device-info", "nfs"].map { type in
                    DNSResourceRecord(
                        name: try! DNSName(parsing: "NAS._\(type)._tcp.local."), cacheFlush: true, ttl: 120,
                        rdata: .srv(SRVRecord(priority: 0, weight: 0, port: 445, target: "nas.local.")))
                })
        answer.flags.isResponse = true
        _ = measure("mDNS response credited to its machine (7 records)", iterations: 200_000) {
            now = now + .microseconds(10)
            book.published(answer, from: IPAddress("192.0.2.2")!, on: "eth0", now: now)
            return book.count
        }
    }
}
