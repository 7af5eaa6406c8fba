import Foundation
import SleepProxyClient
import SleepProxyCore
import SleepProxyWire

#if canImport(Glibc)
    import Glibc
#endif

/// Asks this host's own mDNS responder (avahi-daemon) what it publishes, over the wire: multicast questions from
/// port 5353 beside it, answered by multicast, heard back through the loopback of our own membership. What comes
/// back is byte for byte what every other machine on the link hears, TXT strings in their wire order and the
/// responder's own TTLs included, and only the answers sent from this host's addresses count.
enum OwnResponder {
    /// When questions go out, in seconds from the start: the first round, then again for what is still missing
    /// (a responder multicasts a record at most once a second, RFC 6762 §6.2, so one that another machine just
    /// asked for may come back only in a later round).
    static let rounds: [Double] = [0, 0.3, 0.8, 1.4]
    /// How long answers are collected in all.
    static let window = 2.0
    /// Questions per name at most, and names asked for at most: bounds against a LAN that answers with floods.
    static let maximumAsks = 3
    static let maximumNames = 256
    static let maximumPackets = 512

    static func published(on link: Link) throws -> PublishedRecords {
        var published = PublishedRecords(addresses: Set(link.addresses))
        guard let source = link.ipv4.first else { return published }
        let fd = try UDP.socket(bound: source, link: link, port: 5353, reuse: true)
        defer { close(fd) }
        try UDP.joinMDNSGroup(fd, source: source)
        var asked: [DNSQuestion: Int] = [:]
        let start = Date()
        let deadline = start.addingTimeInterval(Self.window)
        var round = 0
        var packets = 0
        while Date() < deadline, packets < Self.maximumPackets {
            if round < Self.rounds.count, Date() >= start.addingTimeInterval(Self.rounds[round]) {
                let questions = self.questions(published: published, link: link).filter {
                    (asked[$0] ?? 0) < Self.maximumAsks && asked.count < Self.maximumNames
                }
                for question in questions { asked[question, default: 0] += 1 }
                // One question per packet is never too big; several fit in one packet while they are few.
                for chunk in stride(from: 0, to: questions.count, by: 16).map({
                    Array(questions[$0..<min($0 + 16, questions.count)])
                }) {
                    UDP.send(fd, DNSMessage(questions: chunk).encoded(options: .mdns), to: .mdnsGroup, port: 5353)
                }
                round += 1
            }
            let next =
                round < Self.rounds.count ? min(deadline, start.addingTimeInterval(Self.rounds[round])) : deadline
            guard let (bytes, from) = UDP.receiveFrom(fd, until: next) else { continue }
            packets += 1
            guard let message = try? DNSMessage(decoding: bytes) else { continue }
            published.add(message, from: .v4(from))
        }
        return published
    }

    /// What to ask for now: the list of service types, the host's name and reverse names, then every type and
    /// instance learnt so far that has not been answered yet.
    static func questions(published: PublishedRecords, link: Link) -> [DNSQuestion] {
        var questions = [DNSQuestion(name: PublishedRecords.servicesName, type: .ptr)]
        for name in published.hostNames.isEmpty ? [link.hostName] : published.hostNames {
            questions.append(DNSQuestion(name: name, type: .any))
        }
        for address in link.addresses where !address.isLinkLocal {
            questions.append(DNSQuestion(name: ReverseMapping.name(for: address), type: .ptr))
        }
        for type in published.serviceTypes { questions.append(DNSQuestion(name: type, type: .ptr)) }
        let answered = Set(published.instances)
        for instance in published.announcedInstances where !answered.contains(instance) {
            questions.append(DNSQuestion(name: instance, type: .any))
        }
        return questions
    }
}
