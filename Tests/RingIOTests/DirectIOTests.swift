#if canImport(Glibc)
import Glibc
#endif
import CLiburing
import Synchronization
import SystemPackage
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles
@testable import RingIOData
@testable import RingIOEngine
@testable import RingIOBase

/// Direct I/O (`IOChannel.setDirectIO`): aligned requests whatever the
/// user's ranges, exactly the bytes asked for, read-modify-write at unaligned
/// write edges, and the fallback where the file system refuses `O_DIRECT`.
@Suite("IOChannel: direct I/O")
struct DirectIOTests {
    /// Whether the channel's fd is in direct mode, seen from a barrier after `setDirectIO`.
    func directInBarrier(_ channel: IOChannel) -> Bool? {
        let seen = Locked<Bool?>(nil)
        let latch = Latch()
        channel.barrier {
            seen.withLock { $0 = channel.isDirect }
            latch.signal()
        }
        guard latch.wait() else { return nil }
        return seen.withLock { $0 }
    }

    @Test("direct reads at unaligned offsets and lengths return exactly the bytes a buffered read returns",
          arguments: allBackends)
    func unalignedReads(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("source")
        let size = 3 * IOChannel.chunkSize + 12_345  // not a multiple of any block size
        let content = randomBytes(size, seed: 91)
        try writeFile(path, content)
        let queue = IOQueue(label: "direct-read")
        let channel = try IOChannel(kind: .random, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine)
        defer { channel.close() }
        channel.setDirectIO(.required)
        #expect(directInBarrier(channel) == true, "the ext4 file did not switch to O_DIRECT")
        let flags = fcntl(channel.fileDescriptor!.rawValue, F_GETFL)
        #expect(flags & cliburing_o_direct() != 0)

        let ranges: [(Int, Int)] = [
            (0, 1), (1, 511), (511, 2), (100, 3000), (4096, 4096), (513, IOChannel.chunkSize),
            (1000, 2 * IOChannel.chunkSize + 777), (size - 10, 100), (size - 1, 1), (size + 5, 10), (7, .max),
        ]
        for (offset, length) in ranges {
            let got = try await channel.read(offset: Int64(offset), length: length)
            let end = min(size, offset.addingReportingOverflow(length).overflow ? size : offset + length)
            let expected = offset >= size ? [] : Array(content[offset..<end])
            #expect(got.count == expected.count, "read(\(offset), \(length)): \(got.count) bytes")
            #expect(Array(got) == expected, "read(\(offset), \(length)) has the wrong bytes")
        }
    }

    @Test("a direct stream read starts at an unaligned file position and leaves it after the bytes read",
          arguments: allBackends)
    func unalignedStreamRead(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("stream")
        let content = randomBytes(100_000, seed: 92)
        try writeFile(path, content)
        let fd = try openFile(path, .readOnly)
        defer { try? fd.close() }
        #expect(lseek(fd.rawValue, 123, SEEK_SET) == 123)
        let queue = IOQueue(label: "direct-stream")
        let channel = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
        channel.setDirectIO(.required)
        let first = Recorder(queue: queue)
        channel.read(length: 5000, queue: queue, handler: first.handler)
        #expect(first.wait())
        #expect(first.bytes == Array(content[123..<5123]))
        #expect(positionInBarrier(of: channel, fd) == 5123)
        let rest = Recorder(queue: queue)
        channel.read(length: .max, queue: queue, handler: rest.handler)
        #expect(rest.wait())
        #expect(rest.bytes == Array(content[5123...]))
        #expect(rest.calls.last?.done == true && rest.calls.last?.error == nil)
        channel.close()
    }

