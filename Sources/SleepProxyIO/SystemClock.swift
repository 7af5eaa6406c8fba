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

    /// Where the wall clock stands in the box's calendar, in its time zone (TZ, /etc/localtime): the savings
    /// ledger's days (docs/savings.md, "Time and days"). `wallNanoseconds` for a given moment (tests).
    public static func localDayTime(wallNanoseconds: Int64? = nil) -> LocalDayTime {
        let nanoseconds = wallNanoseconds ?? self.wallNanoseconds()
        var seconds = time_t(nanoseconds / 1_000_000_000)
        var parts = tm()
        // The offset of the moment itself, so a change to or from summer time files each side on its own day.
        let offset = localtime_r(&seconds, &parts) == nil ? 0 : Int64(parts.tm_gmtoff)
        let localMilliseconds = nanoseconds / 1_000_000 + offset * 1_000
        let day =
            localMilliseconds >= 0 ? localMilliseconds / 86_400_000 : (localMilliseconds - 86_399_999) / 86_400_000
        return LocalDayTime(day: Int(day), millisecondsIntoDay: localMilliseconds - day * 86_400_000)
    }

    public static func timeBase() -> TimeBase {
        TimeBase(bootID: self.bootID(), now: self.now(), wallNanoseconds: self.wallNanoseconds())
    }
}
