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

/// Stream channels: one FIFO per fd, the offset ignored, the file position moved.
@Suite("IOChannel: stream")
struct ChannelStreamTests {
    @Test("a 2 MiB + 123-byte random file copied by a stream read channel piped into a write channel is byte-identical",
          arguments: allBackends)
    func copyThroughTwoChannels(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let source = randomBytes(2 * MiB + 123, seed: 2123)
        try writeFile(dir.file("source"), source)
        let queue = IOQueue(label: "copy")
        let inputCleanup = CleanupRecorder(queue: queue), outputCleanup = CleanupRecorder(queue: queue)
        let input = try IOChannel(kind: .stream, path: FilePath(dir.file("source")), mode: .readOnly,
                                  queue: queue, engine: engine, cleanup: inputCleanup.handler)
        let output = try IOChannel(kind: .stream, path: FilePath(dir.file("copy")), mode: .writeOnly,
                                   options: [.create, .truncate], permissions: [.ownerReadWrite],
                                   queue: queue, engine: engine, cleanup: outputCleanup.handler)
        // Every write's handler calls, in submission order.
        let writes = Locked<[Recorder]>([])
        let reader = Recorder(queue: queue) { call in
            if let data = call.data, !data.isEmpty {
                let writer = Recorder(queue: queue)
                writes.withLock { $0.append(writer) }
                output.write(data: data, queue: queue, handler: writer.handler)
            }
            if call.done {
                input.close()
                output.close()
            }
        }
        input.read(length: .max, queue: queue, handler: reader.handler)
        #expect(reader.wait(timeout: .seconds(20)))
        // The output's cleanup runs once its writes have finished and their handlers returned.
        #expect(outputCleanup.wait(timeout: .seconds(20)))
        #expect(inputCleanup.wait(timeout: .seconds(5)))
        #expect(outputCleanup.error == nil)
        #expect(inputCleanup.error == nil)
        let shapes = reader.shapes
        #expect(shapes.last == Shape(true, 0, nil))
        #expect(shapes.dropLast().allSatisfy { !$0.done && $0.error == nil })
        #expect(reader.bytes == source)
        let writeRecorders = writes.withLock { $0 }
        #expect(writeRecorders.allSatisfy { $0.isDone && $0.shapes.last == Shape(true, nil, nil) })
        let copy = try readFile(dir.file("copy"))
        #expect(copy.count == source.count)
        #expect(copy == source, "the copy differs from the source")
    }

