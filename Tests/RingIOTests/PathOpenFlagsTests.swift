#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOBase
@testable import RingIOChannel

/// A read-only path channel opened by its first read opens with
/// `O_NONBLOCK` (its kind is not known yet). A regular file's fd keeps that
/// flag until something other than a read on the caller's thread uses it:
/// a channel read once and closed makes no `fcntl`; anything else finds the
/// flags it asked for.
@Suite("path channels: the O_NONBLOCK of an open on the reader's thread")
struct PathOpenFlagsTests {
    static func file(_ dir: TemporaryDirectory, _ bytes: [UInt8]) throws -> FilePath? {
        try writeFile(dir.file("f"), bytes)
        let fd = try FileDescriptor.open(FilePath(dir.file("f")), .readOnly)
        defer { try? fd.close() }
        // (A file system that refuses RWF_NOWAIT sends every read to the
        // engine, which needs the flags set.)
        return InlineReadTests.noWaitWorks(fd) ? FilePath(dir.file("f")) : nil
    }

    static func nonblocking(_ fd: Int32?) -> Bool? { fd.map { Glibc.fcntl($0, F_GETFL) & O_NONBLOCK != 0 } }

    @Test("a path channel read once on the caller's thread and closed makes no fcntl", arguments: allBackends)
    func oneReadNoFcntl(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(8192, seed: 61)
        guard let path = try Self.file(dir, bytes), CachedOpens.available else {
            try Test.cancel("no RWF_NOWAIT reads or no cached opens here")
        }
        let fcntl = Syscall.Mock.inject(.fcntl, errno: .badFileDescriptor, times: 1,
                                        scope: .files(under: FilePath(dir.path)))
        defer { fcntl.remove() }
        let channel = try IOChannel(kind: .random, path: path, mode: .readOnly, queue: .global, engine: engine)
        let data = try await channel.read(offset: 4096, length: 4096)
        #expect(data == DataChunk(bytes[4096...]))
        channel.close()
        #expect(waitUntil(timeout: .seconds(300)) { openDescriptors(into: dir.path) == 0 })
        #expect(fcntl.fired == 0, "the read and the close made an fcntl")
    }

    @Test("after a read on the caller's thread, an engine read, a barrier and fileDescriptor find the flags asked for",
          arguments: allBackends)
    func laterUsesFindFlags(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(512 * 1024, seed: 62)
        guard let path = try Self.file(dir, bytes), CachedOpens.available else {
            try Test.cancel("no RWF_NOWAIT reads or no cached opens here")
        }
        // An engine read (larger than a read on the caller's thread may be).
        let reader = try IOChannel(kind: .random, path: path, mode: .readOnly, queue: .global, engine: engine)
        let small = try await reader.read(length: 100)
        #expect(small == DataChunk(bytes[..<100]))
        #expect(Self.nonblocking(reader.core.lock.withLock { reader.core.lifecycle.currentEntry?.fd }) == true,
                "the fd keeps O_NONBLOCK while only reads on the caller's thread used it")
        let large = try await reader.read(length: bytes.count)
        #expect(large == DataChunk(bytes))
        #expect(Self.nonblocking(reader.core.lock.withLock { reader.core.lifecycle.currentEntry?.fd }) == false)
        reader.close()
        // A barrier.
        let barrier = try IOChannel(kind: .stream, path: path, mode: .readOnly, queue: .global, engine: engine)
        _ = try await barrier.read(length: 100)
        let core = barrier.core
        let flag = await barrier.barrier(returning: {
            Self.nonblocking(core.lock.withLock { core.lifecycle.currentEntry?.fd })
        })
        #expect(flag == false)
        barrier.close()
        // The fd given to the user.
        let given = try IOChannel(kind: .random, path: path, mode: .readOnly, queue: .global, engine: engine)
        _ = try await given.read(length: 100)
        #expect(Self.nonblocking(given.fileDescriptor?.rawValue) == false)
        given.close()
    }
}
