#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Testing
import RingIOTestSupport
@testable import RingIO
@testable import RingIOChannel
@testable import RingIOCopy
@testable import RingIOFiles
@testable import RingIOBase

@Suite("IO.copyFile with options")
struct CopyFileTests {
    /// The names in `dir` other than `keep`.
    static func leftovers(_ dir: String, keeping keep: Set<String>) -> [String] {
        guard let d = opendir(dir) else { return ["<cannot list>"] }
        defer { closedir(d) }
        var names: [String] = []
        while let entry = readdir(d) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            if name != "." && name != ".." && !keep.contains(name) { names.append(name) }
        }
        return names
    }

    @Test("small and large files, atomically or not, arrive byte for byte with the source's mode",
          arguments: allBackends, [0, 1, 4096, IO.smallFileLimit, IO.smallFileLimit + 1, 3 << 20])
    func copies(backend: IOEngine.Backend, size: Int) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(size, seed: UInt64(size))
        try writeFile(dir.file("src"), bytes)
        chmod(dir.file("src"), 0o640)
        for atomically in [false, true] {
            let target = dir.file(atomically ? "atomic" : "plain")
            let copied = try await IO.copyFile(from: FilePath(dir.file("src")), to: FilePath(target),
                                               options: .init(atomically: atomically), engine: engine)
            #expect(copied == Int64(size))
            #expect(try readFile(target) == bytes)
            var info = stat()
            #expect(stat(target, &info) == 0 && info.st_mode & 0o777 == 0o640)
        }
        #expect(Self.leftovers(dir.path, keeping: ["src", "atomic", "plain"]) == [])
    }

    @Test("atomically replaces an existing file; not atomically truncates it in place", arguments: allBackends)
    func replaces(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        try writeFile(dir.file("src"), Array("new".utf8))
        try writeFile(dir.file("dst"), Array("old contents, longer".utf8))
        var before = stat()
        stat(dir.file("dst"), &before)
        try await IO.copyFile(from: FilePath(dir.file("src")), to: FilePath(dir.file("dst")),
                              options: .init(atomically: true), engine: engine)
        var after = stat()
        stat(dir.file("dst"), &after)
        #expect(try readFile(dir.file("dst")) == Array("new".utf8))
        #expect(after.st_ino != before.st_ino, "an atomic copy renames a new file into place")
        try writeFile(dir.file("dst2"), Array("old contents, longer".utf8))
        try await IO.copyFile(from: FilePath(dir.file("src")), to: FilePath(dir.file("dst2")),
                              options: .init(), engine: engine)
        #expect(try readFile(dir.file("dst2")) == Array("new".utf8))
    }

    @Test("exclusive refuses an existing destination with EEXIST and leaves it and no temporary file",
          arguments: allBackends, [100, 1 << 20])
    func exclusive(backend: IOEngine.Backend, size: Int) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        try writeFile(dir.file("src"), randomBytes(size, seed: 7))
        try writeFile(dir.file("dst"), Array("keep me".utf8))
        for atomically in [false, true] {
            await expectCopyError(.fileExists, side: .destination) {
                try await IO.copyFile(from: FilePath(dir.file("src")), to: FilePath(dir.file("dst")),
                                      options: .init(atomically: atomically, exclusive: true), engine: engine)
            }
            #expect(try readFile(dir.file("dst")) == Array("keep me".utf8))
        }
        #expect(Self.leftovers(dir.path, keeping: ["src", "dst"]) == [])
    }

    @Test("errors: a missing source, a directory, a missing destination directory, an empty path", arguments: allBackends)
    func errors(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        try writeFile(dir.file("src"), [1, 2, 3])
        await expectCopyError(.noSuchFileOrDirectory, side: .source) {
            try await IO.copyFile(from: FilePath(dir.file("missing")), to: FilePath(dir.file("x")), options: .init(), engine: engine)
        }
        await expectCopyError(.isDirectory, side: .source) {
            try await IO.copyFile(from: FilePath(dir.path), to: FilePath(dir.file("x")), options: .init(), engine: engine)
        }
        for atomically in [false, true] {
            await expectCopyError(.noSuchFileOrDirectory, side: .destination) {
                try await IO.copyFile(from: FilePath(dir.file("src")), to: FilePath(dir.file("nodir/x")),
                                      options: .init(atomically: atomically), engine: engine)
            }
        }
        await expectCopyError(.invalidArgument, side: .source) {
            try await IO.copyFile(from: "", to: FilePath(dir.file("x")), options: .init(), engine: engine)
        }
        #expect(Self.leftovers(dir.path, keeping: ["src"]) == [])
    }

    @Test("a copy onto its own source (the same path, a hard link, a symlink to it) is refused and leaves it whole",
          arguments: allBackends, [100, 3 << 20])
    func ontoItself(backend: IOEngine.Backend, size: Int) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(size, seed: 17)
        try writeFile(dir.file("f"), bytes)
        #expect(link(dir.file("f"), dir.file("hard")) == 0)
        #expect(symlink(dir.file("f"), dir.file("soft")) == 0)
        for name in ["f", "hard", "soft"] {
            for options in [IO.CopyOptions(), IO.CopyOptions(atomically: true)] {
                let error = await #expect(throws: IOError.self) {
                    try await IO.copyFile(from: FilePath(dir.file("f")), to: FilePath(dir.file(name)),
                                          options: options, engine: engine)
                }
                #expect(error?.operation == .copyOntoSource && error?.side == .destination && error?.errno == .invalidArgument,
                        "\(name), \(options): \(String(describing: error))")
                #expect(try readFile(dir.file("f")) == bytes, "\(name), \(options): the source changed")
            }
        }
        #expect(Self.leftovers(dir.path, keeping: ["f", "hard", "soft"]) == [])
    }

    @Test("many small copies at once share the ring and all arrive", arguments: allBackends)
    func manySmall(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend, ringEntries: 64)
        let dir = TemporaryDirectory()
        mkdir(dir.file("in"), 0o755)
        mkdir(dir.file("out"), 0o755)
        for i in 0..<300 { try writeFile(dir.file("in/\(i)"), randomBytes(i * 37, seed: UInt64(i))) }
        let (input, output) = (dir.file("in"), dir.file("out"))
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<300 {
                group.addTask {
                    try await IO.copyFile(from: FilePath("\(input)/\(i)"), to: FilePath("\(output)/\(i)"),
                                          options: .init(atomically: true, exclusive: true), engine: engine)
                }
            }
            try await group.waitForAll()
        }
        for i in 0..<300 { #expect(try readFile(dir.file("out/\(i)")) == randomBytes(i * 37, seed: UInt64(i))) }
        #expect(Self.leftovers(dir.file("out"), keeping: Set((0..<300).map(String.init))) == [])
    }

    @Test("a full disk: the copy fails with ENOSPC, the old destination stays and no temporary file is left",
          arguments: allBackends, [100 << 10, 3 << 20])
    func fullDisk(backend: IOEngine.Backend, size: Int) async throws {
        let engine = try makeEngine(backend)
        let (dir, mountPoint) = try FullFilesystemTests.smallFilesystem()
        defer { umount2(mountPoint, Int32(MNT_DETACH)); _ = dir }
        // Fill the 1 MiB tmpfs but for ~64 KiB.
        try writeFile(mountPoint + "/filler", [UInt8](repeating: 1, count: 960 << 10))
        try writeFile(mountPoint + "/dst", Array("old".utf8))
        try writeFile(dir.file("src"), randomBytes(size, seed: 3))
        await expectCopyError(.noSpace, side: .destination) {
            try await IO.copyFile(from: FilePath(dir.file("src")), to: FilePath(mountPoint + "/dst"),
                                  options: .init(atomically: true), engine: engine)
        }
        #expect(try readFile(mountPoint + "/dst") == Array("old".utf8))
        #expect(Self.leftovers(mountPoint, keeping: ["filler", "dst"]) == [])
    }

    @Test("a full disk, in place into a new file: ENOSPC, and the file the copy created is removed",
          arguments: allBackends, [100 << 10, 3 << 20])
    func fullDiskInPlace(backend: IOEngine.Backend, size: Int) async throws {
        let engine = try makeEngine(backend)
        let (dir, mountPoint) = try FullFilesystemTests.smallFilesystem()
        defer { umount2(mountPoint, Int32(MNT_DETACH)); _ = dir }
        try writeFile(mountPoint + "/filler", [UInt8](repeating: 1, count: 960 << 10))
        try writeFile(dir.file("src"), randomBytes(size, seed: 4))
        await expectCopyError(.noSpace, side: .destination) {
            try await IO.copyFile(from: FilePath(dir.file("src")), to: FilePath(mountPoint + "/new"),
                                  options: .init(), engine: engine)
        }
        #expect(Self.leftovers(mountPoint, keeping: ["filler"]) == [], "no partial destination")
        #expect(try readFile(dir.file("src")) == randomBytes(size, seed: 4))
    }

    @Test("a socket source fails on the source side (ENXIO) and creates nothing, in place or atomically",
          arguments: allBackends)
    func socketSource(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let socketPath = dir.file("sock")
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        #expect(fd >= 0)
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            let bytes = Array(socketPath.utf8.prefix(raw.count - 1))
            raw.copyBytes(from: bytes)
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        #expect(bound == 0)
        for atomically in [false, true] {
            await expectCopyError(.noSuchAddressOrDevice, side: .source) {
                try await IO.copyFile(from: FilePath(socketPath), to: FilePath(dir.file("dst")),
                                      options: .init(atomically: atomically), engine: engine)
            }
        }
        #expect(Self.leftovers(dir.path, keeping: ["sock"]) == [], "nothing created")
    }

    @Test("a file whose stat says 0 bytes (procfs) is copied whole; an empty file stays empty", arguments: allBackends)
    func procfsSource(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let copied = try await IO.copyFile(from: "/proc/version", to: FilePath(dir.file("version")), options: .init(),
                                           engine: engine)
        let expected = try readFile("/proc/version")
        #expect(!expected.isEmpty && copied == Int64(expected.count))
        #expect(try readFile(dir.file("version")) == expected)
        try writeFile(dir.file("empty"), [])
        try writeFile(dir.file("dst"), Array("old".utf8))
        #expect(try await IO.copyFile(from: FilePath(dir.file("empty")), to: FilePath(dir.file("dst")), options: .init(),
                                      engine: engine) == 0)
        #expect(try readFile(dir.file("dst")) == [])
    }

    @Test("a copy awaited from a task on a queue resumes on that queue", arguments: allBackends, [4096, 1 << 20])
    func resumesOnTheTaskExecutor(backend: IOEngine.Backend, size: Int) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        try writeFile(dir.file("src"), randomBytes(size, seed: 8))
        let queue = IOQueue(label: "copy-resume")
        let (source, destination) = (FilePath(dir.file("src")), FilePath(dir.file("dst")))
        let onQueue = try await withTaskExecutorPreference(queue) { () async throws -> Bool in
            try await IO.copyFile(from: source, to: destination, options: .init(), engine: engine)
            return queue.isCurrent
        }
        #expect(onQueue)
        #expect(try readFile(dir.file("dst")) == randomBytes(size, seed: 8))
    }

    @Test("copyRanges copies the ranges in the kernel, holes stay holes, progress adds up", arguments: allBackends)
    func copyRanges(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let fixture = try RangeCopyFixture(seed: 11)
        let (dir, input, output, ranges) = (fixture.dir, fixture.input, fixture.output, fixture.ranges)
        defer { fixture.close() }
        let moved = Locked(0)
        let ended = try await IO.copyRanges(ranges, from: input, to: output, lanes: 3, engine: engine) { n in
            moved.withLock { $0 += n }
        }
        #expect(ended == nil)
        #expect(moved.withLock { $0 } == ranges.reduce(0) { $0 + Int($1.count) })
        #expect(try readFile(dir.file("dst")) == fixture.expected)
    }

    @Test("copyFileRange copies the ranges in the kernel (holes stay), ends early on a short source, and says .copy where the files cannot be copied so; one lane or four",
          arguments: [1, 4])
    func copyFileRange(lanes: Int) async throws {
        let fixture = try RangeCopyFixture(seed: 13)
        let (dir, size, bytes, input, output, ranges) = (fixture.dir, fixture.size, fixture.bytes, fixture.input,
                                                         fixture.output, fixture.ranges)
        defer { fixture.close() }
        let moved = Locked(0)
        let ended = try await IO.copyFileRange(ranges, from: input, to: output, chunk: 1 << 20, lanes: lanes) { n in
            moved.withLock { $0 += n }
        }
        #expect(ended == nil)
        #expect(moved.withLock { $0 } == ranges.reduce(0) { $0 + Int($1.count) })
        #expect(try readFile(dir.file("dst")) == fixture.expected)
        // Past the source's end: it ended there.
        #expect(try await IO.copyFileRange([Int64(size)..<Int64(size + 4096)], from: input, to: output) == Int64(size))
        // A range past the end, in many pieces at once: it ended at the source's end, every byte before it copied.
        let whole = try await IO.copyFileRange([0..<Int64(size + (5 << 20))], from: input, to: output, chunk: 1 << 20,
                                               lanes: lanes) { _ in }
        #expect(whole == Int64(size), "\(String(describing: whole))")
        #expect(try readFile(dir.file("dst")) == bytes)
        // A pipe cannot be copied so: nothing copied, the caller is told to use another way.
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        let error = await #expect(throws: IOError.self) {
            try await IO.copyFileRange([0..<4096], from: input, to: FileDescriptor(rawValue: fds[1]), chunk: 1 << 20,
                                       lanes: lanes) { _ in }
        }
        #expect(error?.operation == .copy, "\(String(describing: error))")
    }

    @Test("copyRanges: a source shorter than the ranges ends early; a write error names the write side", arguments: allBackends)
    func copyRangesErrors(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        try writeFile(dir.file("src"), randomBytes(1_500_000, seed: 12))
        try writeFile(dir.file("dst"), [])
        let input = try openFile(dir.file("src"), .readOnly)
        let output = try openFile(dir.file("dst"))
        defer { try? input.close(); try? output.close() }
        let ended = try await IO.copyRanges([0..<4_000_000], from: input, to: output, engine: engine)
        #expect(ended == 1_500_000)
        #expect(try readFile(dir.file("dst")) == randomBytes(1_500_000, seed: 12))
        let readOnly = try openFile(dir.file("dst"), .readOnly)
        defer { try? readOnly.close() }
        await #expect(throws: IOError(.write, path: nil, side: .destination, errno: .badFileDescriptor)) {
            try await IO.copyRanges([0..<1_000_000], from: input, to: readOnly, engine: engine)
        }
    }
}

