/// The daemon's configuration file: one `setting = value` per line, `#` starts a comment, blank lines are
/// ignored, a setting that takes several values (`interface`, `wake-rule`) may repeat. Setting names are the
/// command-line flags without their dashes; flags on the command line win over the file.
public enum ConfigFile {
    public struct Entry: Hashable, Sendable {
        public var key: String
        public var value: String
        public var line: Int

        public init(key: String, value: String, line: Int) {
            self.key = key
            self.value = value
            self.line = line
        }
    }

    public enum Kind: Sendable {
        /// `--key value`, once.
        case single
        /// `--key value`, repeatable.
        case repeated
        /// `--key` when the value is true (true/false, yes/no, on/off).
        case flag
    }

    public struct Problem: Error, CustomStringConvertible, Equatable, Sendable {
        public var line: Int
        public var message: String
        public var description: String { "line \(self.line): \(self.message)" }
    }

    /// Splits the file into entries, checking only the shape and that each setting is known and not repeated.
    public static func parse(_ text: String, settings: [String: Kind]) throws(Problem) -> [Entry] {
        var entries: [Entry] = []
        var seen: [String: Int] = [:]
        for (index, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let number = index + 1
            var line = Substring(raw)
            if let hash = line.firstIndex(of: "#") { line = line[..<hash] }
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if trimmed.isEmpty { continue }
            guard let equals = trimmed.firstIndex(of: "=") else {
                throw Problem(line: number, message: "expected \"setting = value\", found \"\(trimmed)\"")
            }
            let key = trimmed[..<equals].trimmingCharacters(in: .whitespaces).lowercased()
            var value = trimmed[trimmed.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            if value.count >= 2, value.hasPrefix("\""), value.hasSuffix("\"") {
                value = String(value.dropFirst().dropLast())
            }
            guard let kind = settings[key] else {
                throw Problem(
                    line: number,
                    message: "unknown setting \"\(key)\" (known: \(settings.keys.sorted().joined(separator: ", ")))")
            }
            guard !value.isEmpty else { throw Problem(line: number, message: "\(key) needs a value") }
            if kind != .repeated, let first = seen[key] {
                throw Problem(line: number, message: "\(key) is already set on line \(first)")
            }
            if kind == .flag, Self.bool(value) == nil {
                throw Problem(line: number, message: "\(key) takes true or false, not \"\(value)\"")
            }
            seen[key] = number
            entries.append(Entry(key: key, value: value, line: number))
        }
        return entries
    }

    /// The command-line arguments an entry stands for.
    public static func arguments(for entry: Entry, kind: Kind) -> [String] {
        switch kind {
        // One argument, `--key=value`: a value that starts with a dash (a wake rule such as `-udp/137`) must not be
        // taken for a flag.
        case .single, .repeated: return ["--\(entry.key)=\(entry.value)"]
        case .flag: return Self.bool(entry.value) == true ? ["--\(entry.key)"] : []
        }
    }

    static func bool(_ text: String) -> Bool? {
        switch text.lowercased() {
        case "true", "yes", "on", "1": return true
        case "false", "no", "off", "0": return false
        default: return nil
        }
    }
}

extension Substring {
    fileprivate func trimmingCharacters(in _: WhitespaceSet) -> String {
        var text = self
        while let first = text.first, first == " " || first == "\t" || first == "\r" { text = text.dropFirst() }
        while let last = text.last, last == " " || last == "\t" || last == "\r" { text = text.dropLast() }
        return String(text)
    }
}

extension String {
    fileprivate func trimmingCharacters(in set: WhitespaceSet) -> String { Substring(self).trimmingCharacters(in: set) }
}

private enum WhitespaceSet { case whitespaces }
