import FoundationEssentials
import SleepProxyCore

#if canImport(Glibc)
    import Glibc
#endif

/// The clocks the core's `Timestamp`s and the journal's `TimeBase` come from.
public enum SystemClock {
    /// CLOCK_BOOTTIME: monotonic, counts through suspend, never stepped by NTP or `date`.
    public static func now() -> Timestamp {
        var spec = timespec()
        clock_gettime(CLOCK_BOOTTIME, &spec)
        return Timestamp(nanoseconds: Int64(spec.tv_sec) * 1_000_000_000 + Int64(spec.tv_nsec))
    }

    public static func wallNanoseconds() -> Int64 {
        var spec = timespec()
        clock_gettime(CLOCK_REALTIME, &spec)
        return Int64(spec.tv_sec) * 1_000_000_000 + Int64(spec.tv_nsec)
    }

    /// The kernel's random per-boot UUID; a restart within the same boot can trust CLOCK_BOOTTIME values.
    /// Read once: it cannot change while this process runs, and the engine needs it for every journal append.
    public static func bootID() -> [UInt8] { cachedBootID }

    private static let cachedBootID: [UInt8] = readBootID()

    private static func readBootID() -> [UInt8] {
        // Unreadable: a random ID, which matches no stored one, so restored times go through the wall-clock rule
        // instead of trusting a boot clock that may have restarted (a fixed fallback would match itself).
        let unknown = (0..<16).map { _ in UInt8.random(in: 0...255) }
        guard let text = try? String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8) else {
            return unknown
        }
        let hex = Array(text.filter(\.isHexDigit).utf8)
        guard hex.count == 32 else { return unknown }
        return stride(from: 0, to: 32, by: 2).map {
            UInt8(String(decoding: hex[$0..<$0 + 2], as: UTF8.self), radix: 16) ?? 0
        }
    }

    public static func timeBase() -> TimeBase {
        TimeBase(bootID: self.bootID(), now: self.now(), wallNanoseconds: self.wallNanoseconds())
    }
}