/// `body` throws an `IOError` with `errno` (and `side`, when given).
func expectCopyError(_ errno: Errno, side: IOError.Side? = nil, sourceLocation: SourceLocation = #_sourceLocation,
                     _ body: () async throws -> Void) async {
    let error = await #expect(throws: IOError.self, sourceLocation: sourceLocation) { try await body() }
    #expect(error?.errno == errno, "\(String(describing: error))", sourceLocation: sourceLocation)
    if let side { #expect(error?.side == side, "\(String(describing: error))", sourceLocation: sourceLocation) }
}

/// Two range-copy tests' setup: a 9 MiB + 123 source of random bytes, an
/// empty destination of the same length (a hole), both open, and two ranges
/// that leave the 3–5 MiB gap uncopied.
private struct RangeCopyFixture {
    let dir = TemporaryDirectory()
    let size = 9 << 20 + 123
    let bytes: [UInt8]
    let input: FileDescriptor
    let output: FileDescriptor
    var ranges: [Range<Int64>] { [0..<(3 << 20), (5 << 20)..<Int64(size)] }
    /// The destination once `ranges` are copied: the gap stays zeros.
    var expected: [UInt8] {
        var expected = bytes
        // One memset, not 2 Mi stores of debug code (slow under the sanitizers).
        expected.withUnsafeMutableBytes { _ = memset($0.baseAddress! + (3 << 20), 0, 2 << 20) }
        return expected
    }

    init(seed: UInt64) throws {
        bytes = randomBytes(size, seed: seed)
        try writeFile(dir.file("src"), bytes)
        try writeFile(dir.file("dst"), [])
        input = try openFile(dir.file("src"), .readOnly)
        output = try openFile(dir.file("dst"))
        #expect(ftruncate(output.rawValue, off_t(size)) == 0)
    }

    func close() {
        try? input.close()
        try? output.close()
    }
}
