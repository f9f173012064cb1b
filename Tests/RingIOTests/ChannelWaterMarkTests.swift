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

/// High and low water marks and the interval timer.
@Suite("IOChannel: water marks and interval")
struct ChannelWaterMarkTests {
    /// Reads `content` from a fresh file with a channel of `kind` set up by
    /// `configure`, and returns the read's recorder once it is done.
    private func readThrough(_ engine: IOEngine, _ content: [UInt8], kind: IOChannel.Kind = .stream,
                          length: Int = .max, configure: (IOChannel) -> Void = { _ in }) throws -> Recorder {
        let dir = TemporaryDirectory()
        let path = dir.file("marks")
        try writeFile(path, content)
        let queue = IOQueue(label: "marks")
        let channel = try IOChannel(kind: kind, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine)
        configure(channel)
        let recorder = Recorder(queue: queue)
        channel.read(offset: 0, length: length, queue: queue, handler: recorder.handler)
        #expect(recorder.wait(timeout: .seconds(20)))
        _ = recorder.settledShapes()
        channel.close()
        return recorder
    }

    @Test("default on a regular file: deliveries of 1 MiB, the rest at EOF, then (true, empty, nil)",
          arguments: allBackends)
    func defaultRegularFile(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let content = randomBytes(2 * MiB + 300_000, seed: 21)
        for kind in [IOChannel.Kind.stream, .random] {
            let r = try readThrough(engine, content, kind: kind)
            #expect(r.shapes == [Shape(false, MiB, nil), Shape(false, MiB, nil), Shape(false, 300_000, nil),
                                 Shape(true, 0, nil)], "\(kind)")
            #expect(r.bytes == content)
        }
    }

    @Test("default on a regular file with a length: the last delivery ends the read", arguments: allBackends)
    func defaultRegularFileLength(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let content = randomBytes(2 * MiB + 300_000, seed: 22)
        let r = try readThrough(engine, content, length: MiB + 10)
        #expect(r.shapes == [Shape(false, MiB, nil), Shape(true, 10, nil)])
        #expect(r.bytes == Array(content[0..<(MiB + 10)]))
    }

    @Test("high water below 1 MiB: deliveries of exactly high bytes", arguments: allBackends)
    func highWaterBelowChunk(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let content = randomBytes(200_000, seed: 23)
        let r = try readThrough(engine, content) { $0.setHighWater(64 * KiB) }
        #expect(r.shapes == [Shape(false, 65536, nil), Shape(false, 65536, nil), Shape(false, 65536, nil),
                             Shape(false, 200_000 - 3 * 65536, nil), Shape(true, 0, nil)])
        #expect(r.bytes == content)
    }

    @Test("high water above 1 MiB: deliveries are still cut at the 1 MiB chunk size", arguments: allBackends)
    func highWaterAboveChunk(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let content = randomBytes(2 * MiB + 5, seed: 24)
        let r = try readThrough(engine, content) { $0.setHighWater(3 * MiB) }
        #expect(r.shapes == [Shape(false, MiB, nil), Shape(false, MiB, nil), Shape(false, 5, nil), Shape(true, 0, nil)])
        #expect(r.bytes == content)
    }

    @Test("low water Int.max: one delivery at EOF, or one final delivery when the length is reached",
          arguments: allBackends)
    func lowWaterMax(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let content = randomBytes(2 * MiB + 300_000, seed: 25)
        let toEOF = try readThrough(engine, content) { $0.setLowWater(.max) }
        #expect(toEOF.shapes == [Shape(false, content.count, nil), Shape(true, 0, nil)])
        #expect(toEOF.bytes == content)
        let toLength = try readThrough(engine, content, kind: .random, length: 3 * MiB / 2) { $0.setLowWater(.max) }
        #expect(toLength.shapes == [Shape(true, 3 * MiB / 2, nil)])
        #expect(toLength.bytes == Array(content[0..<(3 * MiB / 2)]))
    }

    @Test("high water 0 means 1: one byte per delivery", arguments: allBackends)
    func highWaterZero(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let content: [UInt8] = [1, 2, 3, 4, 5]
        let r = try readThrough(engine, content) { $0.setHighWater(0) }
        #expect(r.shapes == Array(repeating: Shape(false, 1, nil), count: 5) + [Shape(true, 0, nil)])
        #expect(r.bytes == content)
    }

    @Test("setLowWater raises high to at least low", arguments: allBackends)
    func lowWaterRaisesHigh(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let content = randomBytes(1000, seed: 26)
        let r = try readThrough(engine, content) { c in
            c.setHighWater(100)
            c.setLowWater(300)
        }
        #expect(r.shapes == [Shape(false, 300, nil), Shape(false, 300, nil), Shape(false, 300, nil),
                             Shape(false, 100, nil), Shape(true, 0, nil)])
        #expect(r.bytes == content)
    }

    @Test("setHighWater lowers low to at most high", arguments: allBackends)
    func highWaterLowersLow(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let content = randomBytes(1000, seed: 27)
        let r = try readThrough(engine, content) { c in
            c.setLowWater(500)
            c.setHighWater(200)
        }
        #expect(r.shapes == Array(repeating: Shape(false, 200, nil), count: 5) + [Shape(true, 0, nil)])
        #expect(r.bytes == content)
    }

    @Test("an operation keeps the settings it was created with", arguments: allBackends)
    func settingsSnapshot(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("snapshot")
        let content = randomBytes(300_000, seed: 28)
        try writeFile(path, content)
        let queue = IOQueue(label: "snapshot")
        let channel = try IOChannel(kind: .random, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine)
        let before = Recorder(queue: queue), after = Recorder(queue: queue)
        channel.read(offset: 0, length: .max, queue: queue, handler: before.handler)
        channel.setHighWater(1000)
        channel.read(offset: 0, length: .max, queue: queue, handler: after.handler)
        #expect(before.wait())
        #expect(after.wait())
        #expect(before.settledShapes() == [Shape(false, 300_000, nil), Shape(true, 0, nil)])
        let shapes = after.shapes
        #expect(shapes.count == 301)
        #expect(shapes.dropLast().allSatisfy { $0 == Shape(false, 1000, nil) })
        #expect(shapes.last == Shape(true, 0, nil))
        #expect(after.bytes == content)
        channel.close()
    }

    @Test("default on a pipe: each read's bytes are delivered at once", arguments: allBackends)
    func pipeDeliversEachRead(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        defer { pipe.closeAll() }
        let queue = IOQueue(label: "pipe-default")
        let channel = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: queue, engine: engine)
        let r = Recorder(queue: queue)
        channel.read(length: 1000, queue: queue, handler: r.handler)
        let first = pattern(stream: 29, block: 0, count: 10)
        _ = try pipe.writer.writeAll(first)
        #expect(r.waitForCalls(1, timeout: .seconds(5)), "10 bytes in a pipe were not delivered")
        #expect(r.calls.first?.shape == Shape(false, 10, nil))
        let rest = pattern(stream: 29, block: 1, count: 990)
        _ = try pipe.writer.writeAll(rest)
        #expect(r.wait(timeout: .seconds(5)))
        let calls = r.calls
        #expect(r.bytes == first + rest)
        #expect(calls.last?.done == true && calls.last?.error == nil)
        #expect((calls.last?.data?.count ?? 0) > 0, "the length was reached: no extra EOF call")
        #expect(calls.dropLast().allSatisfy { !$0.done && ($0.data?.count ?? 0) > 0 })
        channel.close()
    }

    @Test("low water on a pipe holds bytes back until low bytes arrived", arguments: allBackends)
    func pipeLowWater(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        defer { pipe.closeAll() }
        let queue = IOQueue(label: "pipe-low")
        let channel = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: queue, engine: engine)
        channel.setLowWater(100)
        let r = Recorder(queue: queue)
        channel.read(length: 1000, queue: queue, handler: r.handler)
        let bytes = randomBytes(1000, seed: 30)
        _ = try pipe.writer.writeAll(bytes[0..<10])
        milliseconds(200)
        #expect(r.calls.isEmpty, "delivered before low water was reached: \(r.shapes)")
        _ = try pipe.writer.writeAll(bytes[10..<100])
        #expect(r.waitForCalls(1, timeout: .seconds(5)))
        #expect(r.calls.first?.shape == Shape(false, 100, nil))
        _ = try pipe.writer.writeAll(bytes[100...])
        #expect(r.wait(timeout: .seconds(5)))
        #expect(r.bytes == bytes)
        #expect(r.calls.last?.done == true && r.calls.last?.error == nil)
        #expect(r.calls.dropLast().allSatisfy { ($0.data?.count ?? 0) >= 100 })
        channel.close()
    }

    @Test("a strict interval delivers empty data on a silent pipe, first one interval after the start, until completion",
          arguments: allBackends)
    func strictIntervalOnSilentPipe(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        defer { try? pipe.reader.close() }
        let queue = IOQueue(label: "strict")
        let channel = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: queue, engine: engine)
        channel.setInterval(.milliseconds(50), strict: true)
        let r = Recorder(queue: queue)
        channel.read(length: 100, queue: queue, handler: r.handler)
        #expect(r.waitForCalls(4, timeout: .seconds(5)), "fewer than 4 ticks in 5 s")
        let ticks = r.calls
        #expect(ticks.allSatisfy { $0.shape == Shape(false, 0, nil) }, "\(ticks)")
        #expect((ticks.first?.time ?? 0) >= 40_000_000, "the first tick came \((ticks.first?.time ?? 0) / 1_000_000) ms after the start")
        // The writer closes: EOF ends the read, and the timer stops with it.
        try pipe.writer.close()
        #expect(r.wait(timeout: .seconds(5)))
        #expect(r.calls.last?.shape == Shape(true, 0, nil))
        milliseconds(200)
        #expect(r.callsAfterDone == 0)
        channel.close()
    }

    @Test("a strict interval tick delivers buffered bytes below low water", arguments: allBackends)
    func strictIntervalDeliversBuffered(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        defer { pipe.closeAll() }
        let queue = IOQueue(label: "strict-buffered")
        let channel = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: queue, engine: engine)
        channel.setLowWater(.max)
        channel.setInterval(.milliseconds(100), strict: true)
        let bytes = pattern(stream: 31, block: 0, count: 10)
        _ = try pipe.writer.writeAll(bytes)
        let r = Recorder(queue: queue)
        channel.read(length: 1000, queue: queue, handler: r.handler)
        #expect(waitUntil(timeout: .seconds(5)) { r.bytes.count == 10 })
        let calls = r.calls
        let delivering = calls.first { ($0.data?.count ?? 0) > 0 }
        #expect(delivering?.shape == Shape(false, 10, nil))
        #expect((delivering?.time ?? 0) >= 80_000_000, "delivered before the first tick")
        #expect(r.bytes == bytes)
        channel.close(stop: true)
        #expect(r.wait(timeout: .seconds(5)))
    }

    @Test("a non-strict interval delivers nothing below low water, and nothing empty", arguments: allBackends)
    func nonStrictInterval(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        defer { pipe.closeAll() }
        let queue = IOQueue(label: "non-strict")
        let channel = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: queue, engine: engine)
        channel.setLowWater(100)
        channel.setInterval(.milliseconds(30))
        let r = Recorder(queue: queue)
        channel.read(length: 200, queue: queue, handler: r.handler)
        milliseconds(150)
        #expect(r.calls.isEmpty, "a silent pipe got \(r.shapes)")
        let bytes = randomBytes(200, seed: 32)
        _ = try pipe.writer.writeAll(bytes[0..<10])
        milliseconds(200)
        #expect(r.calls.isEmpty, "10 bytes below low water 100 were delivered: \(r.shapes)")
        _ = try pipe.writer.writeAll(bytes[10...])
        #expect(r.wait(timeout: .seconds(5)))
        #expect(r.bytes == bytes)
        #expect(r.calls.dropLast().allSatisfy { ($0.data?.count ?? 0) >= 100 })
        #expect(r.calls.last?.done == true && r.calls.last?.error == nil)
        channel.close()
    }
}
