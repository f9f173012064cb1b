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

/// Creation errors, open errors and per-operation errors.
@Suite("IOChannel: errors")
struct ChannelErrorTests {
    @Test("an empty path throws EINVAL from the initializer; a relative one is resolved, not refused",
          arguments: allBackends)
    func relativePath(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let queue = IOQueue(label: "relative")
        let error = #expect(throws: IOError.self) {
            _ = try IOChannel(kind: .random, path: "", mode: .writeOnly, options: [.create],
                              permissions: [.ownerReadWrite], queue: queue, engine: engine)
        }
        #expect(error?.errno == .invalidArgument && error?.operation == .openForWriting)
        // Resolved against the current directory (PathAndFileTests reads through such channels).
        let channel = try IOChannel(kind: .stream, path: "relative/file", mode: .readOnly, queue: queue, engine: engine)
        #expect(channel.path?.isAbsolute == true && channel.path?.ends(with: "relative/file") == true)
        channel.close()
    }

    @Test("a missing file: every operation and the cleanup handler get ENOENT", arguments: allBackends)
    func missingFile(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let queue = IOQueue(label: "missing")
        let cleanup = CleanupRecorder(queue: queue)
        let channel = try IOChannel(kind: .stream, path: FilePath(dir.file("missing")), mode: .readWrite,
                                    queue: queue, engine: engine, cleanup: cleanup.handler)
        let data = DataChunk(randomBytes(2000, seed: 71))
        let read1 = Recorder(queue: queue), write = Recorder(queue: queue), read2 = Recorder(queue: queue)
        channel.read(length: 100, queue: queue, handler: read1.handler)
        channel.write(data: data, queue: queue, handler: write.handler)
        #expect(read1.wait())
        #expect(write.wait())
        // A later operation gets the same sticky error.
        channel.read(length: .max, queue: queue, handler: read2.handler)
        #expect(read2.wait())
        #expect(read1.settledShapes() == [Shape(true, nil, .noSuchFileOrDirectory)])
        #expect(write.settledShapes() == [Shape(true, 2000, .noSuchFileOrDirectory)])
        #expect(write.calls.first?.data == data)
        #expect(read2.settledShapes() == [Shape(true, nil, .noSuchFileOrDirectory)])
        channel.close()
        #expect(cleanup.wait())
        #expect(cleanup.error == .noSuchFileOrDirectory)
        #expect(cleanup.calls == 1)
        #expect(access(dir.file("missing"), F_OK) != 0, "the file was created")
    }

    @Test("with .create and a missing parent directory, every operation gets ENOENT", arguments: allBackends)
    func createInMissingDirectory(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let queue = IOQueue(label: "no-parent")
        let cleanup = CleanupRecorder(queue: queue)
        let channel = try IOChannel(kind: .stream, path: FilePath(dir.file("absent/file")), mode: .writeOnly,
                                    options: [.create], permissions: [.ownerReadWrite], queue: queue, engine: engine,
                                    cleanup: cleanup.handler)
        let w = Recorder(queue: queue)
        channel.write(data: DataChunk([1, 2, 3]), queue: queue, handler: w.handler)
        #expect(w.wait())
        #expect(w.settledShapes() == [Shape(true, 3, .noSuchFileOrDirectory)])
        channel.close()
        #expect(cleanup.wait())
        #expect(cleanup.error == .noSuchFileOrDirectory)
    }

    @Test("with .noFollow, a path that is a symbolic link fails with ELOOP; without it, the link is followed",
          arguments: allBackends)
    func noFollowSymlink(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let content = randomBytes(500, seed: 76)
        try writeFile(dir.file("target"), content)
        #expect(symlink(dir.file("target"), dir.file("link")) == 0)
        let queue = IOQueue(label: "no-follow")
        let strict = try IOChannel(kind: .stream, path: FilePath(dir.file("link")), mode: .readOnly,
                                   options: [.noFollow], queue: queue, engine: engine)
        let followed = try IOChannel(kind: .stream, path: FilePath(dir.file("link")), mode: .readOnly,
                                     queue: queue, engine: engine)
        let a = Recorder(queue: queue), b = Recorder(queue: queue)
        strict.read(length: .max, queue: queue, handler: a.handler)
        followed.read(length: .max, queue: queue, handler: b.handler)
        #expect(a.wait())
        #expect(b.wait())
        #expect(a.settledShapes() == [Shape(true, nil, .tooManySymbolicLinkLevels)])
        #expect(b.bytes == content)
        #expect(b.calls.last?.shape == Shape(true, 0, nil))
        strict.close()
        followed.close()
    }

    @Test("a directory gives EISDIR, for either kind, from a path or an fd", arguments: allBackends)
    func directory(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let queue = IOQueue(label: "directory")
        for kind in [IOChannel.Kind.stream, .random] {
            let pathCleanup = CleanupRecorder(queue: queue)
            let byPath = try IOChannel(kind: kind, path: FilePath(dir.path), mode: .readOnly, queue: queue,
                                       engine: engine, cleanup: pathCleanup.handler)
            let r = Recorder(queue: queue)
            byPath.read(length: 100, queue: queue, handler: r.handler)
            #expect(r.wait())
            #expect(r.settledShapes() == [Shape(true, nil, .isDirectory)], "path, \(kind)")
            byPath.close()
            #expect(pathCleanup.wait())

            let fd = try FileDescriptor.open(FilePath(dir.path), .readOnly, options: [.directory, .closeOnExec])
            defer { try? fd.close() }
            let fdCleanup = CleanupRecorder(queue: queue)
            let byFD = IOChannel(kind: kind, fileDescriptor: fd, queue: queue, engine: engine, cleanup: fdCleanup.handler)
            let r2 = Recorder(queue: queue), w2 = Recorder(queue: queue)
            byFD.read(length: 100, queue: queue, handler: r2.handler)
            byFD.write(data: DataChunk([1, 2]), queue: queue, handler: w2.handler)
            #expect(fdCleanup.wait(timeout: .seconds(5)), "a creation error runs the cleanup handler at once")
            #expect(fdCleanup.error == .isDirectory)
            #expect(r2.wait())
            #expect(w2.wait())
            #expect(r2.settledShapes() == [Shape(true, nil, .isDirectory)], "fd, \(kind)")
            #expect(w2.settledShapes() == [Shape(true, 2, .isDirectory)], "fd, \(kind)")
            byFD.close()
        }
    }

    @Test("a bad fd gives EBADF to that channel's operations and cleanup only", arguments: allBackends)
    func badFileDescriptor(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("good")
        let content = randomBytes(200_000, seed: 72)
        try writeFile(path, content)
        let good = try openFile(path, .readOnly)
        defer { try? good.close() }
        let bad = try closedDescriptorNumber()
        let queue = IOQueue(label: "ebadf")
        let badCleanup = CleanupRecorder(queue: queue), goodCleanup = CleanupRecorder(queue: queue)
        let badChannel = IOChannel(kind: .stream, fileDescriptor: bad, queue: queue, engine: engine,
                                   cleanup: badCleanup.handler)
        let goodChannel = IOChannel(kind: .stream, fileDescriptor: good, queue: queue, engine: engine,
                                    cleanup: goodCleanup.handler)
        let badReads = (0..<3).map { _ in Recorder(queue: queue) }
        let badWrite = Recorder(queue: queue)
        let goodRead = Recorder(queue: queue)
        for r in badReads { badChannel.read(length: 100, queue: queue, handler: r.handler) }
        goodChannel.read(length: .max, queue: queue, handler: goodRead.handler)
        badChannel.write(data: DataChunk([9, 9, 9]), queue: queue, handler: badWrite.handler)
        #expect(badCleanup.wait(timeout: .seconds(5)), "a creation error runs the cleanup handler at once")
        #expect(badCleanup.error == .badFileDescriptor)
        for r in badReads {
            #expect(r.wait())
            #expect(r.settledShapes() == [Shape(true, nil, .badFileDescriptor)])
        }
        #expect(badWrite.wait())
        #expect(badWrite.settledShapes() == [Shape(true, 3, .badFileDescriptor)])
        #expect(goodRead.wait())
        #expect(goodRead.bytes == content)
        #expect(goodRead.calls.allSatisfy { $0.error == nil })
        #expect(goodRead.calls.last?.shape == Shape(true, 0, nil))
        #expect(!goodCleanup.hasRun)
        badChannel.close()
        goodChannel.close()
        #expect(goodCleanup.wait())
        #expect(goodCleanup.error == nil)
    }

    @Test("each operation ends with its own errno: a write to a read-only fd fails, reads around it succeed",
          arguments: allBackends)
    func ownErrnoPerOperation(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("read-only")
        let content = randomBytes(3000, seed: 73)
        try writeFile(path, content)
        let fd = try openFile(path, .readOnly)
        defer { try? fd.close() }
        let queue = IOQueue(label: "own-errno")
        let channel = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
        let before = Recorder(queue: queue), write = Recorder(queue: queue), after = Recorder(queue: queue)
        let data = DataChunk(randomBytes(500, seed: 74))
        channel.read(length: 1000, queue: queue, handler: before.handler)
        channel.write(data: data, queue: queue, handler: write.handler)
        channel.read(length: .max, queue: queue, handler: after.handler)
        #expect(before.wait())
        #expect(write.wait())
        #expect(after.wait())
        #expect(before.settledShapes() == [Shape(true, 1000, nil)])
        #expect(before.bytes == Array(content[0..<1000]))
        #expect(write.settledShapes() == [Shape(true, 500, .badFileDescriptor)])
        #expect(write.calls.first?.data == data)
        #expect(after.bytes == Array(content[1000...]), "the read after the failed write is not EOF or empty")
        #expect(after.calls.last?.shape == Shape(true, 0, nil))
        channel.close()
    }

    @Test("close(stop: true) cancels only the stopped channel's operations", arguments: allBackends)
    func cancelOnlyStoppedChannel(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        defer { pipe.closeAll() }
        let queue = IOQueue(label: "stop-one")
        let a = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: queue, engine: engine)
        let b = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: queue, engine: engine)
        let readA = Recorder(queue: queue), readB = Recorder(queue: queue)
        a.read(length: 10, queue: queue, handler: readA.handler)
        b.read(length: 5, queue: queue, handler: readB.handler)
        milliseconds(100)
        a.close(stop: true)
        #expect(readA.wait(timeout: .seconds(5)))
        #expect(readA.settledShapes() == [Shape(true, nil, .canceled)])
        #expect(!readB.isDone, "B's read ended with A's cancellation: \(readB.shapes)")
        let bytes = randomBytes(5, seed: 75)
        _ = try pipe.writer.writeAll(bytes)
        #expect(readB.wait(timeout: .seconds(5)))
        #expect(readB.bytes == bytes)
        #expect(readB.calls.allSatisfy { $0.error == nil })
        #expect(readB.calls.last?.done == true)
        b.close()
    }
}