    @Test("direct writes at unaligned ranges, of discontiguous chunks, past the end and side by side in one block",
          arguments: allBackends)
    func unalignedWrites(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("target")
        var model = randomBytes(10_000, seed: 93)
        try writeFile(path, model)
        let queue = IOQueue(label: "direct-write", kind: .concurrent)
        let channel = try IOChannel(kind: .random, path: FilePath(path), mode: .readWrite, queue: queue, engine: engine)
        defer { channel.close() }
        channel.setDirectIO(.required)
        #expect(directInBarrier(channel) == true)

        func apply(_ offset: Int, _ bytes: [UInt8]) {
            if model.count < offset + bytes.count { model += [UInt8](repeating: 0, count: offset + bytes.count - model.count) }
            model.replaceSubrange(offset..<(offset + bytes.count), with: bytes)
        }
        // Inside one block; across blocks with both edges unaligned (a
        // discontiguous chunk); aligned; past the end with an unaligned end.
        let writes: [(Int, DataChunk)] = [
            (700, DataChunk(pattern(stream: 1, block: 0, count: 100))),
            (300, discontiguousChunk(pattern(stream: 1, block: 1, count: 3000), regions: 7)),
            (1024, DataChunk(pattern(stream: 1, block: 2, count: 2048))),
            (9_990, DataChunk(pattern(stream: 1, block: 3, count: 1234))),
            (20_001, DataChunk(pattern(stream: 1, block: 4, count: 77))),  // a hole before it
        ]
        for (offset, chunk) in writes {
            try await channel.write(offset: Int64(offset), data: chunk)
            apply(offset, Array(chunk))
            #expect(try readFile(path) == model, "after writing \(chunk.count) bytes at \(offset)")
        }
        // Eight writes at once, neighbours sharing blocks: none undoes another.
        try await withThrowingTaskGroup(of: Void.self) { group in
            for i in 0..<8 {
                let bytes = pattern(stream: 2, block: i, count: 300)
                group.addTask { try await channel.write(offset: Int64(2000 + i * 300), data: DataChunk(bytes)) }
                apply(2000 + i * 300, bytes)
            }
            try await group.waitForAll()
        }
        #expect(try readFile(path) == model, "concurrent writes sharing blocks")
        // A chunk a direct read returned (aligned pool memory) written back elsewhere.
        let read = try await channel.read(offset: 0, length: 2 * IOChannel.chunkSize)
        #expect(Array(read) == model)
        try await channel.write(offset: 4096, data: read)
        apply(4096, Array(read))
        #expect(try readFile(path) == model)
    }

    @Test("direct stream writes append in order at unaligned positions", arguments: allBackends)
    func streamWrites(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("appended")
        let queue = IOQueue(label: "direct-stream-write")
        let channel = try IOChannel(kind: .stream, path: FilePath(path), mode: .readWrite, options: [.create],
                                    permissions: [.ownerReadWrite], queue: queue, engine: engine)
        channel.setDirectIO(.required)
        var expected: [UInt8] = []
        let recorders = (0..<10).map { _ in Recorder(queue: queue) }
        for (i, recorder) in recorders.enumerated() {
            let bytes = pattern(stream: 3, block: i, count: 1000 + i * 37)
            expected += bytes
            channel.write(data: DataChunk(bytes), queue: queue, handler: recorder.handler)
        }
        for recorder in recorders {
            #expect(recorder.wait())
            #expect(recorder.calls.last?.done == true && recorder.calls.last?.error == nil)
        }
        let cleanup = CleanupRecorder()
        let closer = IOChannel(kind: .stream, channel: channel, queue: queue, engine: engine, cleanup: cleanup.handler)
        closer.close()
        channel.close()
        #expect(try readFile(path) == expected)

        // Write-only: blocks past the end of file need no read, but merging
        // into a block that holds bytes needs the fd readable.
        let writeOnly = try IOChannel(kind: .random, path: FilePath(path), mode: .writeOnly, queue: queue, engine: engine)
        writeOnly.setDirectIO(.required)
        let past = Recorder(queue: queue)
        let end = (expected.count / 4096 + 2) * 4096  // leaves a hole
        writeOnly.write(offset: Int64(end), data: DataChunk(pattern(stream: 3, block: 99, count: 700)), queue: queue,
                        handler: past.handler)
        #expect(past.wait())
        #expect(past.calls.last?.error == nil)
        expected += [UInt8](repeating: 0, count: end - expected.count) + pattern(stream: 3, block: 99, count: 700)
        let inside = Recorder(queue: queue)
        writeOnly.write(offset: 10, data: DataChunk([1, 2, 3]), queue: queue, handler: inside.handler)
        #expect(inside.wait())
        #expect(inside.calls.last?.error == .badFileDescriptor)
        writeOnly.close()
        #expect(try readFile(path) == expected)
    }

    @Test("aligned direct stream writes on a write-only fd run pipelined and land in order", arguments: allBackends)
    func alignedStreamWrites(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("aligned")
        let queue = IOQueue(label: "direct-aligned")
        let channel = try IOChannel(kind: .stream, path: FilePath(path), mode: .writeOnly, options: [.create, .truncate],
                                    permissions: [.ownerReadWrite], queue: queue, engine: engine)
        channel.setDirectIO(.required)
        let pieces = (0..<12).map { pattern(stream: 4, block: $0, count: 64 * 1024) } + [pattern(stream: 4, block: 99, count: 1000)]
        let recorders = pieces.map { _ in Recorder(queue: queue) }
        for (piece, recorder) in zip(pieces, recorders) {
            channel.write(data: DataChunk(piece), queue: queue, handler: recorder.handler)
        }
        for recorder in recorders {
            #expect(recorder.wait())
            #expect(recorder.calls.last?.error == nil)
        }
        channel.close()
        // The last, unaligned piece ends past the old end of file: no read, the length restored.
        #expect(try readFile(path) == pieces.flatMap { $0 })
    }

