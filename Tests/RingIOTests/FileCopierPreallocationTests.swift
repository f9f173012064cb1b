#if canImport(Glibc)
import Glibc
#endif
import CLiburing
import SystemPackage
import Testing
import RingIOTestSupport
@testable import RingIO
@testable import RingIOChannel
@testable import RingIOCopy
@testable import RingIOFiles
@testable import RingIOBase
@testable import RingIOEngine

/// FileCopier on ext4 allocates the destination's data blocks before it
/// writes them (`IO.preallocate`): only the source's data, never its holes,
/// and nothing left past a source that ended early; then splices the bytes
/// through one 1 MiB pipe (`IO.spliceFileRanges`).
@Suite("FileCopier preallocation and the one-pipe splice")
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
        var info = CopyFileInfo(try Syscall.fstat(input))
        info.size += 8 << 20  // as if the source had been 8 MiB longer when sized
        var copier = FileCopier(engine: engine)
        copier.sparse = .never  // one region, to the size: the copy meets the end inside it
        let paths = PathRequest.Paths(source: FilePath(dir.file("src")), inPlace: FilePath(dir.file("dst")))
        let (copied, strategy) = try await copier.transfer(input, output, info, paths)
        #expect(copied == Int64(bytes.count), "\(strategy)")
        #expect(try readFile(dir.file("dst")) == bytes)
        let used = Self.allocated(dir.file("dst"))
        #expect(used <= bytes.count + (512 << 10), "\(used) bytes allocated past the end")
    }

    @Test("spliceFileRanges copies the ranges (the gap stays zeros), piece by piece, and ends early on a short source")
    func spliceFileRanges() async throws {
        let dir = TemporaryDirectory()
        let size = (9 << 20) + 123
        let bytes = randomBytes(size, seed: 43)
        try writeFile(dir.file("src"), bytes)
        let input = open(dir.file("src"), O_RDONLY | O_CLOEXEC)
        let output = open(dir.file("dst"), O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        defer {
            close(input)
            close(output)
        }
        #expect(ftruncate(output, off_t(size)) == 0)
        let ranges: [Range<Int64>] = [0..<(3 << 20), (5 << 20)..<Int64(size)]
        var expected = bytes
        // One memset, not 2 Mi stores of debug code (slow under the sanitizers).
        expected.withUnsafeMutableBytes { _ = memset($0.baseAddress! + (3 << 20), 0, 2 << 20) }
        let moved = Locked(0)
        // 1 MiB pieces through a 64 KiB pipe: many splices per piece.
        let ended = try await IO.spliceFileRanges(ranges, from: FileDescriptor(rawValue: input),
                                                  to: FileDescriptor(rawValue: output), chunk: 1 << 20,
                                                  pipeSize: 64 << 10) { n in moved.withLock { $0 += n } }
        #expect(ended == nil)
        #expect(moved.withLock { $0 } == ranges.reduce(0) { $0 + Int($1.count) })
        #expect(try readFile(dir.file("dst")) == expected)
        // Past the source's end: it ended at the end, every byte before it copied.
        let whole = try await IO.spliceFileRanges([0..<Int64(size + (5 << 20))], from: FileDescriptor(rawValue: input),
                                                  to: FileDescriptor(rawValue: output), chunk: 1 << 20) { _ in }
        #expect(whole == Int64(size), "\(String(describing: whole))")
        #expect(try readFile(dir.file("dst")).prefix(size) == bytes[...])
    }

    @Test("spliceFileRanges names the side that failed; a file that cannot splice says .copy, nothing written")
    func spliceFileRangesErrors() async throws {
        let dir = TemporaryDirectory()
        let bytes = randomBytes(2 << 20, seed: 47)
        try writeFile(dir.file("src"), bytes)
        try writeFile(dir.file("dst"), Array("old".utf8))
        let input = open(dir.file("src"), O_RDONLY | O_CLOEXEC)
        let readOnly = open(dir.file("dst"), O_RDONLY | O_CLOEXEC)
        let writeOnly = open(dir.file("dst"), O_WRONLY | O_CLOEXEC)
        let appending = open(dir.file("dst"), O_WRONLY | O_APPEND | O_CLOEXEC)
        defer { for fd in [input, readOnly, writeOnly, appending] { close(fd) } }
        let range: [Range<Int64>] = [0..<Int64(bytes.count)]
        // A destination not open for writing: the write side.
        var error = await #expect(throws: IOError.self) {
            try await IO.spliceFileRanges(range, from: FileDescriptor(rawValue: input),
                                          to: FileDescriptor(rawValue: readOnly)) { _ in }
        }
        #expect(error?.operation == .write && error?.side == .destination && error?.errno == .badFileDescriptor,
                "\(String(describing: error))")
        // A source not open for reading: the read side.
        error = await #expect(throws: IOError.self) {
            try await IO.spliceFileRanges(range, from: FileDescriptor(rawValue: writeOnly),
                                          to: FileDescriptor(rawValue: writeOnly)) { _ in }
        }
        #expect(error?.operation == .read && error?.side == .source && error?.errno == .badFileDescriptor,
                "\(String(describing: error))")
        // An O_APPEND destination cannot take a splice at an offset: .copy, the caller tries another way.
        error = await #expect(throws: IOError.self) {
            try await IO.spliceFileRanges(range, from: FileDescriptor(rawValue: input),
                                          to: FileDescriptor(rawValue: appending)) { _ in }
        }
        #expect(error?.operation == .copy, "\(String(describing: error))")
        #expect(try readFile(dir.file("dst")) == Array("old".utf8))
        #expect(try readFile(dir.file("src")) == bytes)
    }
}