    @Test("operations of every stream channel on one fd run in submission order", arguments: allBackends)
    func oneFIFOAcrossChannels(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let fd = try FileDescriptor.open(FilePath(dir.file("fifo")), .readWrite,
                                         options: [.create, .truncate, .closeOnExec], permissions: [.ownerReadWrite])
        defer { try? fd.close() }
        let queue = IOQueue(label: "fifo")
        let first = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
        let second = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
        let pieces = (0..<6).map { pattern(stream: 3, block: $0, count: 10_000 + $0 * 777) }
        let order = Locked<[Int]>([])
        var recorders: [Recorder] = []
        for (i, piece) in pieces.enumerated() {
            let recorder = Recorder(queue: queue) { call in if call.done { order.withLock { $0.append(i) } } }
            recorders.append(recorder)
            // Alternate the channels; the offset of a stream write is ignored.
            (i % 2 == 0 ? first : second).write(offset: 1_000_000, data: DataChunk(piece), queue: queue,
                                                 handler: recorder.handler)
        }
        for recorder in recorders { #expect(recorder.wait()) }
        #expect(order.withLock { $0 } == Array(0..<6))
        #expect(recorders.allSatisfy { $0.shapes.last == Shape(true, nil, nil) })
        #expect(try readFile(dir.file("fifo")) == pieces.flatMap { $0 })
        #expect(positionInBarrier(of: second, fd) == Int64(pieces.reduce(0) { $0 + $1.count }))
        first.close()
        second.close()
    }

    @Test("a stream write ignores the offset and writes at the file position, which it moves", arguments: allBackends)
    func writeAtFilePosition(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("position")
        try writeFile(path, [UInt8](repeating: 0x2E, count: 100))
        let fd = try openFile(path)
        defer { try? fd.close() }
        #expect(lseek(fd.rawValue, 40, SEEK_SET) == 40)
        let queue = IOQueue(label: "position")
        let channel = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
        let data = pattern(stream: 4, block: 0, count: 1000)
        let recorder = Recorder(queue: queue)
        channel.write(offset: 7, data: DataChunk(data), queue: queue, handler: recorder.handler)
        #expect(recorder.wait())
        #expect(recorder.shapes.last == Shape(true, nil, nil))
        #expect(positionInBarrier(of: channel, fd) == 1040)
        let content = try readFile(path)
        #expect(content == [UInt8](repeating: 0x2E, count: 40) + data)
        channel.close()
    }

    @Test("a stream read ignores the offset, reads from the file position and moves it", arguments: allBackends)
    func readMovesPosition(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("read-position")
        let content = randomBytes(300_000, seed: 5)
        try writeFile(path, content)
        let fd = try openFile(path, .readOnly)
        defer { try? fd.close() }
        #expect(lseek(fd.rawValue, 1000, SEEK_SET) == 1000)
        let queue = IOQueue(label: "read-position")
        let channel = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
        let a = Recorder(queue: queue), b = Recorder(queue: queue)
        channel.read(offset: 123_456, length: 5000, queue: queue, handler: a.handler)
        channel.read(offset: 0, length: 200_000, queue: queue, handler: b.handler)
        #expect(a.wait())
        #expect(b.wait())
        #expect(a.bytes == Array(content[1000..<6000]))
        #expect(b.bytes == Array(content[6000..<206_000]))
        #expect(a.calls.last?.done == true && a.calls.last?.error == nil)
        #expect(b.calls.last?.done == true && b.calls.last?.error == nil)
        #expect(positionInBarrier(of: channel, fd) == 206_000)
        channel.close()
    }

    @Test("two stream reads on one channel run one after another: every call of the first precedes the second's",
          arguments: allBackends)
    func operationsRunInOrder(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("order")
        let content = randomBytes(3 * MiB, seed: 6)
        try writeFile(path, content)
        let queue = IOQueue(label: "order")
        let channel = try IOChannel(kind: .stream, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine)
        channel.setHighWater(256 * KiB)
        let log = Locked<[Int]>([])
        let a = Recorder(queue: queue) { _ in log.withLock { $0.append(1) } }
        let b = Recorder(queue: queue) { _ in log.withLock { $0.append(2) } }
        channel.read(length: 1 * MiB + 5, queue: queue, handler: a.handler)
        channel.read(length: .max, queue: queue, handler: b.handler)
        #expect(a.wait())
        #expect(b.wait())
        let sequence = log.withLock { $0 }
        #expect(sequence == sequence.sorted(), "calls of the two reads interleaved")
        #expect(a.bytes == Array(content[0..<(MiB + 5)]))
        #expect(b.bytes == Array(content[(MiB + 5)...]))
        channel.close()
    }

    @Test("a stream channel's handlers and cleanup run on the queues they were given", arguments: allBackends)
    func handlersRunOnTheirQueues(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("queues")
        try writeFile(path, randomBytes(600 * KiB, seed: 7))
        let channelQueue = IOQueue(label: "channel")
        let readQueue = IOQueue(label: "read")
        let writeQueue = IOQueue(label: "write", kind: .concurrent)
        let cleanup = CleanupRecorder(queue: channelQueue)
        let channel = try IOChannel(kind: .stream, path: FilePath(path), mode: .readWrite,
                                    queue: channelQueue, engine: engine, cleanup: cleanup.handler)
        channel.setHighWater(64 * KiB)
        let reader = Recorder(queue: readQueue), writer = Recorder(queue: writeQueue)
        channel.read(length: .max, queue: readQueue, handler: reader.handler)
        channel.write(data: DataChunk(randomBytes(300 * KiB, seed: 8)), queue: writeQueue, handler: writer.handler)
        #expect(reader.wait())
        #expect(writer.wait())
        channel.close()
        #expect(cleanup.wait())
        #expect(reader.calls.count >= 10)
        #expect(reader.callsOffQueue == 0)
        #expect(writer.callsOffQueue == 0)
        #expect(cleanup.ranOnQueue)
        #expect(cleanup.calls == 1)
    }
}
