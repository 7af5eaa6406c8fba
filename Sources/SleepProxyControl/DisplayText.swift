/// Figures and names as every view shows them (`sleepproxyctl`, the status page, Home Assistant), written once so
/// that the three never disagree about a kWh or a host's name.
public enum DisplayText {
    /// `value` rounded to `digits` places (0-9) as plain digits: no exponent, no locale, the same on every box. Not
    /// finite, or too large to be a figure of ours (past 10^15), reads "0" rather than trap.
    public static func fixed(_ value: Double, digits: Int) -> String {
        let digits = max(0, min(digits, 9))
        var scale: Int64 = 1
        for _ in 0..<digits { scale *= 10 }
        let scaled = (value * Double(scale)).rounded()
        guard scaled.isFinite, scaled.magnitude < 1e15 * Double(scale), scaled.magnitude < 9e17 else {
            return "0"
        }
        let units = Int64(scaled)
        var text = (units < 0 ? "-" : "") + String(units.magnitude / UInt64(scale))
        if digits > 0 {
            var fraction = String(units.magnitude % UInt64(scale))
            while fraction.count < digits { fraction = "0" + fraction }
            text += "." + fraction
        }
        return text
    }

    /// Watts as a person gives them: no trailing zeros (3, 3.5, 7.25).
    public static func watts(_ value: Double) -> String {
        var text = Self.fixed(value, digits: 2)
        while text.hasSuffix("0"), text.contains(".") { text.removeLast() }
        if text.hasSuffix(".") { text.removeLast() }
        return text
    }

    /// Hours with one decimal; under an hour, whole minutes (a host that slept ten minutes is not "0.2 h").
    public static func hours(_ seconds: Double) -> String {
        if seconds >= 3600 { return "\(Self.fixed(seconds / 3600, digits: 1)) h" }
        return seconds < 60 ? (seconds > 0 ? "<1 min" : "0 h") : "\(Int(seconds / 60)) min"
    }

    /// Energy: kWh with two decimals from 1 kWh on, whole Wh below (one decimal under 10 Wh).
    public static func energy(_ wattHours: Double) -> String {
        if wattHours >= 1000 { return "\(Self.fixed(wattHours / 1000, digits: 2)) kWh" }
        return "\(Self.fixed(wattHours, digits: wattHours < 10 ? 1 : 0)) Wh"
    }

    /// `nas.local.` as `nas`; any other name without its final dot.
    public static func bareName(_ name: String) -> String {
        var bare = name.hasSuffix(".") ? String(name.dropLast()) : name
        if bare.lowercased().hasSuffix(".local") { bare = String(bare.dropLast(".local".count)) }
        return bare
    }
}
