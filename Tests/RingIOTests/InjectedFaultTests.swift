#if DEBUG
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

/// Faults the kernel will not give on demand, injected into an engine's
/// requests (`IOEngine.faults`, debug builds only): EINTR and EAGAIN storms,
/// 1-byte reads and writes, EIO. Each test uses its own engine, so the rules
/// touch no other test.
@Suite("Injected faults")
struct InjectedFaultTests {
    /// A file of `count` random bytes and an fd open on it for reading and writing.
    static func file(_ dir: TemporaryDirectory, _ name: String, count: Int, seed: UInt64) throws -> ([UInt8], FileDescriptor) {
        let bytes = randomBytes(count, seed: seed)
        try writeFile(dir.file(name), bytes)
        return (bytes, try openFile(dir.file(name)))
    }

    /// The handler calls of one operation are well formed: exactly one
    /// `done`, the last, and no two calls overlapped.
    static func expectWellFormed(_ r: Recorder, _ what: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let calls = r.settledShapes()
        #expect(calls.filter(\.done).count == 1 && calls.last?.done == true, "\(what): \(calls)",
                sourceLocation: sourceLocation)
        #expect(r.overlaps == 0, "\(what): handler calls overlapped", sourceLocation: sourceLocation)
    }

    @Test("an EINTR storm on reads: 300 failed requests in a row are retried; every byte arrives in order",
          arguments: allBackends)
    func eintrStormOnReads(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let (content, fd) = try Self.file(dir, "f", count: 3 * MiB + 123, seed: 1)
        defer { try? fd.close() }
        engine.faults.add(.init(target: .reads, fd: fd.rawValue, fault: .fail(EINTR), times: 300))
        let queue = IOQueue(label: "eintr")
        let stream = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
        let r = Recorder(queue: queue)
        stream.read(length: .max, queue: queue, handler: r.handler)
        #expect(r.wait())
        Self.expectWellFormed(r, "stream read")
        #expect(r.bytes == content)
        #expect(r.calls.allSatisfy { $0.error == nil })
        stream.close()
        #expect(engine.faults.injected == 300)
    }

    @Test("EINTR and EAGAIN on every other read and write of a file: nothing fails, the bytes are exact",
          arguments: allBackends, [EINTR, EAGAIN])
    func alternatingInterruptions(backend: IOEngine.Backend, errno: Int32) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let (content, fd) = try Self.file(dir, "f", count: 2 * MiB + 77, seed: 2)
        defer { try? fd.close() }
        let out = try FileDescriptor.open(FilePath(dir.file("out")), .readWrite, options: [.create, .closeOnExec],
                                          permissions: [.ownerReadWrite])
        defer { try? out.close() }
        engine.faults.add(.init(target: .reads, fd: fd.rawValue, fault: .fail(errno), every: 2))
        engine.faults.add(.init(target: .writes, fd: out.rawValue, fault: .fail(errno), every: 2))
        let queue = IOQueue(label: "interrupted")
        let random = IOChannel(kind: .random, fileDescriptor: fd, queue: queue, engine: engine)
        let read = Recorder(queue: queue)
        random.setHighWater(256 * KiB)
        random.read(offset: 0, length: content.count, queue: queue, handler: read.handler)
        #expect(read.wait())
        Self.expectWellFormed(read, "random read")
        #expect(read.bytes == content)
        let writer = IOChannel(kind: .stream, fileDescriptor: out, queue: queue, engine: engine)
        let write = Recorder(queue: queue)
        writer.write(data: discontiguousChunk(content, regions: 40), queue: queue, handler: write.handler)
        #expect(write.wait())
        Self.expectWellFormed(write, "stream write")
        #expect(write.calls.last?.shape == Shape(true, nil, nil))
        random.close()
        writer.close()
        #expect(try readFile(dir.file("out")) == content)
        #expect(engine.faults.injected > 4)
    }

    @Test("1-byte reads and writes on a file: continued until every byte is moved", arguments: allBackends)
    func shortTransfersOnAFile(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let (content, fd) = try Self.file(dir, "f", count: MiB + 4099, seed: 3)
        defer { try? fd.close() }
        let out = try FileDescriptor.open(FilePath(dir.file("out")), .readWrite, options: [.create, .closeOnExec],
                                          permissions: [.ownerReadWrite])
        defer { try? out.close() }
        // Every third request moves one byte: 1-byte reads and writes in a
        // row, at every position in the requests.
        engine.faults.add(.init(target: .reads, fd: fd.rawValue, fault: .shorten, every: 3))
        engine.faults.add(.init(target: .writes, fd: out.rawValue, fault: .shorten, every: 3))
        let queue = IOQueue(label: "short")
        for kind in [IOChannel.Kind.stream, .random] {
            let channel = IOChannel(kind: kind, fileDescriptor: fd, queue: queue, engine: engine)
            channel.setHighWater(64 * KiB)
            let r = Recorder(queue: queue)
            channel.read(offset: 0, length: .max, queue: queue, handler: r.handler)
            #expect(r.wait())
            Self.expectWellFormed(r, "\(kind) read")
            #expect(r.bytes == content, "\(kind)")
            #expect(r.calls.allSatisfy { $0.error == nil })
            channel.close()
            _ = lseek(fd.rawValue, 0, SEEK_SET)
        }
        let writer = IOChannel(kind: .stream, fileDescriptor: out, queue: queue, engine: engine)
        writer.setHighWater(64 * KiB)
        let contiguous = Recorder(queue: queue), gathered = Recorder(queue: queue)
        writer.write(data: DataChunk(content), queue: queue, handler: contiguous.handler)
        writer.write(data: discontiguousChunk(content, regions: 300), queue: queue, handler: gathered.handler)
        #expect(contiguous.wait())
        #expect(gathered.wait())
        Self.expectWellFormed(contiguous, "contiguous write")
        Self.expectWellFormed(gathered, "vectored write")
        #expect(contiguous.calls.last?.shape == Shape(true, nil, nil))
        #expect(gathered.calls.last?.shape == Shape(true, nil, nil))
        writer.close()
        #expect(try readFile(dir.file("out")) == content + content)
        #expect(engine.faults.injected > 20)
    }

    @Test("1-byte writes into a pipe and 1-byte reads from it: the reader gets every byte in order",
          arguments: allBackends)
    func shortTransfersOnAPipe(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        defer { pipe.closeAll() }
        engine.faults.add(.init(target: .writes, fd: pipe.writer.rawValue, fault: .shorten, every: 2))
        engine.faults.add(.init(target: .reads, fd: pipe.reader.rawValue, fault: .shorten, every: 2))
        let queue = IOQueue(label: "short-pipe")
        let reader = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: queue, engine: engine)
        let writer = IOChannel(kind: .stream, fileDescriptor: pipe.writer, queue: queue, engine: engine)
        let bytes = randomBytes(200 * KiB + 3, seed: 4)
        let r = Recorder(queue: queue), w = Recorder(queue: queue)
        reader.read(length: bytes.count, queue: queue, handler: r.handler)
        writer.write(data: DataChunk(bytes), queue: queue, handler: w.handler)
        #expect(w.wait())
        #expect(r.wait())
        Self.expectWellFormed(w, "pipe write")
        Self.expectWellFormed(r, "pipe read")
        #expect(w.calls.last?.shape == Shape(true, nil, nil))
        #expect(r.bytes == bytes)
        #expect(r.calls.allSatisfy { $0.error == nil })
        reader.close()
        writer.close()
    }

    @Test("EIO on the third of four reads in flight: the read delivers the two chunks before it, then EIO; nothing after",
          arguments: allBackends)
    func eioOnARead(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let (content, fd) = try Self.file(dir, "f", count: 6 * MiB, seed: 5)
        defer { try? fd.close() }
        let (other, otherFD) = try Self.file(dir, "g", count: 3 * MiB, seed: 6)
        defer { try? otherFD.close() }
        engine.faults.add(.init(target: .reads, fd: fd.rawValue, fault: .fail(EIO), skip: 2, times: 1))
        let queue = IOQueue(label: "eio-read")
        let failing = IOChannel(kind: .random, fileDescriptor: fd, queue: queue, engine: engine)
        let bystander = IOChannel(kind: .random, fileDescriptor: otherFD, queue: queue, engine: engine)
        let r = Recorder(queue: queue), b = Recorder(queue: queue)
        failing.read(offset: 0, length: 4 * MiB, queue: queue, handler: r.handler)
        bystander.read(offset: 0, length: .max, queue: queue, handler: b.handler)
        #expect(r.wait())
        #expect(b.wait())
        Self.expectWellFormed(r, "failing read")
        #expect(r.settledShapes() == [Shape(false, MiB, nil), Shape(false, MiB, nil), Shape(true, nil, .ioError)])
        #expect(r.bytes == Array(content[0..<(2 * MiB)]))
        // The other channel's read, and a later read of the same file, see no error.
        #expect(b.bytes == other)
        #expect(b.calls.allSatisfy { $0.error == nil })
        let again = Recorder(queue: queue)
        failing.read(offset: Int64(2 * MiB), length: .max, queue: queue, handler: again.handler)
        #expect(again.wait())
        #expect(again.bytes == Array(content[(2 * MiB)...]))
        #expect(again.calls.last?.shape == Shape(true, 0, nil))
        failing.close()
        bystander.close()
    }

    @Test("EIO on the third request of a 4 MiB stream write: the rest is reported, what was reported written is on disk, the position follows it",
          arguments: allBackends)
    func eioOnAWrite(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("out")
        let fd = try FileDescriptor.open(FilePath(path), .readWrite, options: [.create, .closeOnExec],
                                         permissions: [.ownerReadWrite])
        defer { try? fd.close() }
        engine.faults.add(.init(target: .writes, fd: fd.rawValue, fault: .fail(EIO), skip: 2, times: 1))
        let queue = IOQueue(label: "eio-write")
        let channel = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
        let bytes = randomBytes(4 * MiB, seed: 7)
        let w = Recorder(queue: queue)
        channel.write(data: DataChunk(bytes), queue: queue, handler: w.handler)
        #expect(w.wait())
        Self.expectWellFormed(w, "write")
        let last = w.calls.last
        #expect(last?.done == true && last?.error == .ioError)
        let remaining = last?.data?.count ?? -1
        #expect(remaining == 2 * MiB, "the third 1 MiB request failed: \(w.shapes)")
        let written = bytes.count - remaining
        #expect(last?.data == DataChunk(bytes[written...]))
        #expect(positionInBarrier(of: channel, fd) == Int64(written))
        #expect(Array(try readFile(path).prefix(written)) == Array(bytes[0..<written]))
        // The channel goes on: the next write lands where the reported bytes end.
        let tail = randomBytes(1000, seed: 8)
        let next = Recorder(queue: queue)
        channel.write(data: DataChunk(tail), queue: queue, handler: next.handler)
        #expect(next.wait())
        #expect(next.settledShapes() == [Shape(true, nil, nil)])
        channel.close()
        let onDisk = try readFile(path)
        #expect(Array(onDisk.prefix(written + tail.count)) == Array(bytes[0..<written]) + tail)
    }

    @Test("EIO in queued stream writes: the failing write reports its bytes, later ones all of theirs; exactly the reported bytes are on disk",
          arguments: allBackends)
    func eioInPipelinedWrites(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("out")
        let fd = try FileDescriptor.open(FilePath(path), .readWrite, options: [.create, .closeOnExec],
                                         permissions: [.ownerReadWrite])
        defer { try? fd.close() }
        // The second request: the first write goes alone, those queued
        // behind it go out together (and end alone if the run was split).
        engine.faults.add(.init(target: .writes, fd: fd.rawValue, fault: .fail(EIO), skip: 1, times: 1))
        let queue = IOQueue(label: "eio-pipelined")
        let channel = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
        let pieces = (0..<8).map { randomBytes(200 * KiB, seed: 10 + UInt64($0)) }
        let recorders = pieces.map { _ in Recorder(queue: queue) }
        for (piece, r) in zip(pieces, recorders) {
            channel.write(data: DataChunk(piece), queue: queue, handler: r.handler)
        }
        for r in recorders { #expect(r.wait()) }
        for (i, r) in recorders.enumerated() { Self.expectWellFormed(r, "write \(i)") }
        let outcome = recorders.map { $0.calls.last! }
        guard let failed = outcome.firstIndex(where: { $0.error != nil }) else {
            Issue.record("no write failed: \(outcome)")
            return
        }
        #expect(outcome.filter { $0.error == .ioError }.count == 1)
        #expect(outcome[failed].error == .ioError)
        // A later write of the same run reports all its bytes unwritten; one
        // that started after the run ended writes where the reported bytes end.
        for later in outcome[(failed + 1)...] {
            #expect(later.shape == Shape(true, nil, nil) || later.shape == Shape(true, 200 * KiB, .canceled), "\(later)")
        }
        // The file is the reported-written prefix of each write, in order,
        // and the position stands right after them.
        let expected = zip(pieces, outcome).flatMap { piece, call in piece.prefix(piece.count - (call.data?.count ?? 0)) }
        #expect(positionInBarrier(of: channel, fd) == Int64(expected.count))
        // Nothing reported unwritten reached the file.
        #expect(try readFile(path) == expected)
        channel.close()
    }

    @Test("the async API: EIO is thrown by read, write and FileCopier (channels); IO.writeFile leaves the old file in place",
          arguments: allBackends)
    func eioThroughTheAsyncAPI(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let (content, fd) = try Self.file(dir, "f", count: 3 * MiB, seed: 20)
        defer { try? fd.close() }
        let channel = IOChannel(kind: .random, fileDescriptor: fd, queue: .global, engine: engine)
        engine.faults.add(.init(target: .reads, fault: .fail(EIO), skip: 1, times: 1))
        await #expect(throws: Errno.ioError) { _ = try await channel.read(offset: 0, length: 3 * MiB) }
        #expect(try await channel.read(offset: 0, length: .max) == DataChunk(content))
        engine.faults.add(.init(target: .writes, fault: .fail(EIO), times: 1))
        await #expect(throws: Errno.ioError) { try await channel.write(offset: 0, data: DataChunk([1, 2, 3])) }
        channel.close()

        // IO.copyFile copies a large file by copy_file_range, outside the
        // engine, and a small one by a linked chain, which faults skip: the
        // copier's channel strategy writes through the engine.
        engine.faults.add(.init(target: .writes, fault: .fail(EIO), skip: 1, times: 1))
        await expectCopyError(.ioError, side: .destination) {
            var copier = FileCopier(engine: engine)
            copier.strategy = .channels
            try await copier.copy(from: FilePath(dir.file("f")), to: FilePath(dir.file("copy")))
        }
        let old = randomBytes(500, seed: 21)
        try writeFile(dir.file("keep"), old)
        engine.faults.add(.init(target: .writes, fault: .fail(EIO), times: 1))
        let error = await #expect(throws: IOError.self) {
            try await IO.writeFile(DataChunk(content), to: FilePath(dir.file("keep")), engine: engine)
        }
        #expect(error?.errno == .ioError && error?.operation == .write)
        #expect(try readFile(dir.file("keep")) == old)
        let leftovers = try FileManagerLite.names(in: dir.path).filter { $0.contains("ringio-") }
        #expect(leftovers.isEmpty, "temporary files left: \(leftovers)")
    }
}

#endif
