/// The instance label a sleep proxy advertises under `_sleep-proxy._udp.local.` (docs/protocol.md §1.2):
///
///     "II-PP-MM-TT.F Nice Name"     e.g. "70-35-60-63.1 Living Room"
///
/// II intent, PP portability, MM marginal power, TT total power (each 10-99, lower is better), F a feature digit
/// (bit value 1: TCP keepalive offload). Clients rank proxies by the six-digit number IIPPMM, lowest first; TT is
/// ignored (docs/protocol.md §1.3).
public struct SleepProxyName: Hashable, Sendable, CustomStringConvertible {
    /// Metrics are two decimal digits (docs/protocol.md §1.2).
    public static let metricRange: ClosedRange<Int> = 10...99
    /// What Apple's clients give a name they cannot rank; it is never chosen (docs/protocol.md §1.3).
    public static let unrankable = 1_000_000
    /// RFC 1035 §2.3.4: the label, nice name included, is at most 63 bytes.
    public static let maximumLabelLength = 63

    /// docs/protocol.md §1.2 `enum mDNSSleepProxyMetric`.
    public enum Intent: Int, Sendable, CaseIterable {
        case dedicated = 20
        case primaryInfrastructureHardware = 30
        case primaryInfrastructureSoftware = 40
        case secondaryInfrastructureHardware = 50
        case secondaryInfrastructureSoftware = 60
        case incidentalHardware = 70
        case incidentalSoftware = 80
    }

    public var intent: Int
    public var portability: Int
    public var marginalPower: Int
    public var totalPower: Int
    public var features: Int
    public var niceName: String

    public enum Problem: Error, Equatable, Sendable {
        case metricOutOfRange(String, Int)
        case featureOutOfRange(Int)
        case labelTooLong(Int)
    }

    /// Defaults right for a small dedicated always-on box (docs/protocol.md §1.2 scales): intent 20 (a dedicated
    /// proxy); portability 40 = 100 − 10·log10(10⁶ mg), about a kilogram (a NAS or mini PC; a 50 g Raspberry Pi
    /// would be 53); marginal power 10, the scale's floor, because a box that never sleeps spends nothing extra on
    /// proxying; total power 65 = 10·log10(3·10⁶ µW), about 3 W. Features 0 until keepalive offload exists.
    public init(
        intent: Int = Intent.dedicated.rawValue, portability: Int = 40, marginalPower: Int = 10, totalPower: Int = 65,
        features: Int = 0, niceName: String
    ) throws(Problem) {
        for (name, value) in [
            ("intent", intent), ("portability", portability), ("marginal power", marginalPower),
            ("total power", totalPower),
        ]
        where !SleepProxyName.metricRange.contains(value) {
            throw .metricOutOfRange(name, value)
        }
        guard (0...9).contains(features) else { throw .featureOutOfRange(features) }
        self.intent = intent
        self.portability = portability
        self.marginalPower = marginalPower
        self.totalPower = totalPower
        self.features = features
        self.niceName = niceName
        let length = self.description.utf8.count
        guard length <= SleepProxyName.maximumLabelLength else { throw .labelTooLong(length) }
    }

    public var description: String {
        "\(self.intent)-\(self.portability)-\(self.marginalPower)-\(self.totalPower).\(self.features) \(self.niceName)"
    }

    /// IIPPMM as clients compute it.
    public var metric: Int { self.intent * 10_000 + self.portability * 100 + self.marginalPower }

    /// How a client ranks an advertised label (docs/protocol.md §1.3), without Apple's flaw: Apple checks only that
    /// characters 0, 1, 3 and 4 are digits and then reads 6 and 7 as digits anyway, so "20-30-xx…" gets a
    /// meaningless score. Here every digit the score uses must be a digit, or the name is unrankable.
    public static func metric(ofLabel label: [UInt8]) -> Int {
        func digit(_ index: Int) -> Int? {
            guard index < label.count, label[index] >= 0x30, label[index] <= 0x39 else { return nil }
            return Int(label[index] - 0x30)
        }
        // A name still carrying the unconfigured prototype metrics "-99-99-99" is never chosen.
        if label.count >= 11, Array(label[2..<11]) == Array("-99-99-99".utf8) { return unrankable }
        guard label.count >= 8, label[2] == UInt8(ascii: "-"), label[5] == UInt8(ascii: "-"),
            let a = digit(0), let b = digit(1), let c = digit(3), let d = digit(4), let e = digit(6), let f = digit(7)
        else { return unrankable }
        return a * 100_000 + b * 10_000 + c * 1000 + d * 100 + e * 10 + f
    }

    /// The feature digit: the character after the '.' at offset 11, when present (docs/protocol.md §1.3).
    public static func features(ofLabel label: [UInt8]) -> Int {
        guard label.count >= 13, label[11] == UInt8(ascii: "."), label[12] >= 0x30, label[12] <= 0x39 else { return 0 }
        return Int(label[12] - 0x30)
    }

    /// Parses a well-formed label; nil for anything else (a client can still rank it with `metric(ofLabel:)`).
    public init?(label: String) {
        let bytes = Array(label.utf8)
        guard bytes.count >= 13, bytes[8] == UInt8(ascii: "-"), bytes[11] == UInt8(ascii: "."),
            SleepProxyName.metric(ofLabel: bytes) != SleepProxyName.unrankable,
            let total = Int(String(decoding: bytes[9..<11], as: UTF8.self)),
            bytes[12] >= 0x30, bytes[12] <= 0x39
        else { return nil }
        let rest = bytes.count > 13 ? bytes[13...] : []
        guard rest.isEmpty || rest.first == UInt8(ascii: " ") else { return nil }
        let metric = SleepProxyName.metric(ofLabel: bytes)
        do {
            try self.init(
                intent: metric / 10_000, portability: metric / 100 % 100, marginalPower: metric % 100,
                totalPower: total,
                features: Int(bytes[12] - 0x30), niceName: String(decoding: rest.dropFirst(), as: UTF8.self)
            )
        } catch {
            return nil
        }
    }

    /// Orders advertised labels the way a client should choose among them: lowest metric first, unrankable ones
    /// dropped; among equal metrics a proxy with a non-zero feature digit first (what Apple's reordering intends;
    /// its code compares with ≥ and so lets features override better metrics, which is not copied); then by label,
    /// so the order is stable.
    public static func rank(_ labels: [String]) -> [String] {
        labels
            .map { (label: $0, metric: metric(ofLabel: Array($0.utf8)), features: features(ofLabel: Array($0.utf8))) }
            .filter { $0.metric != unrankable }
            .sorted { lhs, rhs in
                if lhs.metric != rhs.metric { return lhs.metric < rhs.metric }
                if (lhs.features != 0) != (rhs.features != 0) { return lhs.features != 0 }
                return lhs.label < rhs.label
            }
            .map(\.label)
    }
}
