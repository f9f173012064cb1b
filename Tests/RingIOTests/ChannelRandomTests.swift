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

/// Random-access channels: offsets from the position at creation, the position
/// never moved, several operations at once.
@Suite("IOChannel: random")
struct ChannelRandomTests {
    @Test("four concurrent random reads of the quarters of a file each get their quarter", arguments: allBackends)
    func fourQuarters(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("quarters")
        let quarter = 700_001
        let content = randomBytes(4 * quarter, seed: 11)
        try writeFile(path, content)
        let queue = IOQueue(label: "quarters", kind: .concurrent)
        let channel = try IOChannel(kind: .random, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine)
        let recorders = (0..<4).map { _ in Recorder(queue: queue) }
        for (i, recorder) in recorders.enumerated() {
            channel.read(offset: Int64(i * quarter), length: quarter, queue: queue, handler: recorder.handler)
        }
        for (i, recorder) in recorders.enumerated() {
            #expect(recorder.wait(), "quarter \(i) did not finish")
            #expect(recorder.bytes == Array(content[(i * quarter)..<((i + 1) * quarter)]), "quarter \(i) has the wrong bytes")
            // The length is reached: the last call carries bytes and ends the read.
            #expect(recorder.calls.last?.done == true)
            #expect(recorder.calls.last?.error == nil)
            #expect((recorder.calls.last?.data?.count ?? 0) > 0)
            #expect(recorder.calls.dropLast().allSatisfy { !$0.done && $0.error == nil })
            #expect(recorder.overlaps == 0)
        }
        channel.close()
    }

    @Test("random offsets count from the fd's position when the channel was created; the position never moves",
          arguments: allBackends)
    func offsetsFromCreationPosition(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("base")
        let content = randomBytes(10_000, seed: 12)
        try writeFile(path, content)
        let fd = try openFile(path)
        defer { try? fd.close() }
        #expect(lseek(fd.rawValue, 1000, SEEK_SET) == 1000)
        let queue = IOQueue(label: "base")
        let channel = IOChannel(kind: .random, fileDescriptor: fd, queue: queue, engine: engine)
        let read = Recorder(queue: queue)
        channel.read(offset: 500, length: 2000, queue: queue, handler: read.handler)
        #expect(read.wait())
        #expect(read.bytes == Array(content[1500..<3500]))
        #expect(read.calls.last?.done == true && read.calls.last?.error == nil)

        let patch = pattern(stream: 12, block: 1, count: 300)
        let write = Recorder(queue: queue)
        channel.write(offset: 4000, data: DataChunk(patch), queue: queue, handler: write.handler)
        #expect(write.wait())
        #expect(write.shapes.last == Shape(true, nil, nil))
        var expected = content
        expected.replaceSubrange(5000..<5300, with: patch)
        #expect(try readFile(path) == expected)
        #expect(positionInBarrier(of: channel, fd) == 1000)
        channel.close()
        #expect(position(of: fd) == 1000)
    }

    @Test("a random path channel counts offsets from the start of the file", arguments: allBackends)
    func pathChannelOffsets(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("path-random")
        let queue = IOQueue(label: "path-random")
        let channel = try IOChannel(kind: .random, path: FilePath(path), mode: .readWrite,
                                    options: [.create], permissions: [.ownerReadWrite], queue: queue, engine: engine)
        let blocks = (0..<4).map { pattern(stream: 13, block: $0, count: 50_000) }
        // Written in reverse order, each at its own offset.
        let writes = (0..<4).map { _ in Recorder(queue: queue) }
        for i in (0..<4).reversed() {
            channel.write(offset: Int64(i * 50_000), data: DataChunk(blocks[i]), queue: queue, handler: writes[i].handler)
        }
        for w in writes {
            #expect(w.wait())
            #expect(w.shapes.last == Shape(true, nil, nil))
        }
        let read = Recorder(queue: queue)
        channel.read(offset: 25_000, length: 100_000, queue: queue, handler: read.handler)
        #expect(read.wait())
        #expect(read.bytes == Array(blocks.flatMap { $0 }[25_000..<125_000]))
        channel.close()
        #expect(try readFile(path) == blocks.flatMap { $0 })
    }

    @Test("a random read at or past EOF gets one (true, empty, nil)", arguments: allBackends)
    func readAtEOF(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("eof")
        try writeFile(path, randomBytes(100, seed: 14))
        let queue = IOQueue(label: "eof")
        let channel = try IOChannel(kind: .random, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine)
        let atEOF = Recorder(queue: queue), pastEOF = Recorder(queue: queue)
        channel.read(offset: 100, length: 50, queue: queue, handler: atEOF.handler)
        channel.read(offset: 5000, length: .max, queue: queue, handler: pastEOF.handler)
        #expect(atEOF.wait())
        #expect(pastEOF.wait())
        #expect(atEOF.settledShapes() == [Shape(true, 0, nil)])
        #expect(pastEOF.settledShapes() == [Shape(true, 0, nil)])
        channel.close()
    }

