#if canImport(Glibc)
import Glibc
#endif
import CLiburing
import SystemPackage
import Synchronization
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOBase
@testable import RingIOEngine
@testable import RingIOQueue
@testable import RingIOData

/// A read of a regular file with nothing ahead of it on its fd first tries
/// `preadv2(RWF_NOWAIT)` on the submitting thread; only what the page cache
/// does not hold goes to the engine.
@Suite("Inline first try of reads")
struct InlineReadTests {
    /// A file of `bytes` in `dir` (on ext4 here), written and left cached.
    static func file(_ dir: TemporaryDirectory, _ name: String, _ bytes: [UInt8]) throws -> FileDescriptor {
        let fd = try FileDescriptor.open(FilePath(dir.file(name)), .readWrite, options: [.create, .truncate],
                                         permissions: [.ownerReadWrite])
        _ = try fd.writeAll(bytes)
        _ = try fd.seek(offset: 0, from: .start)
        return fd
    }

    static func entry(of channel: IOChannel) -> FDEntry? { channel.core.currentEntry }

    /// Whether the file system under `dir` answers RWF_NOWAIT reads.
    static func noWaitWorks(_ fd: FileDescriptor) -> Bool {
        var byte: UInt8 = 0
        return cliburing_pread_nowait(fd.rawValue, &byte, 1, 0) >= 0
    }

    @Test("awaited 4 KiB reads kept by the caller, whole or sliced, keep their bytes while the loop reads on", arguments: allBackends)
    func awaitedReadsKept(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(64 * KiB, seed: 5)
        let fd = try Self.file(dir, "f", bytes)
        defer { try? fd.close() }
        let channel = IOChannel(kind: .random, fileDescriptor: fd, queue: .global, engine: engine)
        defer { channel.close() }
        var kept: [DataChunk] = []
        var slices: [DataChunk] = []
        for i in 0..<16 {
            let data = try await channel.read(offset: Int64(i * 4096), length: 4096)
            // Every other one kept whole, the rest as a slice only.
            if i % 2 == 0 { kept.append(data) } else { slices.append(data[10..<20]) }
            // One dropped at once in between: its leaf may be reused.
            _ = try await channel.read(offset: Int64(((i + 7) % 16) * 4096), length: 4096)
        }
        for (n, data) in kept.enumerated() {
            let i = n * 2
            #expect(data == DataChunk(bytes[(i * 4096)..<((i + 1) * 4096)]), "read \(i)")
        }
        for (n, slice) in slices.enumerated() {
            let i = n * 2 + 1
            #expect(slice == DataChunk(bytes[(i * 4096 + 10)..<(i * 4096 + 20)]), "read \(i)")
        }
    }

    @Test("an awaited read of cached bytes completes inside the call, with the right bytes", arguments: allBackends)
    func awaitedReadInline(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(64 * KiB, seed: 3)
        let fd = try Self.file(dir, "f", bytes)
        defer { try? fd.close() }
        guard Self.noWaitWorks(fd) else {
            try Test.cancel("the file system under /tmp refuses RWF_NOWAIT reads")
        }
        let channel = IOChannel(kind: .random, fileDescriptor: fd, queue: .global, engine: engine)
        let entry = try #require(Self.entry(of: channel))
        for i in 0..<16 {
            let data = try await channel.read(offset: Int64(i * 4096), length: 4096)
            #expect(data == DataChunk(bytes[(i * 4096)..<((i + 1) * 4096)]))
        }
        // Past the end: empty, inline too.
        let tail = try await channel.read(offset: Int64(bytes.count), length: 4096)
        #expect(tail.isEmpty)
        // Each completed inside `read`: its continuation was resumed before
        // the task could suspend.
        #expect(entry.inlineCount == 17)
        channel.close()
    }

