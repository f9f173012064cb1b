#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles
@testable import RingIOEngine
@testable import RingIOBase

/// An actor that lives on a serial IOQueue: channel handlers delivered on
/// that queue touch its state with `assumeIsolated`, without a hop.
actor ByteCounter {
    let queue: IOQueue
    init(queue: IOQueue) { self.queue = queue }
    nonisolated var unownedExecutor: UnownedSerialExecutor { queue.asUnownedSerialExecutor() }
    var bytes = 0
    var calls = 0
    func add(_ n: Int) {
        bytes += n
        calls += 1
    }
}

@Suite("IOChannel: async/await")
struct AsyncChannelTests {
    @Test("async read returns the bytes; async write writes them; at EOF read returns fewer", arguments: allBackends)
    func readWrite(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(3 * MiB + 17, seed: 61)
        let queue = IOQueue(label: "async")
        let writer = try IOChannel(kind: .random, path: FilePath(dir.file("f")), mode: .readWrite,
                                   options: [.create, .truncate], permissions: [.ownerReadWrite],
                                   queue: queue, engine: engine)
        try await writer.write(offset: 0, data: DataChunk(bytes))
        try await writer.synchronize()
        try await writer.synchronize(dataOnly: true)
        let middle = try await writer.read(offset: 1000, length: 5000)
        #expect(Array(middle) == Array(bytes[1000..<6000]))
        let all = try await writer.read(offset: 0, length: .max)
        #expect(Array(all) == bytes)
        let tail = try await writer.read(offset: Int64(bytes.count - 10), length: 100)
        #expect(Array(tail) == Array(bytes[(bytes.count - 10)...]))
        writer.close()
        await #expect(throws: Errno.canceled) { try await writer.synchronize() }
        do {
            _ = try await writer.read(length: 1)
            Issue.record("a read after close did not throw")
        } catch {
            #expect(error == .canceled)
        }
    }

    @Test("chunks: every chunk in order, 1 MiB each on a file, and the whole file", arguments: allBackends)
    func chunksInOrder(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(5 * MiB + 17, seed: 62)
        try writeFile(dir.file("f"), bytes)
        let channel = try IOChannel(kind: .stream, path: FilePath(dir.file("f")), mode: .readOnly,
                                    queue: IOQueue(label: "chunks"), engine: engine)
        var sizes: [Int] = []
        var all = DataChunk.empty
        for try await chunk in channel.chunks() {
            sizes.append(chunk.count)
            all = all + chunk
        }
        #expect(sizes == [MiB, MiB, MiB, MiB, MiB, 17])
        #expect(Array(all) == bytes)
        channel.close()
    }

    @Test("chunks at a 64 KiB high-water mark on a file: every chunk in order, a file shorter than a wake's worth too", arguments: allBackends)
    func chunksSmallInOrder(backend: IOEngine.Backend) async throws {
        // On a regular file the waiting loop is woken once a wake's worth of
        // chunks waits (ChunkStream.wakeBytes), or at the end of the read.
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        for size in [5 * MiB + 17, 100 * KiB] {
            let bytes = randomBytes(size, seed: 63)
            try writeFile(dir.file("f\(size)"), bytes)
            let channel = try IOChannel(kind: .stream, path: FilePath(dir.file("f\(size)")), mode: .readOnly,
                                        queue: IOQueue(label: "chunks64"), engine: engine)
            channel.setHighWater(64 * KiB)
            var sizes: [Int] = []
            var all = DataChunk.empty
            for try await chunk in channel.chunks() {
                sizes.append(chunk.count)
                all = all + chunk
            }
            #expect(sizes == Array(repeating: 64 * KiB, count: size / (64 * KiB)) + [size % (64 * KiB)])
            #expect(Array(all) == bytes)
            channel.close()
        }
    }

    @Test("chunks reads at most two chunks ahead of a consumer that sleeps", arguments: allBackends)
    func chunksBackpressure(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let fd = try FileDescriptor.open(FilePath(dir.file("sparse")), .readWrite, options: [.create, .closeOnExec],
                                         permissions: [.ownerReadWrite])
        #expect(ftruncate(fd.rawValue, 64 << 20) == 0)
        defer { try? fd.close() }
        let channel = IOChannel(kind: .random, fileDescriptor: fd, queue: IOQueue(label: "bp"), engine: engine)
        let sequence = channel.chunks()
        var iterator = sequence.makeAsyncIterator()
        let first = try await iterator.next()
        #expect(first?.count == MiB)
        // The consumer sleeps; the producer must stop two chunks ahead.
        try await Task.sleep(for: .milliseconds(300))
        let ahead = iterator.stream.readAheadBytes
        #expect(ahead > 0 && ahead <= 2 * MiB, "read ahead \(ahead) bytes")
        var count = 1
        while let chunk = try await iterator.next() {
            #expect(chunk.count == MiB)
            count += 1
        }
        #expect(count == 64)
        channel.close()
    }

