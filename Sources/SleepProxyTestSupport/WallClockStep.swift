import Foundation

/// Sets the wall clock of the processes started with `environment`, and only theirs: the lab's way of stepping
/// the clock as NTP steps a Raspberry Pi's, without touching the machine's own (docs/time.md).
///
/// A small preloaded library adds the number of seconds in a file to CLOCK_REALTIME (and to `gettimeofday` and
/// `time`), read at every call, and leaves the monotonic and boot clocks alone, as a real step does. Debian 12's
/// libfaketime (0.9.10) cannot stand in: with the monotonic clocks left alone its `clock_nanosleep` fails with
/// EINVAL, and with them faked its timed waits hang, so the daemon never starts under it.
public final class WallClockStep: Sendable {
    public let directory: URL
    private let library: URL
    private let stepFile: URL

    /// Compiles the library into `directory` (the lab's) with the toolchain's C compiler.
    public init(directory: URL) throws {
        self.directory = directory
        self.library = directory.appendingPathComponent("wall-clock-step.so")
        self.stepFile = directory.appendingPathComponent("wall-clock-step")
        let source = directory.appendingPathComponent("wall-clock-step.c")
        try Self.source.write(to: source, atomically: true, encoding: .utf8)
        let compiler = ["/usr/bin/cc", "/opt/swift/usr/bin/clang", "/usr/bin/clang"].first {
            FileManager.default.isExecutableFile(atPath: $0)
        }
        guard let compiler else { throw CommandError("no C compiler for the wall clock library") }
        try Command.check([compiler, "-shared", "-fPIC", "-O2", "-o", self.library.path, source.path, "-ldl"])
        try self.set(seconds: 0)
    }

    /// The environment that puts a process under this clock.
    public var environment: [String] {
        ["LD_PRELOAD=\(self.library.path)", "WALL_CLOCK_STEP_FILE=\(self.stepFile.path)"]
    }

    /// The clock reads `seconds` away from the machine's from now on (negative: behind it).
    public func set(seconds: Int64) throws {
        try "\(seconds)\n".write(to: self.stepFile, atomically: true, encoding: .utf8)
    }

    static let source = """
        #define _GNU_SOURCE
        #include <dlfcn.h>
        #include <fcntl.h>
        #include <stdlib.h>
        #include <sys/time.h>
        #include <time.h>
        #include <unistd.h>

        static long long step_seconds(void) {
            const char *path = getenv("WALL_CLOCK_STEP_FILE");
            if (path == NULL) return 0;
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd < 0) return 0;
            char text[32] = {0};
            ssize_t count = read(fd, text, sizeof text - 1);
            close(fd);
            return count > 0 ? strtoll(text, NULL, 10) : 0;
        }

        int clock_gettime(clockid_t clock, struct timespec *now) {
            static int (*real)(clockid_t, struct timespec *);
            if (real == NULL) real = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
            int result = real(clock, now);
            if (result == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE)) now->tv_sec += step_seconds();
            return result;
        }

        int gettimeofday(struct timeval *restrict now, void *restrict zone) {
            struct timespec spec;
            (void)zone;
            if (clock_gettime(CLOCK_REALTIME, &spec) != 0) return -1;
            now->tv_sec = spec.tv_sec;
            now->tv_usec = spec.tv_nsec / 1000;
            return 0;
        }

        time_t time(time_t *now) {
            struct timespec spec;
            clock_gettime(CLOCK_REALTIME, &spec);
            if (now != NULL) *now = spec.tv_sec;
            return spec.tv_sec;
        }

        """
}
