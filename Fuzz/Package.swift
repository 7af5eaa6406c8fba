// swift-tools-version:6.2
// A separate package on purpose: `swift build --sanitize fuzzer` replaces `main` in every executable it links,
// so the fuzz targets must never share a build with sleepproxyd or the tests (docs/linux.md §5).
// Build and run with ../scripts/fuzz.
import PackageDescription

let package = Package(
    name: "sleep-proxy-fuzz",
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.0"),
        .package(url: "https://github.com/apple/swift-collections.git", from: "1.1.0"),
    ],
    targets: [
        // Sources/SleepProxyWire is a symlink to the real codec sources: as a local target it is compiled with
        // coverage instrumentation, which SwiftPM does not add to targets of a package dependency.
        .target(name: "SleepProxyWire", dependencies: [.product(name: "NIOCore", package: "swift-nio")]),
        .executableTarget(
            name: "FuzzDNS",
            dependencies: ["SleepProxyWire", .product(name: "NIOCore", package: "swift-nio")]
        ),
        .executableTarget(
            name: "FuzzFrames",
            dependencies: ["SleepProxyWire", .product(name: "NIOCore", package: "swift-nio")]
        ),
        .executableTarget(name: "FuzzSSDP", dependencies: ["SleepProxyWire"]),
        .executableTarget(name: "FuzzNetBIOS", dependencies: ["SleepProxyWire"]),
        .executableTarget(name: "FuzzMQTT", dependencies: ["SleepProxyWire"]),
        // Sources/SleepProxyCore is a symlink too: the composed engine, driven by EngineProgram.
        .target(
            name: "SleepProxyCore",
            dependencies: [
                "SleepProxyWire", .product(name: "HeapModule", package: "swift-collections"),
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "NIOCore", package: "swift-nio"),
            ]),
        .executableTarget(
            name: "FuzzEngine",
            dependencies: ["SleepProxyCore", "SleepProxyWire", .product(name: "NIOCore", package: "swift-nio")]),
    ]
)
