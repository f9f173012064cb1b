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

/// Where and how handlers run.
@Suite("IOChannel: handlers")
struct ChannelHandlerTests {
    @Test("the calls of one operation never overlap, even on a concurrent queue, and run on that queue",
          arguments: allBackends)
    func noOverlapOnConcurrentQueue(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("overlap")
        let content = randomBytes(2 * MiB, seed: 91)
        try writeFile(path, content)
        let queue = IOQueue(label: "overlap", kind: .concurrent)
        let channel = try IOChannel(kind: .random, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine)
        channel.setHighWater(32 * KiB)
        // Each call stays a while in the handler, so that a second call of the
        // same operation, started too early, would be caught inside.
        let recorders = (0..<3).map { _ in Recorder(queue: queue, hold: .microseconds(300)) }
        for r in recorders {
            channel.read(offset: 0, length: .max, queue: queue, handler: r.handler)
        }
        for r in recorders {
            #expect(r.wait(timeout: .seconds(20)))
            #expect(r.calls.count == 65)
            #expect(r.overlaps == 0, "calls of one read overlapped")
            #expect(r.callsOffQueue == 0, "a call ran off its queue")
            #expect(r.bytes == content)
        }
        channel.close()
    }

    @Test("write calls of one operation never overlap on a concurrent queue", arguments: allBackends)
    func writeCallsDoNotOverlap(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("write-overlap")
        let queue = IOQueue(label: "write-overlap", kind: .concurrent)
        let channel = try IOChannel(kind: .random, path: FilePath(path), mode: .writeOnly, options: [.create],
                                    permissions: [.ownerReadWrite], queue: queue, engine: engine)
        channel.setHighWater(16 * KiB)
        let blocks = (0..<2).map { randomBytes(MiB / 2, seed: 92 + UInt64($0)) }
        let recorders = (0..<2).map { _ in Recorder(queue: queue, hold: .microseconds(300)) }
        for (i, r) in recorders.enumerated() {
            channel.write(offset: Int64(i * MiB / 2), data: DataChunk(blocks[i]), queue: queue, handler: r.handler)
        }
        for r in recorders {
            #expect(r.wait(timeout: .seconds(20)))
            #expect(r.overlaps == 0)
            #expect(r.callsOffQueue == 0)
            #expect(r.shapes.last == Shape(true, nil, nil))
        }
        channel.close()
        #expect(try readFile(path) == blocks[0] + blocks[1])
    }

    @Test("a slow handler slows reading and still gets every byte in order", arguments: allBackends)
    func slowHandler(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("slow")
        let content = randomBytes(MiB, seed: 94)
        try writeFile(path, content)
        let queue = IOQueue(label: "slow")
        let channel = try IOChannel(kind: .stream, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine)
        channel.setHighWater(8 * KiB)
        let r = Recorder(queue: queue, hold: .microseconds(500))
        channel.read(length: .max, queue: queue, handler: r.handler)
        #expect(r.wait(timeout: .seconds(20)))
        #expect(r.calls.count == 129)
        #expect(r.bytes == content)
        #expect(r.overlaps == 0)
        channel.close()
    }

    @Test("read-ahead is bounded: a blocked handler stops the channel from draining a pipe", arguments: allBackends)
    func readAheadBounded(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        defer { try? pipe.reader.close() }
        let queue = IOQueue(label: "bounded")
        let channel = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: queue, engine: engine)
        let gate = Latch()
        let r = Recorder(queue: queue) { call in
            if call.data?.isEmpty == false { _ = gate.wait(timeout: .seconds(20)) }
        }
        channel.read(length: .max, queue: queue, handler: r.handler)
        // Feed the pipe without blocking until it stays full for 300 ms, or 64 MiB went in.
        let block = randomBytes(MiB, seed: 96)
        let limit = 64 * MiB
        _ = fcntl(pipe.writer.rawValue, F_SETFL, fcntl(pipe.writer.rawValue, F_GETFL) | O_NONBLOCK)
        var total = 0
        var stalledSince: UInt64?
        while total < limit {
            let at = total % MiB
            let n = block.withUnsafeBytes { Glibc.write(pipe.writer.rawValue, $0.baseAddress! + at, MiB - at) }
            if n > 0 {
                total += n
                stalledSince = nil
            } else {
                let now = monotonicNanoseconds()
                if let since = stalledSince {
                    if now - since > 300_000_000 { break }
                } else {
                    stalledSince = now
                }
                usleep(1000)
            }
        }
        #expect(total < limit, "the channel read \(total >> 20) MiB ahead of a blocked handler")
        #expect(r.calls.count == 1, "calls ran while the first was blocked")
        gate.signal()
        try pipe.writer.close()
        #expect(r.wait(timeout: .seconds(20)))
        let bytes = r.bytes
        #expect(bytes.count == total)
        #expect(Array(bytes.prefix(MiB)) == Array(block.prefix(bytes.count)))
        #expect(r.calls.last?.shape == Shape(true, 0, nil))
        channel.close()
    }

    @Test("a handler may submit the next operation on its own channel", arguments: allBackends)
    func reentrantSubmit(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("reentrant")
        let content = randomBytes(50_000, seed: 95)
        try writeFile(path, content)
        let queue = IOQueue(label: "reentrant")
        let channel = try IOChannel(kind: .stream, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine)
        let collected = Locked<[UInt8]>([])
        let finished = Latch()
        // Reads 1000 bytes at a time, each read submitted by the previous one's final call.
        @Sendable func next() {
            channel.read(length: 1000, queue: queue) { done, data, error in
                if let data { collected.withLock { $0.append(contentsOf: data) } }
                guard done else { return }
                if error != nil || data?.isEmpty != false { finished.signal() } else { next() }
            }
        }
        next()
        #expect(finished.wait())
        #expect(collected.withLock { $0 } == content)
        channel.close()
    }
}
