/// How many elements every collection inside a value holds, found by reflection, so that a long run can show that
/// no table of the engine grows (docs/long-running.md) without a list of tables that the next one added to the engine
/// would be missing from.
///
/// Paths name stored properties from the root (`registrar.store.owners`); a collection's elements add `[]`, so
/// `registrar.store.owners[].value.records` is the records of every held host together. Collections of plain values
/// (bytes, numbers) are counted but not entered.
public enum EngineCensus {
    /// Deeper than any path in the engine (about 12); a guard against a cycle through a class, not a limit met.
    static let maximumDepth = 40

    public static func count(_ value: Any) -> [String: Int] {
        var counts: [String: Int] = [:]
        self.walk(Mirror(reflecting: value), path: "", depth: 0, into: &counts)
        return counts
    }

    static func walk(_ mirror: Mirror, path: String, depth: Int, into counts: inout [String: Int]) {
        guard depth < Self.maximumDepth else { return }
        switch mirror.displayStyle {
        case .collection, .set, .dictionary:
            counts[path, default: 0] += mirror.children.count
            for child in mirror.children {
                let element = Mirror(reflecting: child.value)
                // Elements are all of one type: if the first holds nothing, none does.
                if element.children.isEmpty { break }
                self.walk(element, path: path + "[]", depth: depth + 1, into: &counts)
            }
        default:
            for child in mirror.children {
                let label = child.label.map { $0.hasPrefix("_") ? String($0.dropFirst()) : $0 } ?? "?"
                let next = mirror.displayStyle == .optional || mirror.displayStyle == .enum ? path : path + "." + label
                self.walk(Mirror(reflecting: child.value), path: next, depth: depth + 1, into: &counts)
            }
        }
    }
}
