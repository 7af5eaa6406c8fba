import SleepProxyCore
import SleepProxyWire

/// The records a host's own mDNS responder publishes for the host, picked from the responses it sent: the proxy
/// must answer exactly what the host answered. Read off the wire, they keep everything a printed
/// listing loses: the order of the TXT strings and every byte of them, the cache-flush bits, the responder's
/// own TTLs, and no address the responder does not publish (avahi-daemon publishes no IPv6 link-local address
/// for the host name).
public struct PublishedRecords: Sendable {
    /// At most this many records are kept: Apple's proxy takes 10,000 in all (docs/protocol.md §7), and a host
    /// publishing more than a few hundred is a flood, not a host.
    public static let maximumRecords = 400

    /// The host's names: those whose A/AAAA records give one of the host's addresses.
    public private(set) var hostNames: [DNSName] = []
    private var records: [DNSResourceRecord] = []
    private var seen: Set<RecordIdentity> = []

    /// How many records were taken in (at most `maximumRecords`).
    public var storedCount: Int { self.records.count }

    /// `addresses`: the host's own addresses; only responses sent from one of them are the host's.
    public let addresses: Set<IPAddress>

    public init(addresses: Set<IPAddress>) {
        self.addresses = addresses
    }

    /// Takes in one mDNS packet; a packet that is not a response from one of the host's addresses is ignored.
    public mutating func add(_ message: DNSMessage, from source: IPAddress) {
        guard message.flags.isResponse, self.addresses.contains(source) else { return }
        for record in message.answers + message.additionals
        where record.ttl > 0 && record.type != .opt && record.type != .nsec {
            guard self.records.count < Self.maximumRecords else { return }
            if self.seen.insert(RecordIdentity(record)).inserted { self.records.append(record) }
            switch record.rdata {
            case .a(let a) where self.addresses.contains(.v4(a.address)) && !self.hostNames.contains(record.name):
                self.hostNames.append(record.name)
            case .aaaa(let aaaa)
            where self.addresses.contains(.v6(aaaa.address)) && !self.hostNames.contains(record.name):
                self.hostNames.append(record.name)
            default:
                break
            }
        }
    }

    /// The service instances the host offers: the owners of SRV records that point at one of its names.
    public var instances: [DNSName] {
        var result: [DNSName] = []
        for record in self.records {
            if case .srv(let srv) = record.rdata, self.hostNames.contains(srv.target), !result.contains(record.name) {
                result.append(record.name)
            }
        }
        return result
    }

    /// Service types seen in `_services._dns-sd._udp` answers from the host (to be asked for their instances).
    public var serviceTypes: [DNSName] {
        var result: [DNSName] = []
        for record in self.records where record.name == Self.servicesName {
            if case .ptr(let ptr) = record.rdata, !result.contains(ptr.target) { result.append(ptr.target) }
        }
        return result
    }

    /// Instances named in the host's answers for `type` (to be asked for their SRV and TXT).
    public var announcedInstances: [DNSName] {
        let types = Set(self.serviceTypes)
        var result: [DNSName] = []
        for record in self.records where types.contains(record.name) {
            if case .ptr(let ptr) = record.rdata, !result.contains(ptr.target) { result.append(ptr.target) }
        }
        return result
    }

    public static let servicesName: DNSName = "_services._dns-sd._udp.local."

    /// The host's own records in the order Apple's client registers them (docs/protocol.md §2.4): reverse-mapping
    /// PTRs, then for each service its TXT, the `_services._dns-sd._udp` PTR, the type PTR and subtype PTRs and
    /// its SRV, then the records of the host name. A record that belongs to nothing the host offers (another
    /// host's service in a shared answer, a type with no instance of this host) is left out.
    public var registrationRecords: [DNSResourceRecord] {
        let names = Set(self.hostNames)
        let instances = self.instances
        var result: [DNSResourceRecord] = []
        for record in self.records {
            if case .ptr(let ptr) = record.rdata, ReverseMapping.address(from: record.name) != nil,
                names.contains(ptr.target)
            {
                result.append(record)
            }
        }
        var typesDone: Set<DNSName> = []
        for instance in instances {
            let type = instance.parent
            result += self.records.filter { $0.name == instance && $0.type == .txt }
            if typesDone.insert(type).inserted {
                result += self.records.filter { record in
                    guard record.name == Self.servicesName, case .ptr(let ptr) = record.rdata else { return false }
                    return ptr.target == type
                }
            }
            // The type PTR and any subtype PTR (`_sub._type._tcp.local.`) naming this instance.
            result += self.records.filter { record in
                guard record.name != Self.servicesName, ReverseMapping.address(from: record.name) == nil,
                    case .ptr(let ptr) = record.rdata
                else { return false }
                return ptr.target == instance
            }
            result += self.records.filter { $0.name == instance && $0.type == .srv }
        }
        result += self.records.filter { names.contains($0.name) }
        return result
    }
}