    @Test("where the file system refuses O_DIRECT (ramfs): preferred goes on buffered, required fails with EINVAL",
          arguments: allBackends)
    func refusedFallsBack(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let mountPoint = dir.file("ramfs")
        mkdir(mountPoint, 0o700)
        guard mount("none", mountPoint, "ramfs", 0, nil) == 0 else {
            try Test.cancel("cannot mount a ramfs here (\(Errno(rawValue: errno))): the O_DIRECT fallback is not tested")
        }
        defer { umount2(mountPoint, Int32(MNT_DETACH)) }
        let path = mountPoint + "/file"
        let content = randomBytes(50_000, seed: 94)
        try writeFile(path, content)
        let queue = IOQueue(label: "direct-refused")

        let preferred = try IOChannel(kind: .random, path: FilePath(path), mode: .readWrite, queue: queue, engine: engine)
        preferred.setDirectIO(.preferred)
        #expect(directInBarrier(preferred) == false)
        let got = try await preferred.read(offset: 333, length: 10_000)
        #expect(Array(got) == Array(content[333..<10_333]))
        try await preferred.write(offset: 3, data: DataChunk([1, 2, 3]))
        #expect(try readFile(path)[3..<6] == [1, 2, 3])
        preferred.close()

        let required = try IOChannel(kind: .random, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine)
        required.setDirectIO(.required)
        await #expect(throws: Errno.invalidArgument) {
            _ = try await required.read(offset: 0, length: 100)
        }
        required.close()
    }
}

