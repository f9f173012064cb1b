#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import CLiburing
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles
@testable import RingIOBase
@testable import RingIOEngine
@testable import RingIOQueue
@testable import RingIOData

@Suite("IO.readFile of small files: an open and one read")
struct SmallFileReadTests {
    @Test("small files of many sizes read back whole, and no fd is left open", arguments: allBackends)
    func sizes(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let sizes = [1, 100, 4095, 4096, 4097, 12 << 10, 65536, SmallFileRead.limit - 1, SmallFileRead.limit,
                     SmallFileRead.limit + 1]
        for (i, size) in sizes.enumerated() {
            try writeFile(dir.file("f\(i)"), randomBytes(size, seed: UInt64(700 + i)))
        }
        for _ in 0..<20 {
            for (i, size) in sizes.enumerated() {
                let path = FilePath(dir.file("f\(i)"))
                let data = try await IO.readFile(at: path, engine: engine)
                #expect(Array(data) == randomBytes(size, seed: UInt64(700 + i)), "size \(size)")
                // Without the engine, where the kernel has RESOLVE_CACHED and RWF_NOWAIT.
                if let bytes = SmallFileRead.readWithoutBlocking(path, maximumSize: .max) {
                    #expect(size <= SmallFileRead.limit && Array(bytes) == randomBytes(size, seed: UInt64(700 + i)))
                }
                // The engine's path, which IO.readFile takes when something is not cached.
                switch await SmallFileRead.read(path, maximumSize: .max, engine: engine) {
                case .done(let bytes):
                    #expect(size <= SmallFileRead.limit && Array(bytes) == randomBytes(size, seed: UInt64(700 + i)))
                case .general:
                    #expect(size > SmallFileRead.limit, "size \(size)")
                case .partial(_, let fd):
                    close(fd)
                    Issue.record("size \(size): a regular file read as a FIFO")
                case .failed(let error):
                    Issue.record("size \(size): \(error)")
                }
                // The small path closes its fd before it returns (the channel
                // path, for the largest, closes its own a little later).
                if size <= SmallFileRead.limit { #expect(openDescriptors(into: dir.path) == 0, "size \(size)") }
            }
        }
    }

    @Test("a tmpfs file, whose file system refuses RWF_NOWAIT reads, leaves inline reads on for other file systems")
    func tmpfsLeavesOthersInline() throws {
        let shm = "/dev/shm/ringio-smallread-\(getpid())"
        guard let fd = try? FileDescriptor.open(FilePath(shm), .readWrite, options: [.create, .truncate],
                                               permissions: [.ownerReadWrite]) else {
            try Test.cancel("no /dev/shm here")
        }
        defer { try? fd.close(); unlink(shm) }
        _ = try fd.writeAll(randomBytes(4096, seed: 31))
        guard cliburing_fs_type(fd.rawValue) == 0x0102_1994 /* TMPFS_MAGIC */ else {
            try Test.cancel("/dev/shm is not tmpfs here")
        }
        var byte: UInt8 = 0
        guard cliburing_pread_nowait(fd.rawValue, &byte, 1, 0) < 0 else {
            try Test.cancel("this kernel's tmpfs answers RWF_NOWAIT reads")
        }
        let dir = TemporaryDirectory()
        let local = dir.file("cached")
        try writeFile(local, randomBytes(4096, seed: 32))
        guard let probe = try? FileDescriptor.open(FilePath(local), .readOnly) else { return }
        defer { try? probe.close() }
        guard cliburing_pread_nowait(probe.rawValue, &byte, 1, 0) == 1 else {
            try Test.cancel("the temporary directory's file system refuses RWF_NOWAIT reads too")
        }
        #expect(SmallFileRead.readWithoutBlocking(FilePath(shm), maximumSize: .max) == nil)
        // The tmpfs refusal is that file system's: a cached file elsewhere
        // (and a later one) is still read on the calling thread.
        for _ in 0..<2 {
            let bytes = try #require(SmallFileRead.readWithoutBlocking(FilePath(local), maximumSize: .max),
                                     "a cached file on another file system was not read inline")
            #expect(Array(bytes) == randomBytes(4096, seed: 32))
            #expect(SmallFileRead.readWithoutBlocking(FilePath(shm), maximumSize: .max) == nil)
        }
    }