    @Test("a handler read done inline still calls its handler on its queue, after the submitting call returned",
          arguments: allBackends)
    func handlerReadInline(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(16 * KiB, seed: 4)
        let fd = try Self.file(dir, "f", bytes)
        defer { try? fd.close() }
        guard Self.noWaitWorks(fd) else {
            try Test.cancel("the file system under /tmp refuses RWF_NOWAIT reads")
        }
        let queue = IOQueue(label: "inline-handler")
        let channel = IOChannel(kind: .random, fileDescriptor: fd, queue: queue, engine: engine)
        let entry = try #require(Self.entry(of: channel))
        let returned = Atomic<Bool>(false)
        let calledBeforeReturn = Atomic<Bool>(false)
        let recorder = Recorder(queue: queue) { _ in
            if !returned.load(ordering: .acquiring) { calledBeforeReturn.store(true, ordering: .relaxed) }
        }
        // Submitted from the channel's own queue: the handler must still
        // wait for this block to return.
        let submitted = Latch()
        queue.async {
            channel.read(offset: 4096, length: 4096, queue: queue, handler: recorder.handler)
            returned.store(true, ordering: .releasing)
            submitted.signal()
        }
        #expect(submitted.wait())
        #expect(recorder.wait())
        let early = calledBeforeReturn.load(ordering: .relaxed)
        #expect(!early)
        #expect(recorder.calls.last?.data == DataChunk(bytes[4096..<8192]))
        #expect(recorder.calls.allSatisfy { $0.onQueue })
        #expect(entry.inlineCount == 1)
        channel.close()
    }

    @Test("a cached handler read of a random channel makes no operation: one call on its queue, and a barrier and the cleanup wait for its handler",
          arguments: allBackends)
    func handlerReadWithoutOperation(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(16 * KiB, seed: 6)
        let fd = try Self.file(dir, "f", bytes)
        defer { try? fd.close() }
        guard Self.noWaitWorks(fd) else {
            try Test.cancel("the file system under /tmp refuses RWF_NOWAIT reads")
        }
        let queue = IOQueue(label: "inline-handler-alone")
        let order = Locked<[String]>([])
        let cleaned = Latch()
        let channel = IOChannel(kind: .random, fileDescriptor: fd, queue: queue, engine: engine) { _ in
            order.withLock { $0.append("cleanup") }
            cleaned.signal()
        }
        let entry = try #require(Self.entry(of: channel))
        // A slow handler: a barrier or cleanup that did not wait for it would be seen.
        let first = Recorder(queue: queue, hold: .milliseconds(20)) { _ in order.withLock { $0.append("read") } }
        channel.read(offset: 8192, length: 4096, queue: queue, handler: first.handler)
        // The end of the file (fewer bytes than asked): the usual way.
        let tail = Recorder(queue: queue) { _ in order.withLock { $0.append("tail") } }
        channel.read(offset: Int64(bytes.count - 100), length: 4096, queue: queue, handler: tail.handler)
        let barrier = Latch()
        channel.barrier {
            order.withLock { $0.append("barrier") }
            barrier.signal()
        }
        channel.close()
        #expect(first.wait(timeout: .seconds(300)) && tail.wait(timeout: .seconds(300)))
        #expect(barrier.wait(timeout: .seconds(300)) && cleaned.wait(timeout: .seconds(300)))
        #expect(first.calls.count == 1)
        #expect(first.calls.first?.done == true && first.calls.first?.error == nil)
        #expect(first.calls.first?.data == DataChunk(bytes[8192..<12288]))
        #expect(first.calls.allSatisfy { $0.onQueue })
        #expect(tail.bytes == Array(bytes[(bytes.count - 100)...]) && tail.isDone)
        #expect(order.withLock { $0.filter { $0 != "tail" } } == ["read", "barrier", "cleanup"])
        #expect(entry.handlerInline.load(ordering: .relaxed) == 1, "the cached read made no operation")
    }

