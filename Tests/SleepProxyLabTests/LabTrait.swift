import Foundation
import SleepProxyTestSupport
import Testing

/// The one trait of a lab suite: what it needs of the machine (a suite whose needs are not met is skipped, saying
/// which), each test on a thread of its own, and with `serialized` its tests one at a time.
/// Each test runs on a thread of its own because lab tests block (`OwnThreadTrait`, docs/linux.md §7).
struct LabTrait: SuiteTrait, TestTrait, TestScoping {
    let requirements: [LabRequirement]
    /// The suite's tests one at a time (they share a lab), as `.serialized` would order them.
    let order: BlockingTestSlots?

    var isRecursive: Bool { true }

    func prepare(for test: Test) async throws {
        let missing = self.requirements.filter { !$0.isMet() }
        guard !missing.isEmpty else { return }
        let needs = missing.map(\.need).joined(separator: ", ")
        try await ConditionTrait.enabled(if: false, Comment(rawValue: "needs \(needs)")).prepare(for: test)
    }

    func provideScope(
        for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void
    ) async throws {
        // The suite itself gets a scope too; only its test cases need a thread. The suite's turn first, then a
        // thread slot (`OwnThreadTrait`): a test waiting for its turn holds no slot.
        guard testCase != nil, let order = self.order else {
            return try await OwnThreadTrait().provideScope(for: test, testCase: testCase, performing: function)
        }
        await order.acquire()
        do {
            try await OwnThreadTrait().provideScope(for: test, testCase: testCase, performing: function)
        } catch {
            await order.release()
            throw error
        }
        await order.release()
    }
}

/// Something a lab suite needs of the machine, and how to say it when it is missing.
struct LabRequirement: Sendable {
    let need: String
    let isMet: @Sendable () -> Bool

    /// Network namespaces, veth and bridges: root, iproute2 and util-linux.
    static let namespaces = LabRequirement(need: "root, iproute2 and util-linux (scripts/test installs them)") {
        Command.canBuildNetworks
    }
    static let avahi = LabRequirement(need: "avahi-daemon (scripts/test installs it)") {
        FileManager.default.isExecutableFile(atPath: "/usr/sbin/avahi-daemon")
    }
    static let dnspython = LabRequirement(need: "python3-dnspython (scripts/test installs it)") {
        FileManager.default.fileExists(atPath: "/usr/lib/python3/dist-packages/dns")
    }
    static let nmap = LabRequirement(need: "nmap (scripts/test installs it)") {
        FileManager.default.isExecutableFile(atPath: "/usr/bin/nmap")
    }
    /// A sleeping PC's or NAS's servers and the clients that want them (adoption lab tests).
    static let fileServers = LabRequirement(need: "samba, smbclient, nftables and curl (scripts/test installs them)") {
        ["/usr/sbin/smbd", "/usr/bin/smbclient", "/usr/sbin/nft", "/usr/bin/curl"].allSatisfy {
            FileManager.default.isExecutableFile(atPath: $0)
        }
    }
    static let windowsNames = LabRequirement(need: "samba's nmbd, nmblookup and smbclient (scripts/test installs them)")
    {
        ["/usr/sbin/nmbd", "/usr/bin/nmblookup", "/usr/bin/smbclient"].allSatisfy(FileManager.default.isExecutableFile)
    }
    static let mediaServer = LabRequirement(need: "minidlna and gupnp-tools (scripts/test installs them)") {
        MiniDLNA.isInstalled && SSDPControlPoint.hasGSSDPDiscover
    }
    static let containerImage = LabRequirement(
        need: "podman and SLEEPPROXY_TEST_IMAGE (scripts/test-image builds the image and runs this suite)"
    ) { ContainerImage.name != nil && FileManager.default.isExecutableFile(atPath: ContainerImage.podman) }
}

extension Trait where Self == LabTrait {
    /// A lab suite: skipped unless `requirements` are met, each test on its own thread, and with `serialized`
    /// one test at a time (`LabTrait`).
    static func lab(_ requirements: LabRequirement..., serialized: Bool = false) -> Self {
        LabTrait(requirements: requirements, order: serialized ? BlockingTestSlots(limit: 1) : nil)
    }
}
