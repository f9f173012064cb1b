#if DEBUG
#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Testing
import RingIOTestSupport
@testable import RingIO
@testable import RingIOBase
@testable import RingIOFiles

/// Faults injected at one system call through the seam's mock
/// (`Syscall.Mock`, debug builds only), scoped to the test's own temporary
/// directory: the copy's calls fail on whichever thread makes them (a pool
/// worker), and tests running in parallel, on other directories, are not
/// touched. What io_uring itself does (the engine's reads and writes on the
/// ring) is not reached by the seam: `IOEngine.faults` injects those.
@Suite("Faults at one system call")
struct SyscallFaultTests {
    @Test("copy_file_range failing with EXDEV (another file system): the copy falls back to splicing, every byte arrives",
          arguments: allBackends)
    func crossDeviceFallsBackToSplice(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(3 << 20 + 17, seed: 51)
        try writeFile(dir.file("src"), bytes)
        let exdev = Syscall.Mock.inject(.copyFileRange, errno: .improperLink, times: 1,
                                        scope: .files(under: FilePath(dir.path)))
        defer { exdev.remove() }
        var copier = FileCopier(engine: engine)
        copier.strategy = .copyFileRange
        let outcome = try await copier.copy(from: FilePath(dir.file("src")), to: FilePath(dir.file("dst")))
        #expect(exdev.fired == 1)
        #expect(outcome.strategy == .splice, "\(outcome)")
        #expect(outcome.bytes == Int64(bytes.count))
        #expect(try readFile(dir.file("dst")) == bytes)
    }

    @Test("ENOSPC from copy_file_range: the atomic copy fails on the destination side, the old file stays, no temporary is left",
          arguments: allBackends)
    func noSpaceInTheKernelCopy(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        try writeFile(dir.file("src"), randomBytes(3 << 20, seed: 52))
        try writeFile(dir.file("dst"), Array("old".utf8))
        let enospc = Syscall.Mock.inject(.copyFileRange, errno: .noSpace, times: 1,
                                         scope: .files(under: FilePath(dir.path)))
        defer { enospc.remove() }
        var copier = FileCopier(engine: engine)
        copier.strategy = .copyFileRange
        copier.replace = .atomic
        await expectCopyError(.noSpace, side: .destination) {
            try await copier.copy(from: FilePath(dir.file("src")), to: FilePath(dir.file("dst")))
        }
        #expect(enospc.fired == 1)
        #expect(try readFile(dir.file("dst")) == Array("old".utf8))
        #expect(CopyFileTests.leftovers(dir.path, keeping: ["src", "dst"]) == [])
    }

    @Test("ENOSPC in the middle: copy_file_range fails on the third 1 MiB chunk; IO.copyFileRange throws a write error on the destination side, the first 2 MiB copied")
    func noSpaceMidCopy() async throws {
        let dir = TemporaryDirectory()
        let bytes = randomBytes(5 << 20, seed: 55)
        try writeFile(dir.file("src"), bytes)
        try writeFile(dir.file("dst"), [])
        let input = try openFile(dir.file("src"), .readOnly)
        let output = try openFile(dir.file("dst"))
        defer { try? input.close(); try? output.close() }
        let enospc = Syscall.Mock.inject(.copyFileRange, errno: .noSpace, times: 1, after: 2,
                                         scope: .files(under: FilePath(dir.path)))
        defer { enospc.remove() }
        let moved = Locked(0)
        let error = await #expect(throws: IOError.self) {
            try await IO.copyFileRange([0..<Int64(bytes.count)], from: input, to: output, chunk: 1 << 20) { n in
                moved.withLock { $0 += n }
            }
        }
        #expect(error?.operation == .write && error?.side == .destination && error?.errno == .noSpace,
                "\(String(describing: error))")
        #expect(enospc.fired == 1)
        #expect(moved.withLock { $0 } == 2 << 20)
        #expect(try Array(readFile(dir.file("dst")).prefix(2 << 20)) == Array(bytes.prefix(2 << 20)))
    }

    @Test("ENOSPC on the small-file path's write: IO.copyFile fails with it, the old destination stays, no temporary is left",
          arguments: allBackends)
    func noSpaceInTheSmallCopy(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        try writeFile(dir.file("src"), randomBytes(100 << 10, seed: 53))
        try writeFile(dir.file("dst"), Array("old".utf8))
        let enospc = Syscall.Mock.inject(.write, errno: .noSpace, times: 1, scope: .files(under: FilePath(dir.path)))
        defer { enospc.remove() }
        await expectCopyError(.noSpace, side: .destination) {
            try await IO.copyFile(from: FilePath(dir.file("src")), to: FilePath(dir.file("dst")),
                                  options: .init(atomically: true), engine: engine)
        }
        #expect(enospc.fired == 1)
        #expect(try readFile(dir.file("dst")) == Array("old".utf8))
        #expect(CopyFileTests.leftovers(dir.path, keeping: ["src", "dst"]) == [])
    }

    @Test("an injection scoped to one directory leaves a copy in another alone, and is used up by the first copy in its own")
    func scopeIsTheDirectory() async throws {
        let engine = try makeEngine(.threadPool)
        let (mine, other) = (TemporaryDirectory(), TemporaryDirectory())
        let bytes = randomBytes(64 << 10, seed: 54)
        try writeFile(mine.file("src"), bytes)
        try writeFile(other.file("src"), bytes)
        let eio = Syscall.Mock.inject(.read, errno: .ioError, times: 1, scope: .files(under: FilePath(mine.path)))
        defer { eio.remove() }
        try await IO.copyFile(from: FilePath(other.file("src")), to: FilePath(other.file("dst")), engine: engine)
        #expect(eio.fired == 0)
        #expect(try readFile(other.file("dst")) == bytes)
        await expectCopyError(.ioError, side: .source) {
            try await IO.copyFile(from: FilePath(mine.file("src")), to: FilePath(mine.file("dst")), engine: engine)
        }
        #expect(eio.fired == 1)
        try await IO.copyFile(from: FilePath(mine.file("src")), to: FilePath(mine.file("dst")), engine: engine)
        #expect(try readFile(mine.file("dst")) == bytes)
    }
}
#endif
