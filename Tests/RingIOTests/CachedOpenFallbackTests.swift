#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOBase
import RingIOQueue

/// A path channel opens from the dentry cache on the caller's thread
/// (`openat2` with `RESOLVE_CACHED`): a read-only one's first read opens it
/// there, and that open is its check. An error of one path there must not
/// turn that off for the whole process (`CachedOpens`); a channel nobody
/// uses is still checked; a FIFO's other end never sees that open come and go.
@Suite("Cached opens: a path channel opened by its first read")
struct CachedOpenFallbackTests {
    @Test("a read-only path channel nobody uses is still checked: a missing file's cleanup gets ENOENT, with no operation and no close",
          arguments: allBackends)
    func uncheckedUnusedFails(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let latch = Latch()
        let seen = Locked<Errno?>(nil)
        let channel = try IOChannel(kind: .random, path: FilePath(dir.file("missing")), mode: .readOnly,
                                    queue: .global, engine: engine) { error in
            seen.withLock { $0 = error }
            latch.signal()
        }
        #expect(latch.wait(timeout: .seconds(300)))
        #expect(seen.withLock { $0 } == .noSuchFileOrDirectory)
        #expect(channel.openError?.errno == .noSuchFileOrDirectory)
        await #expect(throws: Errno.noSuchFileOrDirectory) { _ = try await channel.read(offset: 0, length: 10) }
        channel.close()
    }

    @Test("unused read-only path channels made in a row on two threads, read ones between them: every missing one's cleanup gets ENOENT",
          arguments: allBackends)
    func uncheckedInARow(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        try writeFile(dir.file("present"), randomBytes(4096, seed: 63))
        let perThread = 20
        let failed = Locked<[Errno?]>([])
        let all = Latch(count: 2 * perThread)
        let made = Locked<[IOChannel]>([])
        let threadsDone = Latch(count: 2)
        let missing = dir.file("missing"), present = dir.file("present")
        for thread in 0..<2 { IOQueue.global.async {
            defer { threadsDone.signal() }
            for i in 0..<perThread {
                // (The newest channel made waits in a slot of its own: the
                // next one made moves it to the sweep's list.)
                let channel = try? IOChannel(kind: .random, path: FilePath("\(missing)-\(thread)-\(i)"),
                                             mode: .readOnly, queue: .global, engine: engine) { error in
                    failed.withLock { $0.append(error) }
                    all.signal()
                }
                if let channel { made.withLock { $0.append(channel) } }
                if i % 4 == 0, let read = try? IOChannel(kind: .random, path: FilePath(present),
                                                         mode: .readOnly, queue: .global, engine: engine) {
                    read.read(length: 100, queue: .global) { _, _, _ in }
                    read.close()
                }
            }
        } }
        #expect(threadsDone.wait(timeout: .seconds(300)))
        #expect(all.wait(timeout: .seconds(300)))
        #expect(failed.withLock { $0.count } == 2 * perThread)
        #expect(failed.withLock { $0.allSatisfy { $0 == .noSuchFileOrDirectory } })
        for channel in made.withLock({ $0 }) { channel.close() }
    }

    @Test("a writer waiting in open on a FIFO: the first read gets its bytes, and its next write still finds a reader",
          arguments: allBackends)
    func fifoWriterKeepsItsReader(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("fifo")
        #expect(mkfifo(path, 0o600) == 0)
        let first = randomBytes(100, seed: 261), second = randomBytes(100, seed: 262)
        let writes = Locked<[Int]>([])
        let done = Latch()
        // On an IOQueue worker (SIGPIPE blocked there: a write with no
        // reader is EPIPE, recorded as -1).
        IOQueue(label: "fifo-writer").async {
            let fd = open(path, O_WRONLY | O_CLOEXEC)
            if fd >= 0 {
                writes.withLock { $0.append(first.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }) }
                usleep(100_000)
                writes.withLock { $0.append(second.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }) }
                close(fd)
            }
            done.signal()
        }
        // (The writer waits in open until a reader comes.)
        try await Task.sleep(for: .milliseconds(50))
        let channel = try IOChannel(kind: .stream, path: FilePath(path), mode: .readOnly, queue: .global,
                                    engine: engine)
        let data = try await channel.read(length: 200)
        #expect(Array(data) == first + second)
        #expect(done.wait(timeout: .seconds(300)))
        #expect(writes.withLock { $0 } == [100, 100], "a write found no reader")
        channel.close()
    }

    #if DEBUG
    @Test("EPERM or EINVAL from one path's cached open: that channel works through the engine, the next opens from the cache",
          arguments: allBackends)
    func pathErrorKeepsCachedOpens(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        for error in [Errno.notPermitted, .invalidArgument] {
            let dir = TemporaryDirectory()
            let bytes = randomBytes(3000, seed: 26)
            try writeFile(dir.file("f"), bytes)
            let scope = Syscall.Mock.Scope.files(under: FilePath(dir.path))

            let refused = Syscall.Mock.inject(.openat2, errno: error, times: 1, scope: scope)
            let channel = try IOChannel(kind: .random, path: FilePath(dir.file("f")), mode: .readOnly,
                                        queue: .global, engine: engine)
            #expect(try await channel.read(offset: 0, length: 4096) == DataChunk(bytes))
            #expect(refused.fired == 1, "the first read tried the cached open")
            refused.remove()
            channel.close()
            #expect(CachedOpens.available, "\(error) of one path turned cached opens off")

            // The next path channel's first read still calls openat2 (EAGAIN:
            // as if not cached, so it goes to the engine and still works).
            let seen = Syscall.Mock.inject(.openat2, errno: .resourceTemporarilyUnavailable, times: 1, scope: scope)
            let next = try IOChannel(kind: .random, path: FilePath(dir.file("f")), mode: .readOnly,
                                     queue: .global, engine: engine)
            #expect(try await next.read(offset: 1000, length: 4096) == DataChunk(Array(bytes[1000...])))
            #expect(seen.fired == 1, "cached opens were turned off after \(error)")
            seen.remove()
            next.close()
        }
    }
    #endif
}