/// Registered buffers and files (io_uring; the thread pool has the same
/// results without them).
@Suite("Engine: registered buffers and files")
struct RegistrationTests {
    @Test("a pooled read buffer is reused only after every chunk referring to it is gone (10,000 later reads)",
          arguments: allBackends)
    func heldBufferStaysIntact(backend: IOEngine.Backend) throws {
        let engine: IOEngine
        do {
            var configuration = IOEngine.Configuration(ringEntries: 64, backend: backend)
            configuration.registersBuffers = true
            engine = try IOEngine(configuration: configuration)
        } catch {
            try Test.cancel("io_uring is unavailable here, skipping: \(IOEngine.explainSetupFailure(error))")
        }
        let dir = TemporaryDirectory()
        let path = dir.file("pool")
        let tailSize = 64 * 1024
        let content = randomBytes(IOChannel.chunkSize + tailSize, seed: 95)
        try writeFile(path, content)
        let queue = IOQueue(label: "pool", kind: .concurrent)
        let channel = try IOChannel(kind: .random, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine)
        defer { channel.close() }

        // A full 1 MiB read: its chunk is the pool buffer itself. Keep only a
        // subrange of it.
        let first = Recorder(queue: queue)
        channel.read(offset: 0, length: IOChannel.chunkSize, queue: queue, handler: first.handler)
        #expect(first.wait())
        let whole = first.calls.reduce(DataChunk.empty) { $0 + ($1.data ?? .empty) }
        #expect(whole.count == IOChannel.chunkSize)
        #expect(whole.soleStorage is ReadBuffer, "the first read was not delivered in its pool buffer")
        let held = whole.subrange(1000..<200_000)
        let expected = Array(content[1000..<200_000])

        // 10,000 reads, 32 at a time, each into a pool buffer (1 MiB
        // requests); the kernel fills each with the file's other bytes.
        let total = 10_000
        let started = Atomic<Int>(0)
        let finished = Latch()
        let failures = Atomic<Int>(0)
        let tail = DataChunk(content[IOChannel.chunkSize...])
        @Sendable func next() {
            let i = started.add(1, ordering: .relaxed).newValue
            guard i <= total else { return }
            let collected = Locked(DataChunk.empty)
            channel.read(offset: Int64(IOChannel.chunkSize), length: IOChannel.chunkSize, queue: queue) { done, data, error in
                let all = collected.withLock { acc -> DataChunk in
                    if let data { acc = acc + data }
                    return acc
                }
                guard done else { return }
                if error != nil || all.count != tailSize || all != tail { failures.add(1, ordering: .relaxed) }
                if i == total { finished.signal() } else { next() }
            }
        }
        for _ in 0..<32 { next() }
        // A bound on a hang only: 10,000 reads of 1 MiB took over 60 s under
        // ThreadSanitizer on a loaded 2-core machine.
        #expect(finished.wait(timeout: .seconds(300)))
        #expect(failures.load(ordering: .relaxed) == 0)
        #expect(Array(held) == expected, "a buffer still referred to was reused")
        if backend == .ioUring {
            let stats = engine.registrationStatistics
            // Tests running beside this one share the pool's permanent
            // buffers: some reads may get ordinary ones.
            #expect(stats.buffersRegistered > 0 && stats.fixedBufferRequests > 0,
                    "reads did not go as READ_FIXED: \(stats)")
        }
    }

    @Test("fixed files: the table fills, later fds go unregistered, and a closed channel's slot is reused",
          arguments: allBackends)
    func fileTableFull(backend: IOEngine.Backend) throws {
        let engine: IOEngine
        do {
            var configuration = IOEngine.Configuration(ringEntries: 64, backend: backend)
            configuration.registeredFileSlots = 2
            engine = try IOEngine(configuration: configuration)
        } catch {
            try Test.cancel("io_uring is unavailable here, skipping: \(IOEngine.explainSetupFailure(error))")
        }
        #if DEBUG
        // The table fills with the fds of requests sent to the ring; a read
        // of cached bytes may be done inline instead, on the submitting
        // thread, and never register its fd. A rule that matches no fd keeps
        // every read on the engine's path (an engine with fault rules does
        // no inline reads).
        engine.faults.add(.init(target: .reads, fd: -1, fault: .fail(EIO)))
        #endif
        let dir = TemporaryDirectory()
        let queue = IOQueue(label: "fixed-files", kind: .concurrent)
        let contents = (0..<5).map { randomBytes(64 * 1024, seed: 100 + UInt64($0)) }
        for (i, content) in contents.enumerated() { try writeFile(dir.file("f\(i)"), content) }

        /// 32 reads of 2 KiB from file `i` through its own channel; returns the channel and its cleanup.
        func readMany(_ i: Int) throws -> (IOChannel, CleanupRecorder) {
            let cleanup = CleanupRecorder()
            let channel = try IOChannel(kind: .random, path: FilePath(dir.file("f\(i)")), mode: .readOnly,
                                        queue: queue, engine: engine, cleanup: cleanup.handler)
            let recorders = (0..<32).map { _ in Recorder(queue: queue) }
            for (j, recorder) in recorders.enumerated() {
                channel.read(offset: Int64(j * 2048), length: 2048, queue: queue, handler: recorder.handler)
            }
            for (j, recorder) in recorders.enumerated() {
                #expect(recorder.wait())
                #expect(recorder.bytes == Array(contents[i][(j * 2048)..<((j + 1) * 2048)]), "file \(i), read \(j)")
            }
            return (channel, cleanup)
        }
        let open = try (0..<4).map { try readMany($0) }
        let stats = engine.registrationStatistics
        if backend == .ioUring {
            #expect(stats.filesRegistered == 2, "\(stats)")
            #expect(stats.fileTableFull == 2, "\(stats)")
            #expect(stats.fixedFileRequests > 0, "\(stats)")
        } else {
            #expect(stats.filesRegistered == 0 && stats.fixedFileRequests == 0)
        }
        for (channel, cleanup) in open {
            channel.close()
            #expect(cleanup.wait())
        }
        let (fifth, cleanup) = try readMany(4)
        fifth.close()
        #expect(cleanup.wait())
        if backend == .ioUring {
            let after = engine.registrationStatistics
            #expect(after.filesUnregistered == 3, "\(after)")
            #expect(after.filesRegistered == 3, "a freed slot was not reused: \(after)")
        }
    }

    @Test("a direct write on a write-only fd whose range needs a read-modify-write fails before writing: no byte it reports unwritten changed",
          arguments: allBackends)
    func writeOnlyUnalignedChangesNothing(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("write-only")
        let content = randomBytes(5 * 4096, seed: 19)
        try writeFile(path, content)
        let queue = IOQueue(label: "write-only")
        for (offset, count) in [(100, 3 * 4096), (4096, 4096 + 10), (100, 1000), (4000, 200)] {
            let channel = try IOChannel(kind: .random, path: FilePath(path), mode: .writeOnly, queue: queue,
                                        engine: engine)
            channel.setDirectIO(.required)
            let recorder = Recorder(queue: queue)
            channel.write(offset: Int64(offset), data: DataChunk([UInt8](repeating: 0xEE, count: count)),
                          queue: queue, handler: recorder.handler)
            #expect(recorder.wait())
            let last = recorder.calls.last
            #expect(last?.done == true && last?.error == .badFileDescriptor && last?.data?.count == count,
                    "offset \(offset), \(count) bytes: \(recorder.shapes)")
            channel.close()
            #expect(try readFile(path) == content, "offset \(offset), \(count) bytes changed the file")
        }
    }
}
