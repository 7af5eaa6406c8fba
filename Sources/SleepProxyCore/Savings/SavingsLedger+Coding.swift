/// The ledger as text, for its file (docs/savings.md, "On disk"): a header line, then each host's line and its days,
/// oldest first. What is kept is the days; how each host counts now comes back from the engine after a restart,
/// and the time the daemon was stopped counts for nobody.
extension SavingsLedger {
    public static let header = "sleep-proxy-savings 1"
    /// Ours: a ledger at its bounds (1,024 hosts of 400 days, about 31 bytes a day) is about 13 MB of text; a file
    /// past this is not ours or is damaged.
    public static let maximumFileBytes = 16 << 20

    public enum DecodingError: Error, Hashable, Sendable {
        case notALedger
        case tooLarge
        case malformedLine(Int)
        case tooManyHosts
        case tooManyDays(host: String)
        case daysOutOfOrder(line: Int)
    }

    /// Every host with at least one day; days in order; the proxy's own days first.
    public func encoded() -> String {
        var text = Self.header + "\n"
        if !self.running.isEmpty {
            text += "proxy\n"
            for day in self.running {
                text +=
                    "\(day.day) \(day.asleepMilliseconds) \(day.awakeMilliseconds) \(day.wakes) \(day.declinedWakes)\n"
            }
        }
        for key in self.hosts.keys.sorted() {
            let host = self.hosts[key]!
            guard !host.days.isEmpty else { continue }
            text += "host \(key)" + (host.name.map { " \($0)" } ?? "") + "\n"
            for day in host.days {
                text +=
                    "\(day.day) \(day.asleepMilliseconds) \(day.awakeMilliseconds) \(day.wakes) \(day.declinedWakes)\n"
            }
        }
        return text
    }

    /// A ledger read back: every host counting as neither until the engine says otherwise. Throws on anything
    /// that is not such a file, and then nothing of it is taken.
    public init(decoding text: String) throws(DecodingError) {
        guard text.utf8.count <= Self.maximumFileBytes else { throw .tooLarge }
        var lines = text.split(separator: "\n", omittingEmptySubsequences: false)[...]
        guard lines.popFirst() == Substring(Self.header) else { throw .notALedger }
        var hosts: [String: Host] = [:]
        var running: [Day]? = nil
        // nil: no section yet; "" the proxy's own days; otherwise a host's key.
        var current: String? = nil
        for (offset, line) in lines.enumerated() where !line.isEmpty {
            let number = offset + 2
            if line == "proxy" {
                guard running == nil else { throw .malformedLine(number) }
                running = []
                current = ""
                continue
            }
            if line.hasPrefix("host ") {
                let rest = line.dropFirst(5)
                let key = String(rest.prefix { $0 != " " })
                guard !key.isEmpty, hosts[key] == nil, key.utf8.count <= 64 else { throw .malformedLine(number) }
                let name = rest.dropFirst(key.count + 1)
                guard name.utf8.count <= Self.maximumNameBytes else { throw .malformedLine(number) }
                guard hosts.count < Self.maximumHosts else { throw .tooManyHosts }
                hosts[key] = Host(name: name.isEmpty ? nil : String(name), counts: .neither, days: [], lastDay: 0)
                current = key
                continue
            }
            guard let key = current else { throw .malformedLine(number) }
            let fields = line.split(separator: " ")
            guard fields.count == 5, let day = Int(fields[0]), let asleep = Int64(fields[1]),
                let awake = Int64(fields[2]), let wakes = Int(fields[3]), let declined = Int(fields[4]),
                asleep >= 0, awake >= 0, wakes >= 0, declined >= 0,
                asleep <= Self.maximumMillisecondsADay, awake <= Self.maximumMillisecondsADay
            else { throw .malformedLine(number) }
            var entry = Day(day: day)
            entry.asleepMilliseconds = asleep
            entry.awakeMilliseconds = awake
            entry.wakes = wakes
            entry.declinedWakes = declined
            if key.isEmpty {
                guard running!.count < Self.daysKept else { throw .tooManyDays(host: "proxy") }
                if let previous = running!.last, previous.day >= day { throw .daysOutOfOrder(line: number) }
                running!.append(entry)
                continue
            }
            guard hosts[key]!.days.count < Self.daysKept else { throw .tooManyDays(host: key) }
            if let previous = hosts[key]!.days.last, previous.day >= day { throw .daysOutOfOrder(line: number) }
            hosts[key]!.days.append(entry)
            hosts[key]!.lastDay = day
        }
        self.init()
        self.hosts = hosts.filter { !$0.value.days.isEmpty }
        self.running = running ?? []
    }

    /// A file of ledgers one after another (the last whole one, then the changes appended to it: docs/savings.md,
    /// "On disk"), merged in order. A last line without its newline is an append cut short (a power cut in the
    /// middle of it) and is left out; anything else wrong refuses the whole file, the line named from the file's
    /// start. `tornTail` says whether a cut line was left out.
    public init(decodingAppends text: String) throws(DecodingError) {
        guard text.utf8.count <= Self.maximumFileBytes else { throw .tooLarge }
        var whole = Substring(text)
        if let newline = whole.lastIndex(of: "\n") {
            whole = whole[...newline]
        } else {
            whole = ""
        }
        guard whole.hasPrefix(Self.header + "\n") else { throw .notALedger }
        self.init()
        var lineNumber = 0
        var firstLine = 1
        var sectionStart = whole.startIndex
        var index = whole.startIndex
        while let end = whole[index...].firstIndex(of: "\n") {
            lineNumber += 1
            if index != whole.startIndex, whole[index..<end] == Self.header {
                try self.mergeSection(whole[sectionStart..<index], firstLine: firstLine)
                sectionStart = index
                firstLine = lineNumber
            }
            index = whole.index(after: end)
        }
        try self.mergeSection(whole[sectionStart...], firstLine: firstLine)
        self.tornTail = whole.endIndex != text.endIndex
    }

    private mutating func mergeSection(_ section: Substring, firstLine: Int) throws(DecodingError) {
        do {
            self.merge(try SavingsLedger(decoding: String(section)))
        } catch {
            switch error {
            case .malformedLine(let line): throw .malformedLine(line + firstLine - 1)
            case .daysOutOfOrder(let line): throw .daysOutOfOrder(line: line + firstLine - 1)
            default: throw error
            }
        }
    }
}