    @Test("from a task on the engine's queue: resumes on the ring thread, with few io_uring_enter calls per file",
          arguments: allBackends)
    func onRingQueue(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let files = 200
        for i in 0..<files { try writeFile(dir.file("f\(i)"), pattern(stream: i, block: 0, count: 12 << 10)) }
        let base = dir.path
        let (mismatches, threads, enters) = try await withTaskExecutorPreference(engine.queue) {
            var mismatches = 0
            var threads: Set<String> = []
            let before = engine.enterCalls
            for i in 0..<files {
                let path = FilePath(base + "/f\(i)")
                let data = try await IO.readFile(at: path, engine: engine)
                threads.insert(currentThreadName(engine))
                if Array(data) != pattern(stream: i, block: 0, count: 12 << 10) { mismatches += 1 }
                // The engine's path (IO.readFile read these cached files on the ring thread directly).
                guard case .done(let again) = await SmallFileRead.read(path, maximumSize: .max, engine: engine) else {
                    mismatches += 1
                    continue
                }
                threads.insert(currentThreadName(engine))
                if Array(again) != pattern(stream: i, block: 0, count: 12 << 10) { mismatches += 1 }
            }
            return (mismatches, threads, engine.enterCalls - before)
        }
        #expect(mismatches == 0)
        if backend == .ioUring {
            #expect(threads == ["ring"])
            // IO.readFile of a cached file: none; the engine's path: an open and
            // a read, each entering the kernel with the ring thread's next
            // io_uring_enter (the channel path took a statx, an open, two reads
            // and their turns: 5 or more).
            #expect(enters <= UInt64(3 * files), "\(enters) io_uring_enter calls for \(files) files")
        }
    }

    @Test("what is not a small regular file takes the channel path: a directory, procfs, a file over the maximum",
          arguments: allBackends)
    func otherFiles(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let directory = await #expect(throws: IOError.self) { try await IO.readFile(at: FilePath(dir.path), engine: engine) }
        #expect(directory?.errno == .isDirectory && directory?.operation == .openForReading)
        // procfs says 0 bytes and has some.
        let status = try await IO.readFile(at: "/proc/self/status", engine: engine)
        #expect(String(decoding: Array(status), as: UTF8.self).contains("Name:"))
        try writeFile(dir.file("f"), randomBytes(5000, seed: 77))
        let tooBig = await #expect(throws: IOError.self) {
            try await IO.readFile(at: FilePath(dir.file("f")), maximumSize: 4999, engine: engine)
        }
        #expect(tooBig?.errno == .fileTooLarge && tooBig?.operation == .read)
        #expect(Array(try await IO.readFile(at: FilePath(dir.file("f")), maximumSize: 5000, engine: engine))
                == randomBytes(5000, seed: 77))
        let noAccess = dir.file("locked")
        try writeFile(noAccess, [1, 2, 3])
        chmod(noAccess, 0)
        if geteuid() != 0 {
            let denied = await #expect(throws: IOError.self) { try await IO.readFile(at: FilePath(noAccess), engine: engine) }
            #expect(denied?.errno == .permissionDenied && denied?.operation == .openForReading)
        }
    }

    @Test("a cancelled task gets ECANCELED", arguments: allBackends)
    func cancelled(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        try writeFile(dir.file("f"), randomBytes(100, seed: 78))
        let path = FilePath(dir.file("f"))
        let task = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            return try await IO.readFile(at: path, engine: engine)
        }
        let result = await task.result
        #expect(throws: IOError.self) { try result.get() }
        if case .failure(let error as IOError) = result { #expect(error.errno == .canceled) }
    }
}