    @Test("a fresh path channel opens its file at its first cached read, on the calling thread, and reads there; a handler read too; nothing opens at creation",
          arguments: allBackends)
    func pathChannelOpensAtFirstRead(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(16 * KiB, seed: 8)
        let fd = try Self.file(dir, "p", bytes)
        defer { try? fd.close() }
        guard Self.noWaitWorks(fd) else {
            try Test.cancel("the file system under /tmp refuses RWF_NOWAIT reads")
        }
        let path = FilePath(dir.file("p"))
        let awaited = try IOChannel(kind: .random, path: path, mode: .readOnly, queue: .global, engine: engine)
        #expect(Self.entry(of: awaited) == nil, "the open stays lazy")
        let data = try await awaited.read(offset: 4096, length: 4096)
        #expect(data == DataChunk(bytes[4096..<8192]))
        let entry = try #require(Self.entry(of: awaited))
        #expect(entry.awaitedInline.load(ordering: .relaxed) == 1, "opened and read on this thread")
        awaited.close()

        let queue = IOQueue(label: "inline-path-handler")
        let handled = Recorder(queue: queue)
        let cleaned = Latch()
        let channel = try IOChannel(kind: .random, path: path, mode: .readOnly, queue: queue, engine: engine) { error in
            #expect(error == nil)
            cleaned.signal()
        }
        channel.read(offset: 8192, length: 4096, queue: queue, handler: handled.handler)
        // Open when `read` returns: the file was opened on this thread.
        let second = try #require(Self.entry(of: channel))
        #expect(second.handlerInline.load(ordering: .relaxed) == 1, "the read made no operation")
        channel.close()
        #expect(handled.wait(timeout: .seconds(300)) && cleaned.wait(timeout: .seconds(300)))
        #expect(handled.calls.count == 1 && handled.calls.allSatisfy { $0.onQueue })
        #expect(handled.bytes == Array(bytes[8192..<12288]) && handled.isDone)
    }

    /// Whether each of `pages` 4 KiB pages from `offset` is in the page
    /// cache (mincore on a mapping: it reads nothing); nil if it cannot tell.
    static func resident(_ fd: FileDescriptor, offset: Int, pages: Int) -> [Bool]? {
        let length = pages * 4096
        guard let base = mmap(nil, length, PROT_READ, MAP_SHARED, fd.rawValue, off_t(offset)),
              base != MAP_FAILED else { return nil }
        defer { munmap(base, length) }
        var vector = [UInt8](repeating: 0, count: pages)
        guard mincore(base, length, &vector) == 0 else { return nil }
        return vector.map { $0 & 1 != 0 }
    }

    @Test("pages not cached: the read goes to the engine (EAGAIN), part cached: the rest does (short read)",
          arguments: allBackends)
    func fallsBack(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(4 * MiB, seed: 5)
        let fd = try Self.file(dir, "f", bytes)
        defer { try? fd.close() }
        guard Self.noWaitWorks(fd) else {
            try Test.cancel("the file system under /tmp refuses RWF_NOWAIT reads")
        }
        // No readahead on this fd (read_ahead_kb is 8192 here: one refused
        // read at 0 would bring the whole file in); clean, then out of the
        // page cache.
        #expect(posix_fadvise(fd.rawValue, 0, 0, POSIX_FADV_RANDOM) == 0)
        #expect(fsync(fd.rawValue) == 0)
        #expect(posix_fadvise(fd.rawValue, 0, 0, POSIX_FADV_DONTNEED) == 0)
        var probe = [UInt8](repeating: 0, count: 4096)
        // (Residency is asked with mincore, which starts no readahead: a
        // refused RWF_NOWAIT probe read may bring the whole file back in
        // behind it, and under load it did before the channel's read.)
        guard Self.resident(fd, offset: 3 * MiB, pages: 1) == [false] else {
            try Test.cancel("the page cache kept the file after POSIX_FADV_DONTNEED")
        }
        let channel = IOChannel(kind: .random, fileDescriptor: fd, queue: .global, engine: engine)
        let entry = try #require(Self.entry(of: channel))
        let cold = try await channel.read(offset: 3 * Int64(MiB), length: 4096)
        #expect(cold == DataChunk(bytes[(3 * MiB)..<(3 * MiB + 4096)]))
        #expect(entry.inlineCount == 0)
        #expect(entry.fallbackCount == 1)
        // Bring in 8 KiB only: a 16 KiB read gets those inline, the rest
        // from the engine.
        let at = 2 * MiB
        #expect(posix_fadvise(fd.rawValue, 0, 0, POSIX_FADV_DONTNEED) == 0)
        _ = pread(fd.rawValue, &probe, 4096, off_t(at))
        _ = pread(fd.rawValue, &probe, 4096, off_t(at + 4096))
        guard Self.resident(fd, offset: at, pages: 4) == [true, true, false, false] else {
            try Test.cancel("the page cache did not hold exactly the 8 KiB read (readahead despite POSIX_FADV_RANDOM)")
        }
        let part = try await channel.read(offset: Int64(at), length: 16 * KiB)
        #expect(part == DataChunk(bytes[at..<(at + 16 * KiB)]))
        #expect(entry.inlineCount == 1, "the cached 8 KiB were read inline")
        channel.close()
    }

