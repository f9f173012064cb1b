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

/// What read and write handlers receive, call by call.
@Suite("IOChannel: read and write deliveries")
struct ChannelDeliveryTests {
    @Test("a 100-byte file read with length Int.max: (false, 100 bytes, nil), (true, empty, nil)", arguments: allBackends)
    func hundredByteFile(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("hundred")
        let content = randomBytes(100, seed: 41)
        try writeFile(path, content)
        for kind in [IOChannel.Kind.stream, .random] {
            let queue = IOQueue(label: "hundred")
            let channel = try IOChannel(kind: kind, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine)
            let r = Recorder(queue: queue)
            channel.read(length: .max, queue: queue, handler: r.handler)
            #expect(r.wait())
            #expect(r.settledShapes() == [Shape(false, 100, nil), Shape(true, 0, nil)], "\(kind)")
            #expect(r.calls.first?.data == DataChunk(content))
            #expect(r.calls.last?.data == DataChunk.empty)
            channel.close()
        }
    }

    @Test("a read that reaches its length ends with (true, last bytes, nil) and no extra EOF call", arguments: allBackends)
    func lengthReached(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("length")
        let content = randomBytes(1000, seed: 42)
        try writeFile(path, content)
        let queue = IOQueue(label: "length")
        for (kind, length) in [(IOChannel.Kind.stream, 600), (.random, 600), (.random, 1000), (.stream, 1000)] {
            let channel = try IOChannel(kind: kind, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine)
            let r = Recorder(queue: queue)
            channel.read(offset: 0, length: length, queue: queue, handler: r.handler)
            #expect(r.wait())
            #expect(r.settledShapes() == [Shape(true, length, nil)], "\(kind), length \(length)")
            #expect(r.bytes == Array(content[0..<length]))
            channel.close()
        }
    }

