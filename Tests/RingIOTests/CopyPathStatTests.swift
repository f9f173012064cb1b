#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Testing
import RingIOTestSupport
@testable import RingIO
@testable import RingIOCopy
@testable import RingIOFiles
@testable import RingIOBase

/// The path stats of a small copy (`ringcp -r` and `IO.copyItem` make
/// thousands): a new file in place costs no stat of its destination (the
/// exclusive create says whether something is there), a source the caller
/// found regular no stat of its path; cp's rules hold where something is
/// there. The seam's injections count the calls (`fired`) on each side's
/// directory; both backends.
@Suite("A small copy's stats")
struct CopyPathStatTests {
    /// `src/f` (4 KiB) and an empty `dst/`.
    static func files(_ dir: TemporaryDirectory) throws -> (source: FilePath, into: FilePath, bytes: [UInt8]) {
        let bytes = randomBytes(4096, seed: 29)
        mkdir(dir.file("src"), 0o755)
        mkdir(dir.file("dst"), 0o755)
        try writeFile(dir.file("src/f"), bytes)
        return (FilePath(dir.file("src/f")), FilePath(dir.file("dst")), bytes)
    }

    @Test("a new file in place, exclusive or not, is created with no stat of its destination", arguments: allBackends)
    func noDestinationStat(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let (source, into, bytes) = try Self.files(dir)
        // ENOENT is what a stat of the new name would say: the count is all that changes.
        let stats = Syscall.Mock.inject(.stat, errno: .noSuchFileOrDirectory, times: 100, scope: .files(under: into))
        defer { stats.remove() }
        for exclusive in [true, false] {
            var copier = FileCopier(engine: engine)
            copier.replace = .inPlace
            copier.exclusive = exclusive
            let outcome = try await copier.copy(from: source, to: into.appending("new-\(exclusive)"))
            #expect(outcome.bytes == 4096 && outcome.strategy == .chain)
            #expect(try readFile(into.appending("new-\(exclusive)").string) == bytes)
        }
        #expect(stats.fired == 0)
    }

    @Test("a source found regular by the caller is opened with no stat of its path; copy(from:to:) stats it",
          arguments: allBackends)
    func noSourceStat(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let (source, into, bytes) = try Self.files(dir)
        let stats = Syscall.Mock.inject(.stat, errno: .ioError, times: 1, scope: .files(under: source.removingLastComponent()))
        defer { stats.remove() }
        var copier = FileCopier(engine: engine)
        copier.exclusive = true
        copier.replace = .inPlace
        try await copier.copy(from: source, to: into.appending("a"), sourceType: .regular)
        #expect(stats.fired == 0)
        #expect(try readFile(into.appending("a").string) == bytes)
        // Without the type, the stat is made (here it fails, naming the source).
        do throws(IOError) {
            try await copier.copy(from: source, to: into.appending("b"))
            Issue.record("the injected stat failure did not reach the copy")
        } catch {
            #expect(error.errno == .ioError && error.side == .source && error.operation == .stat, "\(error)")
        }
        #expect(stats.fired == 1)
        #expect(access(into.appending("b").string, F_OK) != 0)
        // A directory named regular by mistake: still refused, as a directory.
        do throws(IOError) {
            try await copier.copy(from: source.removingLastComponent(), to: into.appending("c"), sourceType: .regular)
            Issue.record("a directory source was copied")
        } catch {
            #expect(error.errno == .isDirectory && error.side == .source, "\(error)")
        }
        #expect(access(into.appending("c").string, F_OK) != 0)
    }

    @Test("in place, where something is there the rules hold: exclusive refuses, the same file is refused, another file is overwritten",
          arguments: allBackends)
    func existingDestinations(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let (source, into, bytes) = try Self.files(dir)
        try writeFile(into.appending("old").string, Array("an older, longer file".utf8))
        link(source.string, into.appending("hard").string)
        for sourceType in [FileType.regular, .fifo] {  // .fifo: not regular, so the plain path
            var copier = FileCopier(engine: engine)
            copier.replace = .inPlace
            copier.exclusive = true
            do throws(IOError) {
                try await copier.copy(from: source, to: into.appending("old"), sourceType: sourceType)
                Issue.record("exclusive replaced a file")
            } catch {
                #expect(error.errno == .fileExists && error.side == .destination, "\(error)")
            }
            #expect(try readFile(into.appending("old").string) == Array("an older, longer file".utf8))
            for exclusive in [true, false] {
                copier.exclusive = exclusive
                do throws(IOError) {
                    try await copier.copy(from: source, to: into.appending("hard"), sourceType: sourceType)
                    Issue.record("a copy onto its own hard link ran")
                } catch {
                    #expect(error.operation == .copyOntoSource && error.errno == .invalidArgument, "\(error)")
                }
                #expect(try readFile(source.string) == bytes)
            }
            copier.exclusive = false
            var before = stat()
            _ = stat(into.appending("old").string, &before)
            let outcome = try await copier.copy(from: source, to: into.appending("old"), sourceType: sourceType)
            #expect(outcome.replace == .inPlace && outcome.bytes == 4096)
            #expect(try readFile(into.appending("old").string) == bytes)
            var after = stat()
            _ = stat(into.appending("old").string, &after)
            #expect(before.st_ino == after.st_ino, "written in place: the same inode")
            try writeFile(into.appending("old").string, Array("an older, longer file".utf8))
        }
        // A dangling symlink in place, not exclusive: the file is made where it points.
        symlink(dir.file("pointee"), into.appending("dangling").string)
        var copier = FileCopier(engine: engine)
        copier.replace = .inPlace
        try await copier.copy(from: source, to: into.appending("dangling"), sourceType: .regular)
        #expect(try readFile(dir.file("pointee")) == bytes)
    }

    @Test("IO.copyItem copies a tree's files with no stat of their paths (on the shared engine: run on each backend by the suite)")
    func treeWithoutStats() async throws {
        let dir = TemporaryDirectory()
        mkdir(dir.file("src"), 0o755)
        for i in 0..<5 { try writeFile(dir.file("src/f\(i)"), randomBytes(1000 + i, seed: UInt64(i))) }
        // Under src: only its files (the top directory is IO.info's statx, not a stat).
        let stats = Syscall.Mock.inject(.stat, errno: .ioError, times: 100, scope: .files(under: FilePath(dir.file("src"))))
        defer { stats.remove() }
        try await IO.copyItem(from: FilePath(dir.file("src")), to: FilePath(dir.file("dst")))
        #expect(stats.fired == 0)
        for i in 0..<5 { #expect(try readFile(dir.file("dst/f\(i)")) == randomBytes(1000 + i, seed: UInt64(i))) }
    }
}
