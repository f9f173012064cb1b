#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import SystemPackage
import Testing
import RingIOTestSupport
@testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles
@testable import RingIOBase
@testable import RingIOEngine
@testable import RingIOQueue
@testable import RingIOData

/// FileCopier: each strategy on real files, pipes and FIFOs, the replace
/// policy, errors with their side, progress; on both backends.
@Suite("FileCopier")
struct FileCopierTests {
    static func copier(_ engine: IOEngine, _ configure: (inout FileCopier) -> Void = { _ in }) -> FileCopier {
        var copier = FileCopier(engine: engine)
        configure(&copier)
        return copier
    }

    @Test("each strategy copies byte for byte, progress adds up, and the outcome names what ran",
          arguments: allBackends, [FileCopier.Strategy.automatic, .copyFileRange, .splice, .channels])
    func strategies(backend: IOEngine.Backend, strategy: FileCopier.Strategy) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        for size in [0, 5000, IO.smallFileLimit + 1, (9 << 20) + 5] {
            let bytes = randomBytes(size, seed: UInt64(size + 7))
            try writeFile(dir.file("src"), bytes)
            let seen = Locked(0)
            let copier = Self.copier(engine) {
                $0.strategy = strategy
                $0.progress = { n in seen.withLock { $0 += n } }
            }
            let outcome = try await copier.copy(from: FilePath(dir.file("src")), to: FilePath(dir.file("dst-\(size)")))
            #expect(try readFile(dir.file("dst-\(size)")) == bytes, "size \(size)")
            #expect(outcome.bytes == Int64(size))
            #expect(seen.withLock { $0 } == size, "progress for size \(size)")
            #expect(outcome.replace == .atomic)
            let expected: Set<FileCopier.Strategy> = switch (strategy, size <= IO.smallFileLimit) {
            case (.automatic, true): [.chain]
            case (.automatic, false), (.copyFileRange, _): [.copyFileRange, .splice, .channels]
            case (.splice, _): [.splice, .channels]
            default: [.channels]
            }
            #expect(expected.contains(outcome.strategy), "size \(size): \(outcome.strategy)")
        }
        #expect(CopyFileTests.leftovers(dir.path, keeping: ["src", "dst-0", "dst-5000", "dst-\(IO.smallFileLimit + 1)",
                                                           "dst-\((9 << 20) + 5)"]) == [])
    }

    @Test("atomic replace: a new inode renamed into place; in place: the same inode; sync flushes", arguments: allBackends)
    func replacePolicy(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        for size in [100, 2 << 20] {
            let bytes = randomBytes(size, seed: 5)
            try writeFile(dir.file("src"), bytes)
            for replace in [FileCopier.Replace.atomic, .inPlace] {
                try writeFile(dir.file("dst"), Array(repeating: 9, count: 3 << 20))
                var before = stat(), after = stat()
                stat(dir.file("dst"), &before)
                let outcome = try await Self.copier(engine) {
                    $0.replace = replace
                    $0.sync = .beforeRename
                }.copy(from: FilePath(dir.file("src")), to: FilePath(dir.file("dst")))
                stat(dir.file("dst"), &after)
                #expect(try readFile(dir.file("dst")) == bytes)
                #expect(outcome.replace == replace)
                #expect((after.st_ino != before.st_ino) == (replace == .atomic), "\(replace), size \(size)")
            }
        }
        #expect(CopyFileTests.leftovers(dir.path, keeping: ["src", "dst"]) == [])
    }

    @Test("sparse: holes stay holes (auto), blocks of zeros become holes (always), holes written (never)",
          arguments: allBackends)
    func sparse(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        // 8 MiB: data, 4 MiB of written zeros, data.
        var bytes = randomBytes(8 << 20, seed: 9)
        for i in (2 << 20)..<(6 << 20) { bytes[i] = 0 }
        try writeFile(dir.file("src"), bytes)
        var blocks: [FileCopier.Sparse: Int] = [:]
        for sparse in [FileCopier.Sparse.auto, .always, .never] {
            try await Self.copier(engine) { $0.sparse = sparse }
                .copy(from: FilePath(dir.file("src")), to: FilePath(dir.file("dst")))
            #expect(try readFile(dir.file("dst")) == bytes)
            var info = stat()
            stat(dir.file("dst"), &info)
            blocks[sparse] = Int(info.st_blocks) * 512
        }
        #expect(blocks[.always]! <= (4 << 20) + (256 << 10), "\(blocks)")
        #expect(blocks[.never]! >= 8 << 20, "\(blocks)")
    }

    @Test("a FIFO destination is written in place, never renamed over: its reader gets the bytes once",
          arguments: allBackends, [(100, FileCopier.Replace.atomic), (3 << 20, .atomic), (100, .inPlace)])
    func fifoDestination(backend: IOEngine.Backend, sizeAndReplace: (Int, FileCopier.Replace)) async throws {
        let (size, replace) = sizeAndReplace
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(size, seed: 11)
        try writeFile(dir.file("src"), bytes)
        #expect(mkfifo(dir.file("fifo"), 0o600) == 0)
        let received = Locked<[UInt8]?>(nil)
        let done = IOGroup()
        done.enter()
        let fifoPath = dir.file("fifo")
        IOQueue.global.async {
            let fd = open(fifoPath, O_RDONLY | O_CLOEXEC)
            var all: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 65536)
            while fd >= 0 {
                let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if n <= 0 { break }
                all += buffer[0..<n]
            }
            close(fd)
            received.withLock { $0 = all }
            done.leave()
        }
        let outcome = try await Self.copier(engine) { $0.replace = replace }.copy(from: FilePath(dir.file("src")),
                                                                               to: FilePath(fifoPath))
        await done.wait()
        #expect(outcome.strategy == .stream && outcome.replace == .inPlace)
        #expect(received.withLock { $0 } == bytes)
        var info = stat()
        #expect(lstat(fifoPath, &info) == 0 && info.st_mode & S_IFMT == S_IFIFO, "the FIFO is still there")
        #expect(CopyFileTests.leftovers(dir.path, keeping: ["src", "fifo"]) == [])
    }

    @Test("a FIFO source is copied in place as its bytes come, even under the atomic policy", arguments: allBackends)
    func fifoSource(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(700 << 10, seed: 23)
        #expect(mkfifo(dir.file("fifo"), 0o600) == 0)
        try writeFile(dir.file("dst"), Array("old contents".utf8))
        var before = stat()
        stat(dir.file("dst"), &before)
        let fifoPath = dir.file("fifo")
        IOQueue.global.async {
            let fd = open(fifoPath, O_WRONLY | O_CLOEXEC)
            bytes.withUnsafeBytes { raw in
                var offset = 0
                while fd >= 0 && offset < raw.count {
                    let n = write(fd, raw.baseAddress! + offset, raw.count - offset)
                    if n <= 0 { break }
                    offset += n
                }
            }
            close(fd)
        }
        let outcome = try await Self.copier(engine).copy(from: FilePath(fifoPath), to: FilePath(dir.file("dst")))
        var after = stat()
        stat(dir.file("dst"), &after)
        #expect(outcome.strategy == .stream && outcome.replace == .inPlace && outcome.bytes == Int64(bytes.count))
        #expect(try readFile(dir.file("dst")) == bytes)
        #expect(after.st_ino == before.st_ino, "written in place")
        #expect(CopyFileTests.leftovers(dir.path, keeping: ["fifo", "dst"]) == [])
    }

    @Test("pipes: a pipe's bytes into a file and a file's into a pipe (fd-level), each once", arguments: allBackends)
    func pipes(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(1 << 20, seed: 13)
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        let (readEnd, writeEnd) = (fds[0], fds[1])
        IOQueue.global.async {
            bytes.withUnsafeBytes { raw in
                var offset = 0
                while offset < raw.count {
                    let n = write(writeEnd, raw.baseAddress! + offset, raw.count - offset)
                    if n <= 0 { break }
                    offset += n
                }
            }
            close(writeEnd)
        }
        let output = open(dir.file("fromPipe"), O_WRONLY | O_CREAT | O_CLOEXEC, 0o600)
        let outcome = try await Self.copier(engine).copy(from: FileDescriptor(rawValue: readEnd),
                                                         to: FileDescriptor(rawValue: output))
        close(readEnd)
        close(output)
        #expect(outcome.strategy == .stream && outcome.bytes == Int64(bytes.count))
        #expect(try readFile(dir.file("fromPipe")) == bytes)

        #expect(pipe(&fds) == 0)
        let (back, into) = (fds[0], fds[1])
        let received = Locked<[UInt8]>([])
        let done = IOGroup()
        done.enter()
        IOQueue.global.async {
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let n = buffer.withUnsafeMutableBytes { read(back, $0.baseAddress, $0.count) }
                if n <= 0 { break }
                received.withLock { $0 += buffer[0..<n] }
            }
            close(back)
            done.leave()
        }
        let input = open(dir.file("fromPipe"), O_RDONLY | O_CLOEXEC)
        let toPipe = try await Self.copier(engine).copy(from: FileDescriptor(rawValue: input), to: FileDescriptor(rawValue: into))
        close(input)
        close(into)
        await done.wait()
        #expect(toPipe.strategy == .stream)
        #expect(received.withLock { $0 } == bytes)
    }

    @Test("a failed copy under the atomic policy leaves the destination as it was and the source whole",
          arguments: allBackends)
    func failures(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let source = randomBytes(3 << 20, seed: 17)
        try writeFile(dir.file("src"), source)
        try writeFile(dir.file("dst"), Array("old".utf8))
        // A missing source, a directory source: the source side, nothing made.
        await expectCopyError(.noSuchFileOrDirectory, side: .source) {
            try await Self.copier(engine).copy(from: FilePath(dir.file("missing")), to: FilePath(dir.file("dst")))
        }
        await expectCopyError(.isDirectory, side: .source) {
            try await Self.copier(engine).copy(from: FilePath(dir.path), to: FilePath(dir.file("dst")))
        }
        // Onto itself through a symlink, in place: refused, the source whole.
        symlink(dir.file("src"), dir.file("link"))
        await expectCopyError(.invalidArgument, side: .destination) {
            try await Self.copier(engine) { $0.replace = .inPlace }.copy(from: FilePath(dir.file("src")),
                                                                          to: FilePath(dir.file("link")))
        }
        // Reflink where the file system cannot (tmpfs, ext4): .copy, nothing changed.
        do throws(IOError) {
            let outcome = try await Self.copier(engine) { $0.reflink = .always }
                .copy(from: FilePath(dir.file("src")), to: FilePath(dir.file("dst")))
            #expect(outcome.strategy == .reflink)  // a file system that shares blocks
        } catch {
            #expect(error.operation == .copy && error.side == .destination, "\(error)")
            #expect(try readFile(dir.file("dst")) == Array("old".utf8))
        }
        try writeFile(dir.file("dst"), Array("old".utf8))
        // Cancelled mid-copy (channels): ECANCELED, the old destination stays.
        let (from, to) = (FilePath(dir.file("src")), FilePath(dir.file("dst")))
        let copier = Self.copier(engine) { $0.strategy = .channels }
        let task = Task { () async throws(IOError) -> FileCopier.Outcome in
            try await copier.copy(from: from, to: to)
        }
        task.cancel()
        switch await task.result {
        case .success: break  // finished before the cancellation landed
        case .failure(let error): #expect((error as? IOError)?.errno == .canceled, "\(error)")
        }
        if (try? readFile(dir.file("dst"))) != source {
            #expect(try readFile(dir.file("dst")) == Array("old".utf8))
        }
        #expect(try readFile(dir.file("src")) == source)
        #expect(CopyFileTests.leftovers(dir.path, keeping: ["src", "dst", "link"]) == [])
    }

    @Test("exclusive refuses an existing destination; a new file gets the permissions asked", arguments: allBackends)
    func exclusive(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        try writeFile(dir.file("src"), randomBytes(1 << 20, seed: 19))
        try writeFile(dir.file("dst"), Array("old".utf8))
        await expectCopyError(.fileExists, side: .destination) {
            try await Self.copier(engine) { $0.exclusive = true }.copy(from: FilePath(dir.file("src")),
                                                                        to: FilePath(dir.file("dst")))
        }
        #expect(try readFile(dir.file("dst")) == Array("old".utf8))
        try await Self.copier(engine) {
            $0.exclusive = true
            $0.permissions = FilePermissions(rawValue: 0o600)
        }.copy(from: FilePath(dir.file("src")), to: FilePath(dir.file("new")))
        var info = stat()
        #expect(stat(dir.file("new"), &info) == 0 && info.st_mode & 0o777 == 0o600)
        #expect(CopyFileTests.leftovers(dir.path, keeping: ["src", "dst", "new"]) == [])
    }
}
