#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Synchronization
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles
@testable import RingIOEngine
@testable import RingIOBase

/// How awaited reads and writes wait and resume: the cancellation link,
/// what they keep alive, and tasks whose executor is an `IOQueue`.
@Suite("IOChannel: async resume")
struct AsyncResumeTests {
    @Test("a task cancelled before it awaits a read of an empty pipe throws .canceled at once and consumes nothing",
          arguments: allBackends, [false, true])
    func cancelledBeforeRead(backend: IOEngine.Backend, onRing: Bool) async throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        defer { pipe.closeAll() }
        let queue = onRing ? engine.queue : IOQueue(label: "cancelled-first")
        let channel = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: queue, engine: engine)
        let task = Task(executorPreference: queue) { () async throws -> DataChunk in
            withUnsafeCurrentTask { $0?.cancel() }
            // The cancellation handler runs before the read is submitted: the
            // read is stopped as soon as it is attached (it would block forever).
            return try await channel.read(length: 100)
        }
        await #expect(throws: Errno.canceled) { try await task.value }
        // The pipe still holds everything written next: the stopped read took nothing.
        _ = try pipe.writer.writeAll(Array("next".utf8))
        let next = try await channel.read(length: 4)
        #expect(Array(next) == Array("next".utf8))
        channel.close()
    }

    @Test("an awaited write keeps nothing alive once it returns: its chunk is given back",
          arguments: allBackends, [false, true])
    func writeReleasesItsChunk(backend: IOEngine.Backend, onRing: Bool) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let queue = onRing ? engine.queue : IOQueue(label: "release")
        let channel = try IOChannel(kind: .random, path: FilePath(dir.file("f")), mode: .readWrite,
                                    options: [.create, .truncate], permissions: [.ownerReadWrite],
                                    queue: queue, engine: engine)
        let returned = Atomic<Int>(0)
        let rounds = 20
        try await Task(executorPreference: queue) { () async throws in
            for round in 0..<rounds {
                let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 16)
                buffer.initializeMemory(as: UInt8.self, repeating: UInt8(round))
                let chunk = DataChunk(bytesNoCopy: UnsafeRawBufferPointer(buffer), deallocator: .custom(queue: nil) { bytes in
                    bytes.deallocate()
                    returned.add(1, ordering: .relaxed)
                })
                try await channel.write(offset: Int64(round) * 4096, data: chunk)
                let back = try await channel.read(offset: Int64(round) * 4096, length: 4096)
                #expect(Array(back) == [UInt8](repeating: UInt8(round), count: 4096))
            }
        }.value
        // Every operation (which holds its chunk until it is freed) is gone:
        // nothing kept them alive after their task resumed.
        #expect(waitUntil { returned.load(ordering: .relaxed) == rounds },
                "\(returned.load(ordering: .relaxed)) of \(rounds) written chunks given back")
        channel.close()
    }

    @Test("tasks in a group on an engine's queue: each awaited read resumes on that queue with the right bytes",
          arguments: allBackends)
    func groupOnRing(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(64 * 4096, seed: 95)
        try writeFile(dir.file("f"), bytes)
        let channel = try IOChannel(kind: .random, path: FilePath(dir.file("f")), mode: .readOnly,
                                    queue: engine.queue, engine: engine)
        let (mismatches, offQueue, offRing) = try await withTaskExecutorPreference(engine.queue) {
            try await withThrowingTaskGroup(of: (Int, Int, Int).self) { group in
                for worker in 0..<8 {
                    group.addTask {
                        var result = (0, 0, 0)
                        for i in 0..<100 {
                            let block = (worker * 131 + i * 17) % 64
                            let chunk = try await channel.read(offset: Int64(block) * 4096, length: 4096)
                            if Array(chunk) != Array(bytes[block * 4096..<(block + 1) * 4096]) { result.0 += 1 }
                            if !engine.queue.isCurrent { result.1 += 1 }
                            if backend == .ioUring && currentThreadName(engine) != "ring" { result.2 += 1 }
                        }
                        return result
                    }
                }
                return try await group.reduce((0, 0, 0)) { ($0.0 + $1.0, $0.1 + $1.1, $0.2 + $1.2) }
            }
        }
        #expect(mismatches == 0)
        #expect(offQueue == 0, "\(offQueue) of 800 reads resumed off the engine's queue")
        #expect(offRing == 0, "\(offRing) of 800 reads resumed off the ring thread")
        channel.close()
    }

    @Test("a task preferring a concurrent IOQueue resumes there after each awaited read", arguments: allBackends)
    func concurrentQueuePreference(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(16 * 4096, seed: 96)
        try writeFile(dir.file("f"), bytes)
        let queue = IOQueue(label: "concurrent-preference", kind: .concurrent)
        let channel = try IOChannel(kind: .random, path: FilePath(dir.file("f")), mode: .readOnly,
                                    queue: queue, engine: engine)
        let (same, onQueue) = try await Task(executorPreference: queue) { () async throws -> (Bool, Bool) in
            var same = true, onQueue = true
            for block in 0..<16 {
                let chunk = try await channel.read(offset: Int64(block) * 4096, length: 4096)
                same = same && Array(chunk) == Array(bytes[block * 4096..<(block + 1) * 4096])
                onQueue = onQueue && queue.isCurrent
            }
            return (same, onQueue)
        }.value
        #expect(same)
        #expect(onQueue)
        channel.close()
    }
}

