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

/// Stream channels on pipes and sockets: the two directions are independent.
@Suite("IOChannel: pipes and sockets")
struct ChannelPipeSocketTests {
    @Test("a pending read on a socket does not block a write on the same channel",
          arguments: allBackends, TestSockets.Kind.allCases)
    func readDoesNotBlockWrite(backend: IOEngine.Backend, kind: TestSockets.Kind) throws {
        let engine = try makeEngine(backend)
        let sockets = try TestSockets(kind)
        defer { sockets.closeAll() }
        let queue = IOQueue(label: "both-ways")
        let channel = IOChannel(kind: .stream, fileDescriptor: sockets.local, queue: queue, engine: engine)
        let read = Recorder(queue: queue), write = Recorder(queue: queue)
        channel.read(length: 5, queue: queue, handler: read.handler)
        milliseconds(50)
        let outgoing = randomBytes(100, seed: 81)
        channel.write(data: DataChunk(outgoing), queue: queue, handler: write.handler)
        #expect(write.wait(timeout: .seconds(5)), "the write waited for the pending read")
        #expect(write.shapes.last == Shape(true, nil, nil))
        #expect(!read.isDone)
        var received: [UInt8] = []
        #expect(waitUntil(timeout: .seconds(5)) {
            received += drainNonBlocking(sockets.peer)
            return received.count >= outgoing.count
        })
        #expect(received == outgoing)
        let incoming = randomBytes(5, seed: 82)
        _ = try sockets.peer.writeAll(incoming)
        #expect(read.wait(timeout: .seconds(5)))
        #expect(read.bytes == incoming)
        #expect(read.calls.last?.done == true && read.calls.last?.error == nil)
        channel.close()
    }

    @Test("reading and writing 1 MiB through one socket channel at once, against an echoing peer, does not hang",
          arguments: allBackends, TestSockets.Kind.allCases)
    func echoBothWays(backend: IOEngine.Backend, kind: TestSockets.Kind) throws {
        let engine = try makeEngine(backend)
        let sockets = try TestSockets(kind)
        let total = MiB
        let peer = sockets.peer
        let echoed = Latch()
        // The peer sends back everything it receives. It cannot finish unless
        // the channel reads while its write is still in progress.
        spawnThread(name: "echo-peer") {
            defer { echoed.signal() }
            var buffer = [UInt8](repeating: 0, count: 64 * KiB)
            var done = 0
            while done < total {
                guard let n = try? buffer.withUnsafeMutableBytes({ try peer.read(into: $0) }), n > 0 else { return }
                guard (try? peer.writeAll(buffer[0..<n])) != nil else { return }
                done += n
            }
        }
        let queue = IOQueue(label: "echo")
        let channel = IOChannel(kind: .stream, fileDescriptor: sockets.local, queue: queue, engine: engine)
        let bytes = randomBytes(total, seed: 83)
        let read = Recorder(queue: queue), write = Recorder(queue: queue)
        channel.read(length: total, queue: queue, handler: read.handler)
        channel.write(data: DataChunk(bytes), queue: queue, handler: write.handler)
        let wrote = write.wait(timeout: .seconds(15))
        let readAll = read.wait(timeout: .seconds(15))
        #expect(wrote, "the write hung")
        #expect(readAll, "the read hung")
        channel.close(stop: true)
        // Unblock the peer if the channel hung: a shutdown ends its read and write.
        _ = shutdown(sockets.local.rawValue, Int32(SHUT_RDWR))
        #expect(echoed.wait(timeout: .seconds(5)))
        sockets.closeAll()
        #expect(write.shapes.last == Shape(true, nil, nil))
        #expect(read.calls.last?.done == true && read.calls.last?.error == nil)
        #expect(read.bytes == bytes)
    }

    @Test("a stream read on a pipe delivers data as it arrives and ends with EOF when the writer closes",
          arguments: allBackends)
    func pipeStreamToEOF(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        defer { try? pipe.reader.close() }
        let queue = IOQueue(label: "pipe-stream")
        let cleanup = CleanupRecorder(queue: queue)
        let channel = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: queue, engine: engine,
                                cleanup: cleanup.handler)
        let r = Recorder(queue: queue)
        channel.read(length: .max, queue: queue, handler: r.handler)
        let bytes = randomBytes(300 * KiB, seed: 84)
        let writer = pipe.writer
        let fed = Latch()
        spawnThread(name: "pipe-feeder") {
            for start in stride(from: 0, to: bytes.count, by: 10_000) {
                _ = try? writer.writeAll(bytes[start..<min(bytes.count, start + 10_000)])
            }
            try? writer.close()
            fed.signal()
        }
        #expect(fed.wait())
        #expect(r.wait(timeout: .seconds(10)))
        #expect(r.bytes == bytes)
        #expect(r.calls.last?.shape == Shape(true, 0, nil))
        #expect(r.calls.dropLast().allSatisfy { !$0.done && $0.error == nil && ($0.data?.count ?? 0) > 0 })
        channel.close()
        #expect(cleanup.wait(timeout: .seconds(5)))
    }

    @Test("a stream write channel feeds a pipe that a stream read channel drains", arguments: allBackends)
    func pipeBetweenChannels(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        let queue = IOQueue(label: "pipe-pair")
        let writerCleanup = CleanupRecorder()
        let reader = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: queue, engine: engine)
        let writer = IOChannel(kind: .stream, fileDescriptor: pipe.writer, queue: queue, engine: engine,
                               cleanup: writerCleanup.handler)
        let bytes = randomBytes(MiB + 11, seed: 85)
        let chunk = discontiguousChunk(bytes, regions: 40)
        let r = Recorder(queue: queue)
        let writes = (0..<4).map { _ in Recorder(queue: queue) }
        reader.read(length: .max, queue: queue, handler: r.handler)
        let quarter = chunk.count / 4
        for (i, w) in writes.enumerated() {
            let end = i == 3 ? chunk.count : (i + 1) * quarter
            writer.write(data: chunk.subrange((i * quarter)..<end), queue: queue, handler: w.handler)
        }
        for w in writes {
            #expect(w.wait())
            #expect(w.shapes.last == Shape(true, nil, nil))
        }
        writer.close()
        #expect(writerCleanup.wait())
        // The writer channel does not close the fd it was given: close it to end the read.
        try pipe.writer.close()
        #expect(r.wait())
        #expect(r.bytes == bytes)
        #expect(r.calls.last?.shape == Shape(true, 0, nil))
        reader.close()
        try pipe.reader.close()
    }
}
