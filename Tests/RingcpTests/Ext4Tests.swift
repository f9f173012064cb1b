import Foundation
import Testing

#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// On ext4 a large file's blocks are allocated before its bytes are spliced
/// in (FileCopier's ext4 path): a disk that fills must still fail cleanly.
@Suite("ringcp on a small ext4")
struct Ext4Tests {
    /// An 8 MiB ext4 (no reserved blocks) on a loop device, mounted in `dir`;
    /// cancels the test where that cannot be done here.
    static func smallExt4(in dir: Scratch) throws -> String {
        let image = dir.at("ext4.img"), mountPoint = dir.at("ext4")
        try makeDirectory(mountPoint)
        let fd = open(image, O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0, ftruncate(fd, 8 << 20) == 0 else { throw TestFailure("cannot make \(image)") }
        close(fd)
        let tools = ["/usr/sbin/mkfs.ext4", "/sbin/mkfs.ext4"].first { (path: String) in access(path, X_OK) == 0 }
        guard let mkfs = tools, access("/usr/bin/mount", X_OK) == 0, geteuid() == 0 else {
            try Test.cancel("no mkfs.ext4, mount or root here, skipping")
        }
        do {
            _ = try runTool(mkfs, ["-q", "-F", "-m", "0", image])
            _ = try runTool("/usr/bin/mount", ["-o", "loop", image, mountPoint])
        } catch {
            try Test.cancel("cannot mount an ext4 image here (\(error)), skipping")
        }
        dir.mounted(mountPoint)
        return mountPoint
    }

    /// Fills the file system with `path` but for about `free` bytes.
    static func fill(_ path: String, leaving free: Int) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw TestFailure("cannot open \(path)") }
        defer { close(fd) }
        let block = randomBytes(64 << 10, seed: 50)
        var size = 0
        while true {
            let n = block.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if n <= 0 { break }
            size += n
        }
        #expect(ftruncate(fd, off_t(Swift.max(size - free, 0))) == 0)
        #expect(fsync(fd) == 0)
    }

    @Test("ENOSPC on ext4, over an existing file or into a new one: exit 1, one line, the old file intact, nothing left",
          arguments: bothBackends, [true, false])
    func noSpace(backend: Backend, existing: Bool) async throws {
        let dir = Scratch()
        let full = try Self.smallExt4(in: dir)
        let old = randomBytes(64 << 10, seed: 51)
        if existing { try writeFile(full + "/dst", old) }
        try Self.fill(full + "/filler", leaving: 512 << 10)
        try writeFile(dir.at("src"), randomBytes((3 << 20) + 1, seed: 52))
        let run = try await ringcp(["src", full + "/dst"], in: dir.path, backend: backend)
        #expect(run.status == 1, "\(run)")
        #expect(run.errorLines == ["ringcp: error writing '\(full)/dst': No space left on device"], "\(run)")
        if existing { #expect(try readFile(full + "/dst") == old, "the old destination changed") }
        #expect(leftovers(in: full).isEmpty, "left behind: \(leftovers(in: full))")
        let names = Set(try FileManager.default.contentsOfDirectory(atPath: full))
        #expect(names == (existing ? ["dst", "filler", "lost+found"] : ["filler", "lost+found"]), "\(names)")
    }

    @Test("a large file onto ext4 with room: the same bytes, its holes kept", arguments: bothBackends)
    func copies(backend: Backend) async throws {
        let dir = Scratch()
        let mounted = try Self.smallExt4(in: dir)
        // 1 MiB of data, a 2 MiB hole, 1 MiB of data.
        let head = randomBytes(1 << 20, seed: 53), tail = randomBytes(1 << 20, seed: 54)
        let fd = open(dir.at("src"), O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
        #expect(head.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) } == head.count)
        #expect(tail.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 3 << 20) } == tail.count)
        close(fd)
        let run = try await ringcp(["--debug", "src", mounted + "/dst"], in: dir.path, backend: backend)
        #expect(run.status == 0, "\(run)")
        #expect(run.outputLines.last?.hasSuffix("(ringcp: kernel splice)") == true, "\(run)")
        #expect(try readFile(mounted + "/dst") == head + [UInt8](repeating: 0, count: 2 << 20) + tail)
        var info = stat()
        #expect(stat(mounted + "/dst", &info) == 0 && Int(info.st_blocks) * 512 <= (2 << 20) + (64 << 10),
                "\(info.st_blocks * 512) bytes allocated: the hole was filled")
    }
}
