#if canImport(Glibc)
import Glibc
#endif
import CLiburing
import SystemPackage
import Testing
@testable import RingIO
@testable import RingIOBase
@testable import RingIOEngine

/// FileCopier's `copy_file_range` path on ext4 allocates the destination's
/// data blocks before it writes them (`IO.preallocate`): only the source's
/// data, never its holes, and nothing left past a source that ended early.
@Suite("FileCopier preallocation")
struct FileCopierPreallocationTests {
    /// The bytes a file occupies on disk.
    static func allocated(_ path: String) -> Int {
        var info = stat()
        return stat(path, &info) == 0 ? Int(info.st_blocks) * 512 : -1
    }

    @Test("preallocate allocates the ranges (zeros, the hole between stays); a pipe is refused, untouched")
    func preallocate() throws {
        let dir = TemporaryDirectory()
        let fd = open(dir.file("f"), O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        #expect(fd >= 0)
        defer { close(fd) }
        let type = cliburing_fs_type(fd)
        #expect(type > 0)
        #expect(IO.preallocationHelps(fd) == (type == 0xEF53), "ext4 only")
        if IO.preallocate(fd, [0..<(1 << 20), (3 << 20)..<(4 << 20)]) {
            var status = stat()
            #expect(fstat(fd, &status) == 0 && status.st_size == 4 << 20)
            let used = Self.allocated(dir.file("f"))
            #expect(used >= 2 << 20 && used < 3 << 20, "\(used) bytes allocated")
            #expect(try readFile(dir.file("f")) == [UInt8](repeating: 0, count: 4 << 20))
        } else {
            // A file system without fallocate: nothing allocated, the size unchanged.
            #expect(Self.allocated(dir.file("f")) == 0)
        }
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        #expect(!IO.preallocate(fds[1], [0..<4096]))
        #expect(!IO.preallocationHelps(fds[1]))
        close(fds[0])
        close(fds[1])
    }

    @Test("a sparse source: its data copied into allocated blocks, its holes stay holes", arguments: allBackends)
    func sparseSource(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        // 2 MiB of data, a 16 MiB hole, 2 MiB of data.
        let head = randomBytes(2 << 20, seed: 31), tail = randomBytes(2 << 20, seed: 37)
        let fd = open(dir.file("src"), O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        #expect(head.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) } == head.count)
        #expect(tail.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 18 << 20) } == tail.count)
        close(fd)
        let outcome = try await FileCopier(engine: engine).copy(from: FilePath(dir.file("src")),
                                                                to: FilePath(dir.file("dst")))
        #expect(outcome.bytes == 20 << 20)
        #expect(try readFile(dir.file("dst")) == head + [UInt8](repeating: 0, count: 16 << 20) + tail)
        let used = Self.allocated(dir.file("dst"))
        #expect(used <= Self.allocated(dir.file("src")) + (512 << 10), "\(used) bytes allocated: the hole stays")
    }

    @Test("a source that ends before its size (it shrank): the copy ends there, nothing allocated past it",
          arguments: allBackends)
    func shrunkSource(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(3 << 20, seed: 41)
        try writeFile(dir.file("src"), bytes)
        let input = open(dir.file("src"), O_RDONLY | O_CLOEXEC)
        let output = open(dir.file("dst"), O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        defer {
            close(input)
            close(output)
        }
        var status = stat()
        #expect(fstat(input, &status) == 0)
        var info = FileInfo(status)
        info.size += 8 << 20  // as if the source had been 8 MiB longer when sized
        var copier = FileCopier(engine: engine)
        copier.sparse = .never  // one region, to the size: the copy meets the end inside it
        let paths = PathRequest.Paths(source: FilePath(dir.file("src")), target: FilePath(dir.file("dst")),
                                      destination: nil)
        let (copied, strategy) = try await copier.transfer(input, output, info, paths)
        #expect(copied == Int64(bytes.count), "\(strategy)")
        #expect(try readFile(dir.file("dst")) == bytes)
        let used = Self.allocated(dir.file("dst"))
        #expect(used <= bytes.count + (512 << 10), "\(used) bytes allocated past the end")
    }
}
