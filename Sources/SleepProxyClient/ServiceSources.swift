import SleepProxyCore
import SleepProxyWire

extension SleepRegistration.Service {
    /// A service written on the command line: `NAME._type._tcp:PORT[:key=value,...]` (or `_udp`). Nil when it is
    /// not of that shape; the instance name may contain dots and spaces.
    public init?(specification text: String) {
        let parts = text.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count >= 2, let port = UInt16(parts[1]), port > 0 else { return nil }
        let labels = parts[0].split(separator: ".", omittingEmptySubsequences: false)
        guard labels.count >= 3, labels[labels.count - 1] == "_tcp" || labels[labels.count - 1] == "_udp",
            labels[labels.count - 2].hasPrefix("_"),
            labels[labels.count - 2].count > 1
        else { return nil }
        let instanceLabel = labels.dropLast(2).joined(separator: ".")
        guard !instanceLabel.isEmpty,
            let instance = try? DNSName(labels: [
                instanceLabel, String(labels[labels.count - 2]), String(labels[labels.count - 1]), "local",
            ])
        else { return nil }
        let strings = parts.count == 3 ? parts[2].split(separator: ",").map(String.init) : []
        guard let txt = strings.isEmpty ? TXTRecord.empty : try? TXTRecord(strings) else { return nil }
        self.init(instance: instance, port: port, txt: txt)
    }
}
