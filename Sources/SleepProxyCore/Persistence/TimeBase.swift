/// How the monotonic timeline of this run relates to the outside world, for writing times to disk and reading
/// them back after a restart.
///
/// `Timestamp`s come from CLOCK_BOOTTIME, which is meaningless after a reboot but immune to wall-clock changes
/// within one boot. Stored entries therefore carry both: the boot ID and the boot-clock time, used when the
/// proxy restarts within the same boot (a crash, an upgrade), and the wall-clock time, used after a reboot.
public struct TimeBase: Hashable, Sendable {
    /// /proc/sys/kernel/random/boot_id, 16 bytes.
    public var bootID: [UInt8]
    /// The boot-clock reading at `wallNanoseconds`.
    public var now: Timestamp
    /// Nanoseconds since the Unix epoch at `now`.
    public var wallNanoseconds: Int64

    public init(bootID: [UInt8], now: Timestamp, wallNanoseconds: Int64) {
        self.bootID = bootID
        self.now = now
        self.wallNanoseconds = wallNanoseconds
    }

    public func wall(of timestamp: Timestamp) -> Int64 {
        self.wallNanoseconds &+ (timestamp.nanoseconds &- self.now.nanoseconds)
    }
}
