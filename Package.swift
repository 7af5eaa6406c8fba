// swift-tools-version:6.2
import PackageDescription

#if os(Linux)
    import Glibc
#endif

/// `SLEEPPROXY_STRICT=1` (set by `scripts/test` and CI) turns every warning in our own targets into an error.
/// It is opt-in so that a user building a release on a newer compiler is not stopped by a new warning.
let strict = Context.environment["SLEEPPROXY_STRICT"] == "1"
let swiftSettings: [SwiftSetting] = strict ? [.treatAllWarnings(as: .error)] : []

/// The daemon's release link, for a small resident size on a small box (docs/memory.md): lld packs the
/// position-independent executable's relocations (DT_RELR, about 2 MB of RELA entries that every start reads
/// and keeps mapped, down to kilobytes; the executable stays position-independent, so ASLR keeps working), and
/// no symbol table is exported (`-static-stdlib` asks for one; nothing looks symbols up in the daemon). DT_RELR
/// needs glibc 2.36 (Debian 12) where it runs; a build on an older glibc links without it, so that what it builds
/// runs where it was built.
let daemonLinkerSettings: [LinkerSetting] = {
    #if os(Linux)
        var version = [CChar](repeating: 0, count: 64)
        _ = confstr(Int32(_CS_GNU_LIBC_VERSION), &version, version.count)
        let text = String(decoding: version.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        let numbers = text.split(separator: " ").last?.split(separator: ".").compactMap { Int($0) }
        let packsRelocations = (numbers?.count ?? 0) >= 2 && (numbers![0], numbers![1]) >= (2, 36)
        let flags =
            ["-Xlinker", "--no-export-dynamic"]
            + (packsRelocations ? ["-use-ld=lld", "-Xlinker", "-z", "-Xlinker", "pack-relative-relocs"] : [])
        return [.unsafeFlags(flags, .when(platforms: [.linux], configuration: .release))]
    #else
        return []
    #endif
}()

let package = Package(
    name: "sleep-proxy",
    products: [
        .executable(name: "sleepproxyd", targets: ["sleepproxyd"]),
        .executable(name: "sleepproxyctl", targets: ["sleepproxyctl"]),
        .executable(name: "sleepproxy-client", targets: ["sleepproxy-client"]),
        // Exported so that the fuzzing package in Fuzz/ can link the codecs without building our executables.
        .library(name: "SleepProxyWire", targets: ["SleepProxyWire"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.0"),
        .package(url: "https://github.com/apple/swift-collections.git", from: "1.1.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.5.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.1.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.0"),
    ],
    targets: [
        // Codecs: bytes in, values out, and back. NIOCore only (ByteBuffer); no sockets, no clocks.
        .target(
            name: "SleepProxyWire",
            dependencies: [.product(name: "NIOCore", package: "swift-nio")],
            swiftSettings: swiftSettings
        ),
        // Pure logic: no sockets, no clocks; time comes in as `now:` and work goes out as actions.
        .target(
            name: "SleepProxyCore",
            dependencies: [
                "SleepProxyWire", .product(name: "HeapModule", package: "swift-collections"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // What the sleep client builds and reads, pure: the records its host publishes, services written by
        // hand, the announcements after a wake. No sockets, no clocks.
        .target(
            name: "SleepProxyClient", dependencies: ["SleepProxyCore", "SleepProxyWire"], swiftSettings: swiftSettings),
        // Linux headers that Glibc does not export (sockaddr_ll, sock_fprog, ETH_P_*, setns).
        .target(name: "CSleepProxyLinux"),
        // libnl-3 (LGPL-2.1, linked dynamically) for neighbour entries and link/address notifications.
        .systemLibrary(
            name: "CNetlink", pkgConfig: "libnl-route-3.0", providers: [.apt(["libnl-3-dev", "libnl-route-3-dev"])]),
        // What the kernel says about this machine (its interfaces, addresses and MACs), without NIO: shared by
        // the daemon's I/O layer and the sleep client.
        .target(
            name: "SleepProxySystem",
            dependencies: ["SleepProxyCore", "SleepProxyWire", "CSleepProxyLinux"],
            swiftSettings: swiftSettings
        ),
        // Thin adapters between the kernel and the pure layers.
        .target(
            name: "SleepProxyIO",
            dependencies: [
                "SleepProxyCore", "SleepProxyWire", "SleepProxySystem", "CSleepProxyLinux", "CNetlink",
                "SleepProxyControl", "SleepProxyStatusPage", "SleepProxyHomeAssistant",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "CoreMetrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
            ],
            swiftSettings: swiftSettings
        ),
        // Home Assistant through MQTT discovery, pure: the MQTT client session's rules, and the retained topics
        // that show the proxy and its hosts, built from the control protocol's values. No sockets, no clocks.
        .target(
            name: "SleepProxyHomeAssistant",
            dependencies: ["SleepProxyWire", "SleepProxyCore", "SleepProxyControl"],
            swiftSettings: swiftSettings
        ),
        // Test-only: network namespaces, a bridged LAN, processes started and stopped by PID.
        .target(
            name: "SleepProxyTestSupport",
            dependencies: [
                "SleepProxyCore", "SleepProxyWire", "SleepProxySystem", "CSleepProxyLinux",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "HeapModule", package: "swift-collections"),
            ],
            swiftSettings: swiftSettings
        ),
        // The admin protocol spoken between sleepproxyd and sleepproxyctl.
        .target(name: "SleepProxyControl", swiftSettings: swiftSettings),
        // The status page: HTML, SVG and routes built from the control protocol's values; no sockets.
        .target(name: "SleepProxyStatusPage", dependencies: ["SleepProxyControl"], swiftSettings: swiftSettings),
        .executableTarget(
            name: "sleepproxyd",
            dependencies: [
                "SleepProxyIO", "SleepProxyCore", "SleepProxyControl", "SleepProxySystem", "SleepProxyWire",
                "SleepProxyHomeAssistant",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings,
            linkerSettings: daemonLinkerSettings
        ),
        .executableTarget(
            name: "sleepproxyctl",
            dependencies: [
                "SleepProxyControl",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: swiftSettings
        ),
        // The Linux sleep client: registers this host with a sleep proxy before it suspends.
        .executableTarget(
            name: "sleepproxy-client",
            dependencies: [
                "SleepProxyClient", "SleepProxyCore", "SleepProxyWire", "SleepProxySystem", "SleepProxyControl",
                "CSleepProxyLinux", .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: swiftSettings
        ),
        // Prints throughput and latency figures; run with `swift run -c release sleepproxy-bench`.
        .executableTarget(
            name: "sleepproxy-bench",
            dependencies: [
                "SleepProxyWire", "SleepProxyCore", "SleepProxyIO", "SleepProxyTestSupport", "CSleepProxyLinux",
                "SleepProxyControl", "SleepProxyStatusPage", "SleepProxySystem", "SleepProxyHomeAssistant",
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SleepProxyWireTests",
            dependencies: ["SleepProxyWire", "SleepProxyTestSupport", .product(name: "NIOCore", package: "swift-nio")],
            resources: [.copy("Fixtures")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SleepProxyCoreTests",
            dependencies: ["SleepProxyCore", "SleepProxyWire", "SleepProxyTestSupport"],
            resources: [.copy("Fixtures")],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SleepProxyClientTests",
            dependencies: ["SleepProxyClient", "SleepProxyCore", "SleepProxyWire"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SleepProxyIOTests",
            dependencies: [
                "SleepProxyIO", "SleepProxyCore", "SleepProxyWire", "SleepProxyControl", "SleepProxyTestSupport",
                "SleepProxySystem",
                "CSleepProxyLinux",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        // End to end: daemons, clients and third-party software in network namespaces the tests build (root), the
        // command-line tools and the packaging. Apart from the unit tests so that each can be run on its own.
        .testTarget(
            name: "SleepProxyLabTests",
            dependencies: [
                "SleepProxyIO", "SleepProxyCore", "SleepProxyWire", "SleepProxyControl", "SleepProxyTestSupport",
                "CSleepProxyLinux",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOConcurrencyHelpers", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SleepProxyHomeAssistantTests",
            dependencies: ["SleepProxyHomeAssistant", "SleepProxyControl", "SleepProxyCore", "SleepProxyWire"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SleepProxyControlTests",
            dependencies: ["SleepProxyControl"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "SleepProxyStatusPageTests",
            dependencies: ["SleepProxyStatusPage", "SleepProxyControl"],
            swiftSettings: swiftSettings
        ),
    ]
)