@Suite("IOQueue as a task executor: one job per await")
struct TaskExecutorHopTests {
    @Test("a task preferring a serial IOQueue runs one job per awaited read, not two", arguments: allBackends, [false, true])
    func oneJobPerAwait(backend: IOEngine.Backend, onRing: Bool) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(32 * 4096, seed: 97)
        try writeFile(dir.file("f"), bytes)
        let queue = onRing ? engine.queue : IOQueue(label: "one-job-per-await")
        let channel = try IOChannel(kind: .random, path: FilePath(dir.file("f")), mode: .readOnly,
                                    queue: queue, engine: engine)
        let reads = 200
        let before = queue.jobsRun.load(ordering: .relaxed)
        let same = try await Task(executorPreference: queue) { () async throws -> Bool in
            var same = true
            for i in 0..<reads {
                let block = (i * 7) % 32
                let chunk = try await channel.read(offset: Int64(block) * 4096, length: 4096)
                same = same && Array(chunk) == Array(bytes[block * 4096..<(block + 1) * 4096])
            }
            return same
        }.value
        let jobs = queue.jobsRun.load(ordering: .relaxed) - before
        #expect(same)
        // At most one job per read (its resumption; none when the read was
        // done before the task suspended), and a few to start and end the
        // task. A task run as if isolated to the queue took one more per
        // read: the runtime sent it back through the queue on its way out of
        // the read.
        #expect(jobs <= reads + 10, "\(jobs) jobs for \(reads) awaited reads")
        channel.close()
    }
}

/// Holds the only reference to an operation outside the channel.
private final class OperationBox: Sendable {
    private let state = Locked<(operation: ChannelOperation?, finished: Bool)>((nil, false))

    /// Keeps `operation` unless its last handler call already ran.
    func keep(_ operation: ChannelOperation) {
        state.withLock { if !$0.finished { $0.operation = operation } }
    }

    /// The last handler call: drops the reference.
    func finish() {
        let operation = state.withLock { s -> ChannelOperation? in
            s.finished = true
            defer { s.operation = nil }
            return s.operation
        }
        _ = operation  // released here, outside the lock, on the handler's thread
    }
}

@Suite("ChannelOperation: lifetime while its handler runs")
struct OperationLifetimeTests {
    @Test("an inline handler that drops the last reference to its operation outside the channel is safe",
          arguments: allBackends)
    func handlerDropsLastReference(backend: IOEngine.Backend) throws {
        // An awaited read's task, resumed by the last handler call, may drop
        // its reference to the operation at once (on another thread, or
        // right there); the channel drops its own when the call returns. The
        // operation must stay alive until its delivery loop is done with it.
        // In the optimized throughput runner, an awaited read that dropped it
        // there corrupted the heap within a few hundred thousand reads; this
        // test runs the same pattern (it did not fail in a debug or
        // AddressSanitizer build without the fix, where callers retain more).
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(16 * 4096, seed: 98)
        try writeFile(dir.file("f"), bytes)
        let channel = try IOChannel(kind: .random, path: FilePath(dir.file("f")), mode: .readOnly,
                                    queue: IOQueue(label: "lifetime"), engine: engine)
        let core = channel.core
        for i in 0..<200 {
            let box = OperationBox()
            let done = Latch()
            let got = Locked(0)
            // No local holds the operation: the box's reference is the only one
            // outside the channel.
            box.keep(core.submit(direction: .read, offset: Int64(i % 16) * 4096, length: 4096, data: .empty,
                                 queue: core.queue, options: OperationOptions(inline: true)) { finished, data, _ in
                got.withLock { $0 += data?.count ?? 0 }
                guard finished else { return }
                box.finish()
                done.signal()
            })
            #expect(done.wait())
            #expect(got.withLock { $0 } == 4096)
        }
        channel.close()
    }
}
