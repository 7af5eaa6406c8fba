import SleepProxyWire

extension SleepRegistration.Service {
    /// A service written on the command line: `NAME._type._tcp:PORT[:key=value,...]` (or `_udp`). Nil when it is
    /// not of that shape; the instance name may contain dots and spaces.
    public init?(specification text: String) {
        let parts = text.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false)
        guard parts.count >= 2, let port = UInt16(parts[1]), port > 0 else { return nil }
        let labels = parts[0].split(separator: ".", omittingEmptySubsequences: false)
        guard labels.count >= 3, labels[labels.count - 1] == "_tcp" || labels[labels.count - 1] == "_udp", labels[labels.count - 2].hasPrefix("_"),
            labels[labels.count - 2].count > 1
        else { return nil }
        let instanceLabel = labels.dropLast(2).joined(separator: ".")
        guard !instanceLabel.isEmpty,
            let instance = try? DNSName(labels: [instanceLabel, String(labels[labels.count - 2]), String(labels[labels.count - 1]), "local"])
        else { return nil }
        let strings = parts.count == 3 ? parts[2].split(separator: ",").map(String.init) : []
        guard let txt = strings.isEmpty ? TXTRecord.empty : try? TXTRecord(strings) else { return nil }
        self.init(instance: instance, port: port, txt: txt)
    }
}

/// The output of `avahi-browse --all --resolve --parsable --terminate --no-db-lookup`, read for the services
/// avahi-daemon publishes for one host on one interface.
public enum AvahiBrowseOutput {
    /// Resolved lines look like `=;eth0;IPv4;My\032Files;_smb._tcp;local;nas.local;192.0.2.9;445;"a=b" "c=d"`.
    /// Lines for other hosts, interfaces, families or domains, and malformed lines, are skipped.
    public static func services(in output: String, hostName: DNSName, interface: String) -> [SleepRegistration.Service] {
        let host = self.withoutTrailingDot(hostName.description.lowercased())
        var result: [SleepRegistration.Service] = []
        for line in output.split(separator: "\n") where line.hasPrefix("=;") {
            let fields = line.split(separator: ";", maxSplits: 9, omittingEmptySubsequences: false).map(String.init)
            guard fields.count == 10, fields[1] == interface, fields[2] == "IPv4", fields[5] == "local",
                self.withoutTrailingDot(self.unescape(fields[6]).lowercased()) == host,
                let port = UInt16(fields[8]),
                let instance = try? DNSName(labels: [self.unescape(fields[3])] + fields[4].split(separator: ".").map(String.init) + ["local"])
            else { continue }
            let strings = self.txtStrings(fields[9])
            let txt = strings.isEmpty ? TXTRecord.empty : ((try? TXTRecord(strings)) ?? .empty)
            guard !result.contains(where: { $0.instance == instance }) else { continue }
            result.append(SleepRegistration.Service(instance: instance, port: port, txt: txt))
        }
        return result
    }

    static func withoutTrailingDot(_ text: String) -> String { text.hasSuffix(".") ? String(text.dropLast()) : text }

    /// avahi-browse writes `\DDD` (decimal) for bytes other than letters and digits, and `\.` / `\\` for those.
    public static func unescape(_ text: String) -> String {
        var bytes: [UInt8] = []
        var rest = Array(text.utf8)[...]
        while let byte = rest.first {
            rest = rest.dropFirst()
            guard byte == UInt8(ascii: "\\") else {
                bytes.append(byte)
                continue
            }
            let digits = rest.prefix(3)
            if digits.count == 3, digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let value = UInt8(String(decoding: digits, as: UTF8.self)) {
                bytes.append(value)
                rest = rest.dropFirst(3)
            } else if let next = rest.first {
                bytes.append(next)
                rest = rest.dropFirst()
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// `"a=b" "c=d"` → ["a=b", "c=d"] (a backslash escapes the next character).
    public static func txtStrings(_ text: String) -> [String] {
        var strings: [String] = []
        var current: String? = nil
        var escaped = false
        for character in text {
            guard var value = current else {
                if character == "\"" { current = "" }
                continue
            }
            if escaped {
                value.append(character)
                escaped = false
            } else if character == "\\" {
                escaped = true
            } else if character == "\"" {
                strings.append(value)
                current = nil
                continue
            } else {
                value.append(character)
            }
            current = value
        }
        return strings
    }
}
