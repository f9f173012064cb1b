#if canImport(Glibc)
import Glibc
#endif
import Synchronization
import SystemPackage
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles
@testable import RingIOBase
@testable import RingIOEngine

/// The engine path of `IO.readFile` (what an uncached file takes): one
/// linked chain open → read → install → close, completed once.
@Suite("IO.readFile: the linked chain for files that are not cached")
struct SmallFileChainTests {
    /// The outcome of the engine path, with the fd of a `.partial` closed.
    static func engineRead(_ path: String, maximumSize: Int = .max, _ engine: IOEngine) async -> SmallFileRead.Outcome {
        await SmallFileRead.read(FilePath(path), maximumSize: maximumSize, engine: engine)
    }

    @Test("small, empty, larger than the read's guess, grown past it: whole, and no fd left open", arguments: allBackends)
    func sizes(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        if backend == .ioUring && !engine.supportsChainedFiles {
            try Test.cancel("this kernel lacks IORING_OP_FIXED_FD_INSTALL: the chain is not used")
        }
        let dir = TemporaryDirectory()
        let sizes = [0, 1, 12 << 10, SmallFileRead.guess - 1, SmallFileRead.guess, SmallFileRead.guess + 1,
                     3 * SmallFileRead.guess + 17, SmallFileRead.limit]
        for (i, size) in sizes.enumerated() {
            let path = dir.file("f\(i)")
            try writeFile(path, randomBytes(size, seed: UInt64(900 + i)))
            for _ in 0..<3 {
                guard case .done(let bytes) = await Self.engineRead(path, engine) else {
                    Issue.record("size \(size): not read by the chain")
                    continue
                }
                #expect(Array(bytes) == randomBytes(size, seed: UInt64(900 + i)), "size \(size)")
            }
            // The same through IO.readFile after the pages are dropped (the
            // calling thread's open then hands its fd to one linked read).
            let fd = open(path, O_RDONLY)
            _ = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)
            close(fd)
            #expect(Array(try await IO.readFile(at: FilePath(path), engine: engine)) == randomBytes(size, seed: UInt64(900 + i)))
        }
        // Past the maximum size: EFBIG, from the first read or a later one.
        for (size, maximum) in [(5000, 4999), (SmallFileRead.guess + 10, SmallFileRead.guess + 5)] {
            try writeFile(dir.file("big"), randomBytes(size, seed: 1))
            guard case .failed(let error) = await Self.engineRead(dir.file("big"), maximumSize: maximum, engine) else {
                Issue.record("\(size) bytes read with a maximum of \(maximum)")
                continue
            }
            #expect(error.errno == .fileTooLarge && error.operation == .read)
        }
        // procfs: size 0, and bytes.
        guard case .done(let status) = await Self.engineRead("/proc/self/status", engine) else {
            Issue.record("procfs not read by the chain")
            return
        }
        #expect(String(decoding: Array(status), as: UTF8.self).contains("Name:"))
        #expect(openDescriptors(into: dir.path) == 0)
    }

    @Test("a missing file, a directory, no permission: the open's error, or the channel path", arguments: allBackends)
    func errors(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        guard case .failed(let missing) = await Self.engineRead(dir.file("missing"), engine) else {
            Issue.record("a missing file did not fail")
            return
        }
        #expect(missing.errno == .noSuchFileOrDirectory && missing.operation == .openForReading)
        // A directory opens, its read fails (EISDIR), and nothing was taken:
        // the channel path, which reports the open error as before.
        guard case .general = await Self.engineRead(dir.path, engine) else {
            Issue.record("a directory did not go to the channel path")
            return
        }
        let directory = await #expect(throws: IOError.self) { try await IO.readFile(at: FilePath(dir.path), engine: engine) }
        #expect(directory?.errno == .isDirectory)
        if geteuid() != 0 {
            try writeFile(dir.file("locked"), [1, 2, 3])
            chmod(dir.file("locked"), 0)
            guard case .failed(let denied) = await Self.engineRead(dir.file("locked"), engine) else {
                Issue.record("no permission did not fail")
                return
            }
            #expect(denied.errno == .permissionDenied && denied.operation == .openForReading)
        }
        #expect(openDescriptors(into: dir.path) == 0)
    }

    @Test("a FIFO never holds the chain: without a writer it goes to the channel path; with data, nothing is lost",
          arguments: allBackends)
    func fifo(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("fifo")
        #expect(mkfifo(path, 0o600) == 0)
        // No writer: the non-blocking open and read return at once. (Resumed
        // on an IOQueue: in a whole `swift test` run other tests' blocking
        // waits may hold Swift's cooperative threads for seconds.)
        let (outcome, elapsed) = await withTaskExecutorPreference(IOQueue(label: "fifo-chain")) {
            let started = monotonicNanoseconds()
            let outcome = await Self.engineRead(path, engine)
            return (outcome, monotonicNanoseconds() - started)
        }
        guard case .general = outcome else {
            Issue.record("a FIFO without a writer did not go to the channel path")
            return
        }
        #expect(elapsed < 5_000_000_000)
        // A writer with data in the pipe, which closes a little later: every
        // byte comes back, whichever path took the first ones.
        let writer = open(path, O_RDWR | O_CLOEXEC)
        #expect(writer >= 0)
        let payload = randomBytes(3000, seed: 5)
        #expect(write(writer, payload, payload.count) == payload.count)
        let closer = Task.detached {
            try? await Task.sleep(for: .milliseconds(200))
            close(writer)
        }
        let data = try await IO.readFile(at: FilePath(path), engine: engine)
        await closer.value
        #expect(Array(data) == payload)
        // The channel on the FIFO's fd closes it in its cleanup, a moment later.
        var open = openDescriptors(into: dir.path)
        for _ in 0..<200 where open != 0 {
            try await Task.sleep(for: .milliseconds(10))
            open = openDescriptors(into: dir.path)
        }
        #expect(open == 0)
    }

    @Test("with no free slot in the ring's file table, the two-step path reads the file", arguments: allBackends)
    func noSlot(backend: IOEngine.Backend) async throws {
        var configuration = IOEngine.Configuration(ringEntries: 64, backend: backend)
        configuration.registeredFileSlots = 1
        let engine = try IOEngine(configuration: configuration)
        let dir = TemporaryDirectory()
        let files = 40
        for i in 0..<files { try writeFile(dir.file("f\(i)"), pattern(stream: i, block: 0, count: 5000)) }
        let base = dir.path
        let mismatches = await withTaskGroup(of: Int.self) { group in
            for i in 0..<files {
                group.addTask {
                    guard case .done(let bytes) = await Self.engineRead(base + "/f\(i)", engine) else { return 1 }
                    return Array(bytes) == pattern(stream: i, block: 0, count: 5000) ? 0 : 1
                }
            }
            return await group.reduce(0, +)
        }
        #expect(mismatches == 0)
        // With no file table at all the chain is not used.
        configuration.registeredFileSlots = 0
        let plain = try IOEngine(configuration: configuration)
        if backend == .ioUring { #expect(!plain.supportsChainedFiles) }
        guard case .done(let bytes) = await Self.engineRead(base + "/f0", plain) else {
            Issue.record("not read without a file table")
            return
        }
        #expect(Array(bytes) == pattern(stream: 0, block: 0, count: 5000))
    }

    @Test("from the ring queue: one io_uring_enter per file or so, resumed on the ring thread", arguments: allBackends)
    func enters(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        guard backend == .ioUring, engine.supportsChainedFiles else { return }
        let dir = TemporaryDirectory()
        let files = 200
        for i in 0..<files { try writeFile(dir.file("f\(i)"), pattern(stream: i, block: 0, count: 12 << 10)) }
        let base = dir.path
        let (mismatches, enters) = await withTaskExecutorPreference(engine.queue) {
            var mismatches = 0
            let before = engine.enterCalls
            for i in 0..<files {
                guard case .done(let bytes) = await Self.engineRead(base + "/f\(i)", engine),
                      Array(bytes) == pattern(stream: i, block: 0, count: 12 << 10) else {
                    mismatches += 1
                    continue
                }
            }
            return (mismatches, engine.enterCalls - before)
        }
        #expect(mismatches == 0)
        // Two: with DEFER_TASKRUN each io_uring_enter runs the chain's
        // task work once, so the four linked steps take two calls (so did
        // the open-then-read path); never one per step.
        #expect(enters <= UInt64(files * 5 / 2), "\(enters) io_uring_enter calls for \(files) files")
    }
}