    @Test("a random channel on a pipe or a socket fails with ESPIPE, and its cleanup runs at once with it",
          arguments: allBackends)
    func randomOnPipeOrSocket(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        let sockets = try TestSockets(.socketPair)
        defer { pipe.closeAll(); sockets.closeAll() }
        for fd in [pipe.reader, sockets.local] {
            let queue = IOQueue(label: "espipe")
            let cleanup = CleanupRecorder(queue: queue)
            let channel = IOChannel(kind: .random, fileDescriptor: fd, queue: queue, engine: engine,
                                    cleanup: cleanup.handler)
            let read = Recorder(queue: queue), write = Recorder(queue: queue)
            let data = DataChunk(pattern(stream: 15, block: 0, count: 1000))
            channel.read(length: 10, queue: queue, handler: read.handler)
            channel.write(data: data, queue: queue, handler: write.handler)
            // A creation error runs the cleanup handler without waiting for close.
            #expect(cleanup.wait(timeout: .seconds(5)))
            #expect(cleanup.error == .illegalSeek)
            #expect(read.wait())
            #expect(write.wait())
            #expect(read.settledShapes() == [Shape(true, nil, .illegalSeek)])
            #expect(write.settledShapes() == [Shape(true, 1000, .illegalSeek)])
            #expect(write.calls.first?.data == data)
            channel.close()
            #expect(cleanup.calls == 1)
        }
    }

    @Test("a random channel made from a stream channel counts offsets from the position at that moment",
          arguments: allBackends)
    func randomFromStreamChannel(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("derived")
        let content = randomBytes(5000, seed: 16)
        try writeFile(path, content)
        let fd = try openFile(path, .readOnly)
        defer { try? fd.close() }
        let queue = IOQueue(label: "derived")
        let stream = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
        let first = Recorder(queue: queue)
        stream.read(length: 700, queue: queue, handler: first.handler)
        #expect(first.wait())
        #expect(positionInBarrier(of: stream, fd) == 700)
        let random = IOChannel(kind: .random, channel: stream, queue: queue, engine: engine)
        let read = Recorder(queue: queue)
        random.read(offset: 100, length: 50, queue: queue, handler: read.handler)
        #expect(read.wait())
        #expect(read.bytes == Array(content[800..<850]))
        random.close()
        stream.close()
    }

    @Test("a channel made from another takes new default settings", arguments: allBackends)
    func derivedChannelDefaults(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("defaults")
        let content = randomBytes(100, seed: 17)
        try writeFile(path, content)
        let queue = IOQueue(label: "defaults")
        let source = try IOChannel(kind: .stream, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine)
        source.setHighWater(10)
        let derived = IOChannel(kind: .random, channel: source, queue: queue, engine: engine)
        let read = Recorder(queue: queue)
        derived.read(offset: 0, length: .max, queue: queue, handler: read.handler)
        #expect(read.wait())
        #expect(read.settledShapes() == [Shape(false, 100, nil), Shape(true, 0, nil)])
        #expect(read.bytes == content)
        derived.close()
        source.close()
    }

    @Test("a channel made from an fd channel shares its entry: the source's cleanup waits for it", arguments: allBackends)
    func derivedSharesCleanupGate(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("shared-entry")
        try writeFile(path, randomBytes(1000, seed: 20))
        let fd = try openFile(path, .readOnly)
        defer { try? fd.close() }
        let queue = IOQueue(label: "shared-entry")
        let sourceCleanup = CleanupRecorder(queue: queue), derivedCleanup = CleanupRecorder(queue: queue)
        let source = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine,
                               cleanup: sourceCleanup.handler)
        let derived = IOChannel(kind: .random, channel: source, queue: queue, engine: engine,
                                cleanup: derivedCleanup.handler)
        let r = Recorder(queue: queue)
        derived.read(offset: 0, length: 1000, queue: queue, handler: r.handler)
        #expect(r.wait())
        source.close()
        milliseconds(150)
        #expect(!sourceCleanup.hasRun, "the source's cleanup ran while a channel sharing its fd was open")
        derived.close()
        #expect(sourceCleanup.wait(timeout: .seconds(5)))
        #expect(derivedCleanup.wait(timeout: .seconds(5)))
        #expect(sourceCleanup.error == nil && derivedCleanup.error == nil)
    }

    @Test("a channel made from a closed channel gets ECANCELED in its cleanup and operations", arguments: allBackends)
    func derivedFromClosed(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("closed-source")
        try writeFile(path, randomBytes(100, seed: 18))
        let fd = try openFile(path, .readOnly)
        defer { try? fd.close() }
        let queue = IOQueue(label: "closed-source")
        let source = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
        source.close()
        let cleanup = CleanupRecorder(queue: queue)
        let derived = IOChannel(kind: .random, channel: source, queue: queue, engine: engine, cleanup: cleanup.handler)
        let read = Recorder(queue: queue)
        derived.read(offset: 0, length: 10, queue: queue, handler: read.handler)
        #expect(cleanup.wait(timeout: .seconds(5)))
        #expect(cleanup.error == .canceled)
        #expect(read.wait())
        #expect(read.settledShapes() == [Shape(true, nil, .canceled)])
        derived.close()
    }

    @Test("a channel made from a path channel opens the file again, independently", arguments: allBackends)
    func derivedFromPathChannel(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("reopen")
        let content = randomBytes(4000, seed: 19)
        try writeFile(path, content)
        let queue = IOQueue(label: "reopen")
        let source = try IOChannel(kind: .stream, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine)
        let derivedCleanup = CleanupRecorder(queue: queue)
        let derived = IOChannel(kind: .random, channel: source, queue: queue, engine: engine,
                                cleanup: derivedCleanup.handler)
        let a = Recorder(queue: queue)
        derived.read(offset: 1000, length: 1000, queue: queue, handler: a.handler)
        #expect(a.wait())
        #expect(a.bytes == Array(content[1000..<2000]))
        // Closing the derived channel does not wait for, or affect, the source.
        derived.close()
        #expect(derivedCleanup.wait(timeout: .seconds(5)))
        let b = Recorder(queue: queue)
        source.read(length: 500, queue: queue, handler: b.handler)
        #expect(b.wait())
        #expect(b.bytes == Array(content[0..<500]))
        #expect(b.calls.last?.error == nil)
        source.close()
    }
}