    @Test("a stream read queued behind a write waits for it: it reads after the written bytes",
          arguments: allBackends)
    func orderBehindWrite(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(8 * KiB, seed: 6)
        let fd = try Self.file(dir, "f", bytes)
        defer { try? fd.close() }
        let queue = IOQueue(label: "inline-order")
        let channel = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
        let entry = try #require(Self.entry(of: channel))
        let fresh = randomBytes(4 * KiB, seed: 8)
        let wrote = Recorder(queue: queue)
        let read = Recorder(queue: queue)
        // The write is queued behind a barrier; the read behind the write.
        let gate = Latch()
        channel.barrier { _ = gate.wait(timeout: .seconds(10)) }
        channel.write(data: DataChunk(fresh), queue: queue, handler: wrote.handler)
        channel.read(length: 4096, queue: queue, handler: read.handler)
        gate.signal()
        #expect(wrote.wait())
        #expect(read.wait())
        // At the position the write left: the file's second half.
        #expect(read.calls.last?.data == DataChunk(bytes[(4 * KiB)...]))
        #expect(entry.inlineCount == 0)
        #expect(positionInBarrier(of: channel, fd) == Int64(8 * KiB))
        channel.close()
    }

    @Test("tmpfs refuses RWF_NOWAIT reads: asked once per device, every read right", arguments: allBackends)
    func tmpfsProbedOnce(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let path = "/dev/shm/ringio-inline-\(getpid())-\(backend)"
        let bytes = randomBytes(16 * KiB, seed: 10)
        guard let fd = try? FileDescriptor.open(FilePath(path), .readWrite, options: [.create, .truncate],
                                               permissions: [.ownerReadWrite]) else {
            try Test.cancel("no /dev/shm here")
        }
        defer { try? fd.close(); unlink(path) }
        _ = try fd.writeAll(bytes)
        guard cliburing_fs_type(fd.rawValue) == 0x0102_1994 /* TMPFS_MAGIC */ else {
            try Test.cancel("/dev/shm is not tmpfs here")
        }
        guard !Self.noWaitWorks(fd) else {
            try Test.cancel("this kernel's tmpfs answers RWF_NOWAIT reads")
        }
        var tries = 0
        for round in 0..<2 {
            // A new fd each round: a new entry, which learns from the device.
            let again = try FileDescriptor.open(FilePath(path), .readOnly)
            defer { try? again.close() }
            let channel = IOChannel(kind: .random, fileDescriptor: again, queue: .global, engine: engine)
            let entry = try #require(Self.entry(of: channel))
            for i in 0..<4 {
                let data = try await channel.read(offset: Int64(i * 4096), length: 4096)
                #expect(data == DataChunk(bytes[(i * 4096)..<((i + 1) * 4096)]), "round \(round), read \(i)")
            }
            #expect(entry.inlineCount == 0)
            tries += entry.fallbackCount
            channel.close()
        }
        // The first read of the first round asked (unless an earlier test
        // had asked this device already); none after it.
        #expect(tries <= 1)
        var st = stat()
        #expect(fstat(fd.rawValue, &st) == 0)
        #expect(NoWaitReads.of(device: UInt64(st.st_dev)) == .unsupported)
    }
}

extension FDEntry {
    var inlineCount: Int { inlineReads.load(ordering: .relaxed) }
    var fallbackCount: Int { inlineFallbacks.load(ordering: .relaxed) }
}
