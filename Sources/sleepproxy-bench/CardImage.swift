import Foundation
import SleepProxyTestSupport

/// An ext4 file system on a loop device, standing for a small box's SD card: the state directory lives on it, and the
/// device's own counters say what reached the card, ext4's journal and metadata included, which the daemon's
/// `/proc/PID/io` does not count (docs/state.md, "SD-card wear"). Mounted `noatime`, as Raspberry Pi OS mounts its
/// root file system.
struct CardImage {
    let image: URL
    let device: String
    let mountPoint: URL

    /// What the device has written since it was attached: bytes, and write requests.
    struct Written {
        var bytes: Int
        var requests: Int
    }

    /// Ours: large enough that ext4 lays it out as on a card (its journal is 8 MiB from 256 MiB up), small enough
    /// to stay a sparse file of a few MB.
    static let imageBytes = 256 << 20

    /// Makes, attaches and mounts the image in `directory`; throws when this machine cannot (no loop devices, no
    /// `mkfs.ext4`), and leaves nothing behind then.
    static func make(in directory: URL) throws -> CardImage {
        let image = directory.appendingPathComponent("card.img")
        let mountPoint = directory.appendingPathComponent("card")
        try FileManager.default.createDirectory(at: mountPoint, withIntermediateDirectories: true)
        guard FileManager.default.createFile(atPath: image.path, contents: nil) else {
            throw CommandError("cannot create \(image.path)")
        }
        let handle = try FileHandle(forWritingTo: image)
        try handle.truncate(atOffset: UInt64(Self.imageBytes))
        try handle.close()
        try Command.check(["mkfs.ext4", "-q", "-F", image.path], timeout: .seconds(60))
        let device = try Command.check(["losetup", "--find", "--show", image.path]).stdout
            .trimmingCharacters(in: .whitespacesAndNewlines)
        guard device.hasPrefix("/dev/loop") else { throw CommandError("losetup gave \(device)") }
        do {
            try Command.check(["mount", "-o", "noatime", device, mountPoint.path])
        } catch {
            _ = try? Command.run(["losetup", "-d", device])
            throw error
        }
        return CardImage(image: image, device: device, mountPoint: mountPoint)
    }

    /// The device's write counters (`/sys/block/loopN/stat`: requests are the fifth field, 512-byte sectors the
    /// seventh), read after the page cache is written back by the caller.
    func written() -> Written? {
        let name = (self.device as NSString).lastPathComponent
        guard let text = try? String(contentsOfFile: "/sys/block/\(name)/stat", encoding: .utf8) else { return nil }
        let fields = text.split(separator: " ").compactMap { Int($0) }
        guard fields.count >= 7 else { return nil }
        return Written(bytes: fields[6] * 512, requests: fields[4])
    }

    func remove() {
        _ = try? Command.run(["umount", self.mountPoint.path], timeout: .seconds(30))
        _ = try? Command.run(["losetup", "-d", self.device])
        try? FileManager.default.removeItem(at: self.image)
    }
}