    @Test("leaving a chunks loop early ends the read: the channel's cleanup can run", arguments: allBackends)
    func chunksEarlyBreak(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        defer { pipe.closeAll() }
        let cleanup = CleanupRecorder()
        let channel = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: IOQueue(label: "brk"),
                                engine: engine, cleanup: cleanup.handler)
        _ = try pipe.writer.writeAll(Array("first".utf8))
        for try await chunk in channel.chunks() {
            #expect(Array(chunk) == Array("first".utf8))
            break  // the read is still pending on the (empty) pipe
        }
        channel.close()
        // The cleanup waits for every operation: it runs only if the read ended.
        #expect(cleanup.wait(timeout: .seconds(5)))
        #expect(channel.core.readAheadBytes == 0)
    }

    @Test("cancelling a task blocked in a read of an empty pipe throws .canceled promptly", arguments: allBackends)
    func cancelBlockedRead(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        defer { pipe.closeAll() }
        let channel = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: IOQueue(label: "cancel"), engine: engine)
        // The task runs on an IOQueue and notes when the read ended there: the
        // figure is the library's, not the wait of this test for one of Swift's
        // cooperative threads (in a whole `swift test` run, other tests' blocking
        // waits can hold them for seconds).
        let ended = Locked<UInt64>(0)
        let task = Task(executorPreference: IOQueue(label: "cancel-task")) { () async throws -> DataChunk in
            defer { ended.withLock { $0 = monotonicNanoseconds() } }
            return try await channel.read(length: 100)
        }
        try await Task.sleep(for: .milliseconds(100))
        let start = monotonicNanoseconds()
        task.cancel()
        let result = await task.result
        // Promptly (a blocked read would never return); generous for sanitizer runs.
        let end = ended.withLock { $0 }
        #expect(end >= start && end - start < 5_000_000_000, "the cancelled read ended \(Int64(bitPattern: end &- start)) ns after the cancel")
        #expect(throws: Errno.canceled) { try result.get() }
        // The channel still works: the cancel ended that read only.
        _ = try pipe.writer.writeAll(Array("after".utf8))
        let after = try await channel.read(length: 5)
        #expect(Array(after) == Array("after".utf8))
        channel.close()
    }

    @Test("cancelling the task that iterates chunks ends the read with .canceled", arguments: allBackends)
    func cancelChunks(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        defer { pipe.closeAll() }
        let channel = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: IOQueue(label: "cc"), engine: engine)
        let task = Task { () async throws(Errno) -> Int in
            var n = 0
            for try await chunk in channel.chunks() { n += chunk.count }
            return n
        }
        try await Task.sleep(for: .milliseconds(100))
        task.cancel()
        let result = await task.result
        #expect(throws: Errno.canceled) { try result.get() }
        channel.close()
    }

    @Test("1,000 concurrent tasks each read their own file", arguments: allBackends)
    func thousandTasks(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let n = 1000
        for i in 0..<n { try writeFile(dir.file("f\(i)"), pattern(stream: i, block: 0, count: 1000 + i)) }
        let base = dir.path
        let mismatches = try await withThrowingTaskGroup(of: Int.self) { group in
            for i in 0..<n {
                group.addTask {
                    let data = try await IO.readFile(at: FilePath(base + "/f\(i)"), engine: engine)
                    return Array(data) == pattern(stream: i, block: 0, count: 1000 + i) ? 0 : 1
                }
            }
            return try await group.reduce(0, +)
        }
        #expect(mismatches == 0)
    }

    @Test("writeFile (atomic and in place), readFile and copyFile; an empty path throws EINVAL, errors name the file", arguments: allBackends)
    func conveniences(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(2 * MiB + 5, seed: 63)
        let target = FilePath(dir.file("out"))
        try writeFile(dir.file("out"), Array("old contents".utf8))
        try await IO.writeFile(discontiguousChunk(bytes, regions: 7), to: target, engine: engine)
        #expect(try readFile(dir.file("out")) == bytes)
        // Nothing but the target is left in the directory (the temporary file was renamed).
        #expect(try FileManagerless.list(dir.path) == ["out"])
        try await IO.writeFile(DataChunk(Array("short".utf8)), to: target, atomically: false, engine: engine)
        #expect(try readFile(dir.file("out")) == Array("short".utf8))
        try await IO.writeFile(DataChunk(bytes), to: target, engine: engine)
        try await IO.copyFile(from: target, to: FilePath(dir.file("copy")), engine: engine)
        let copied = try await IO.readFile(at: FilePath(dir.file("copy")), engine: engine)
        #expect(Array(copied) == bytes)
        let empty = await #expect(throws: IOError.self) { try await IO.readFile(at: "", engine: engine) }
        #expect(empty?.errno == .invalidArgument)
        let missing = await #expect(throws: IOError.self) {
            try await IO.readFile(at: FilePath(dir.file("missing")), engine: engine)
        }
        #expect(missing?.errno == .noSuchFileOrDirectory && missing?.path == FilePath(dir.file("missing")))
        let noDirectory = await #expect(throws: IOError.self) {
            try await IO.writeFile(DataChunk(bytes), to: FilePath(dir.file("no/such/dir/file")), engine: engine)
        }
        #expect(noDirectory?.errno == .noSuchFileOrDirectory && noDirectory?.operation == .openForWriting)
    }

    @Test("an actor on a serial IOQueue takes handler calls on that queue without a hop", arguments: allBackends)
    func actorOnQueue(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(3 * MiB, seed: 64)
        try writeFile(dir.file("f"), bytes)
        let queue = IOQueue(label: "actor")
        let counter = ByteCounter(queue: queue)
        let channel = try IOChannel(kind: .stream, path: FilePath(dir.file("f")), mode: .readOnly,
                                    queue: queue, engine: engine)
        let done = Latch()
        channel.read(length: .max, queue: queue) { finished, data, _ in
            // On the actor's own executor: synchronous access, no await.
            counter.assumeIsolated { $0.add(data?.count ?? 0) }
            if finished { done.signal() }
        }
        #expect(done.wait())
        #expect(await counter.bytes == bytes.count)
        #expect(await counter.calls == 4)  // three chunks and the end of file
        channel.close()
    }
}

/// Directory listing without Foundation.
enum FileManagerless {
    static func list(_ path: String) throws -> [String] {
        guard let dir = opendir(path) else { throw Errno(rawValue: errno) }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names.sorted()
    }
}