    @Test("a read of length 0 gets one (true, empty, nil) at once, even on a silent pipe", arguments: allBackends)
    func lengthZero(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("zero")
        try writeFile(path, randomBytes(100, seed: 43))
        let pipe = try TestPipe()
        defer { pipe.closeAll() }
        let queue = IOQueue(label: "zero")
        let file = try IOChannel(kind: .random, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine)
        let onPipe = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: queue, engine: engine)
        let a = Recorder(queue: queue), b = Recorder(queue: queue)
        file.read(offset: 10, length: 0, queue: queue, handler: a.handler)
        onPipe.read(length: 0, queue: queue, handler: b.handler)
        #expect(a.wait(timeout: .seconds(2)))
        #expect(b.wait(timeout: .seconds(2)))
        #expect(a.settledShapes() == [Shape(true, 0, nil)])
        #expect(b.settledShapes() == [Shape(true, 0, nil)])
        file.close()
        onPipe.close()
    }

    @Test("short pipe reads are continued until the length is reached", arguments: allBackends)
    func shortReadsContinued(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        defer { pipe.closeAll() }
        let queue = IOQueue(label: "short")
        let channel = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: queue, engine: engine)
        let r = Recorder(queue: queue)
        channel.read(length: 1000, queue: queue, handler: r.handler)
        let bytes = randomBytes(1100, seed: 44)
        for i in 0..<10 {
            _ = try pipe.writer.writeAll(bytes[(i * 100)..<((i + 1) * 100)])
            milliseconds(5)
        }
        // More than the length: the read must stop at 1000.
        _ = try pipe.writer.writeAll(bytes[1000...])
        #expect(r.wait(timeout: .seconds(5)))
        #expect(r.bytes == Array(bytes[0..<1000]))
        #expect(r.calls.last?.done == true && r.calls.last?.error == nil && (r.calls.last?.data?.count ?? 0) > 0)
        #expect(r.calls.dropLast().allSatisfy { !$0.done && $0.error == nil })
        // The 100 bytes past the length are still in the pipe.
        let next = Recorder(queue: queue)
        channel.read(length: 100, queue: queue, handler: next.handler)
        #expect(next.wait(timeout: .seconds(5)))
        #expect(next.bytes == Array(bytes[1000...]))
        channel.close()
    }

    @Test("EOF on a pipe: the remaining bytes as (false, data, nil), then (true, empty, nil)", arguments: allBackends)
    func eofOnPipe(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        defer { try? pipe.reader.close() }
        let queue = IOQueue(label: "pipe-eof")
        let channel = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: queue, engine: engine)
        // Low water above what arrives: the bytes are held until EOF.
        channel.setLowWater(500)
        let r = Recorder(queue: queue)
        channel.read(length: 1000, queue: queue, handler: r.handler)
        let bytes = randomBytes(300, seed: 45)
        _ = try pipe.writer.writeAll(bytes)
        try pipe.writer.close()
        #expect(r.wait(timeout: .seconds(5)))
        #expect(r.settledShapes() == [Shape(false, 300, nil), Shape(true, 0, nil)])
        #expect(r.bytes == bytes)
        channel.close()
    }

    @Test("an error after some bytes: (false, data, nil), then (true, nil, error)", arguments: allBackends)
    func errorAfterSomeBytes(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let sockets = try TestSockets(.tcpLoopback)
        defer { try? sockets.local.close() }
        let queue = IOQueue(label: "reset")
        let channel = IOChannel(kind: .stream, fileDescriptor: sockets.local, queue: queue, engine: engine)
        let r = Recorder(queue: queue)
        channel.read(length: 1000, queue: queue, handler: r.handler)
        let bytes = randomBytes(10, seed: 46)
        _ = try sockets.peer.writeAll(bytes)
        #expect(r.waitForCalls(1, timeout: .seconds(5)))
        // The peer resets the connection: the pending read fails with ECONNRESET.
        resetAndClose(sockets.peer)
        #expect(r.wait(timeout: .seconds(5)))
        #expect(r.settledShapes() == [Shape(false, 10, nil), Shape(true, nil, .connectionReset)])
        #expect(r.bytes == bytes)
        channel.close()
    }

    @Test("a successful write: intermediate (false, remaining, nil) are suffixes of the data, then (true, nil, nil)",
          arguments: allBackends)
    func writeProgress(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("progress")
        let queue = IOQueue(label: "progress")
        let channel = try IOChannel(kind: .stream, path: FilePath(path), mode: .writeOnly,
                                    options: [.create, .truncate], permissions: [.ownerReadWrite],
                                    queue: queue, engine: engine)
        channel.setHighWater(64 * KiB)
        let bytes = randomBytes(256 * KiB + 7, seed: 47)
        let data = DataChunk(bytes)
        let r = Recorder(queue: queue)
        channel.write(data: data, queue: queue, handler: r.handler)
        #expect(r.wait())
        let calls = r.settledShapes()
        #expect(calls.last == Shape(true, nil, nil))
        let intermediate = r.calls.dropLast()
        // 256 KiB are written (in 64 KiB requests) before the last 7 bytes:
        // at least one progress report; requests completing together may share one.
        #expect(intermediate.count >= 1, "no progress report before the end: \(calls)")
        var previous = bytes.count
        for call in intermediate {
            #expect(!call.done && call.error == nil)
            guard let remaining = call.data else {
                Issue.record("an intermediate write call without its remaining data")
                continue
            }
            #expect(remaining.count < previous, "the remaining data did not shrink")
            #expect(remaining == data.subrange((bytes.count - remaining.count)..<bytes.count),
                    "the remaining data is not the unwritten tail")
            previous = remaining.count
        }
        channel.close()
        #expect(try readFile(path) == bytes)
    }

    @Test("a write of empty data gets one (true, nil, nil) at once", arguments: allBackends)
    func emptyWrite(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        defer { pipe.closeAll() }
        let queue = IOQueue(label: "empty-write")
        let channel = IOChannel(kind: .stream, fileDescriptor: pipe.writer, queue: queue, engine: engine)
        let r = Recorder(queue: queue)
        channel.write(data: .empty, queue: queue, handler: r.handler)
        #expect(r.wait(timeout: .seconds(2)))
        #expect(r.settledShapes() == [Shape(true, nil, nil)])
        channel.close()
    }

    @Test("a write of a discontiguous chunk of many regions lands byte-identical", arguments: allBackends)
    func discontiguousWrite(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(3 * MiB / 2 + 77, seed: 48)
        let chunk = discontiguousChunk(bytes, regions: 1500)
        #expect(chunk.regionCount > 750)
        #expect(chunk.count == bytes.count)
        for kind in [IOChannel.Kind.stream, .random] {
            let path = dir.file("gather-\(kind)")
            let queue = IOQueue(label: "gather")
            let cleanup = CleanupRecorder()
            let channel = try IOChannel(kind: kind, path: FilePath(path), mode: .writeOnly,
                                        options: [.create, .truncate], permissions: [.ownerReadWrite],
                                        queue: queue, engine: engine, cleanup: cleanup.handler)
            let r = Recorder(queue: queue)
            channel.write(offset: 0, data: chunk, queue: queue, handler: r.handler)
            #expect(r.wait())
            #expect(r.shapes.last == Shape(true, nil, nil))
            channel.close()
            #expect(cleanup.wait())
            #expect(try readFile(path) == bytes, "\(kind)")
        }
    }

    @Test("a write to a pipe or socket whose reader is gone fails with EPIPE; the process survives", arguments: allBackends)
    func brokenPipe(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        try pipe.reader.close()
        defer { try? pipe.writer.close() }
        let sockets = try TestSockets(.socketPair)
        try sockets.peer.close()
        defer { try? sockets.local.close() }
        for fd in [pipe.writer, sockets.local] {
            let queue = IOQueue(label: "epipe")
            let channel = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
            let data = DataChunk(randomBytes(100 * KiB, seed: 49))
            let first = Recorder(queue: queue), second = Recorder(queue: queue)
            channel.write(data: data, queue: queue, handler: first.handler)
            channel.write(data: DataChunk([1, 2, 3]), queue: queue, handler: second.handler)
            #expect(first.wait())
            #expect(second.wait())
            #expect(first.settledShapes() == [Shape(true, 100 * KiB, .brokenPipe)])
            #expect(first.calls.last?.data == data)
            #expect(second.settledShapes() == [Shape(true, 3, .brokenPipe)])
            channel.close()
        }
    }
}
