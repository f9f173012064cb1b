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

/// close, close(stop:), cleanup and barriers.
@Suite("IOChannel: close and barrier")
struct ChannelCloseBarrierTests {
    @Test("close: submitted operations finish normally; later reads get (true, nil, ECANCELED), writes (true, all data, ECANCELED)",
          arguments: allBackends)
    func closeThenOperate(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("close")
        let content = randomBytes(MiB + 999, seed: 51)
        try writeFile(path, content)
        let queue = IOQueue(label: "close")
        let cleanup = CleanupRecorder(queue: queue)
        let channel = try IOChannel(kind: .stream, path: FilePath(path), mode: .readWrite, queue: queue, engine: engine,
                                    cleanup: cleanup.handler)
        let before = Recorder(queue: queue)
        channel.read(length: .max, queue: queue, handler: before.handler)
        channel.close()
        let after = Recorder(queue: queue), write = Recorder(queue: queue)
        let data = DataChunk(randomBytes(5000, seed: 52))
        channel.read(length: 100, queue: queue, handler: after.handler)
        channel.write(data: data, queue: queue, handler: write.handler)
        #expect(before.wait())
        #expect(before.bytes == content)
        #expect(before.calls.last?.shape == Shape(true, 0, nil))
        #expect(after.wait())
        #expect(write.wait())
        #expect(after.settledShapes() == [Shape(true, nil, .canceled)])
        #expect(write.settledShapes() == [Shape(true, 5000, .canceled)])
        #expect(write.calls.first?.data == data)
        #expect(cleanup.wait())
        #expect(cleanup.error == nil)
        #expect(try readFile(path) == content, "the cancelled write wrote")
    }

    @Test("closing twice is harmless: one cleanup call, later operations cancelled", arguments: allBackends)
    func closeTwice(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        defer { pipe.closeAll() }
        let queue = IOQueue(label: "twice")
        let cleanup = CleanupRecorder(queue: queue)
        let channel = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: queue, engine: engine,
                                cleanup: cleanup.handler)
        channel.close()
        channel.close()
        channel.close(stop: true)
        #expect(cleanup.wait())
        let r = Recorder(queue: queue)
        channel.read(length: 10, queue: queue, handler: r.handler)
        #expect(r.wait())
        #expect(r.settledShapes() == [Shape(true, nil, .canceled)])
        #expect(cleanup.calls == 1)
        // The channel does not close an fd it was given.
        #expect(fcntl(pipe.reader.rawValue, F_GETFD) != -1)
    }

    @Test("fileDescriptor is the fd while open and nil once closed", arguments: allBackends)
    func fileDescriptorAfterClose(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        defer { pipe.closeAll() }
        let queue = IOQueue(label: "fd")
        let channel = IOChannel(kind: .stream, fileDescriptor: pipe.writer, queue: queue, engine: engine)
        let w = Recorder(queue: queue)
        channel.write(data: DataChunk([1, 2, 3]), queue: queue, handler: w.handler)
        #expect(w.wait())
        #expect(channel.fileDescriptor == pipe.writer)
        channel.close()
        #expect(channel.fileDescriptor == nil)
    }

    @Test("close(stop: true) ends a read blocked on an empty pipe promptly with (true, nil, ECANCELED)",
          arguments: allBackends)
    func stopBlockedRead(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        defer { pipe.closeAll() }
        let queue = IOQueue(label: "stop")
        let cleanup = CleanupRecorder(queue: queue)
        let channel = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: queue, engine: engine,
                                cleanup: cleanup.handler)
        let r = Recorder(queue: queue)
        channel.read(length: .max, queue: queue, handler: r.handler)
        milliseconds(100)
        #expect(r.calls.isEmpty)
        let start = monotonicNanoseconds()
        channel.close(stop: true)
        #expect(r.wait(timeout: .seconds(5)))
        let elapsed = monotonicNanoseconds() - start
        #expect(elapsed < 1_000_000_000, "stop took \(elapsed / 1_000_000) ms")
        #expect(r.settledShapes() == [Shape(true, nil, .canceled)])
        #expect(cleanup.wait(timeout: .seconds(5)))
        // The pipe is still usable: nothing was consumed, nothing is pending.
        _ = try pipe.writer.writeAll([7, 8, 9])
        #expect(drainNonBlocking(pipe.reader) == [7, 8, 9])
    }

    @Test("close(stop: true) delivers buffered bytes as (false, partial, nil), then (true, nil, ECANCELED)",
          arguments: allBackends)
    func stopWithBufferedBytes(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        defer { pipe.closeAll() }
        let queue = IOQueue(label: "stop-partial")
        let channel = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: queue, engine: engine)
        channel.setLowWater(100)
        let r = Recorder(queue: queue)
        channel.read(length: 1000, queue: queue, handler: r.handler)
        let bytes = randomBytes(10, seed: 53)
        _ = try pipe.writer.writeAll(bytes)
        milliseconds(200)
        #expect(r.calls.isEmpty)
        channel.close(stop: true)
        #expect(r.wait(timeout: .seconds(5)))
        #expect(r.settledShapes() == [Shape(false, 10, nil), Shape(true, nil, .canceled)])
        #expect(r.bytes == bytes)
    }

    @Test("close(stop: true) ends a write blocked on a full pipe with (true, exactly the unwritten bytes, ECANCELED)",
          arguments: allBackends)
    func stopBlockedWrite(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        defer { pipe.closeAll() }
        let queue = IOQueue(label: "stop-write")
        let channel = IOChannel(kind: .stream, fileDescriptor: pipe.writer, queue: queue, engine: engine)
        let bytes = randomBytes(MiB, seed: 54)
        let data = DataChunk(bytes)
        let r = Recorder(queue: queue)
        channel.write(data: data, queue: queue, handler: r.handler)
        milliseconds(200)
        #expect(!r.isDone, "1 MiB fit in a pipe nobody reads")
        let start = monotonicNanoseconds()
        channel.close(stop: true)
        #expect(r.wait(timeout: .seconds(5)))
        let elapsed = monotonicNanoseconds() - start
        #expect(elapsed < 1_000_000_000, "stop took \(elapsed / 1_000_000) ms")
        let last = r.calls.last
        #expect(last?.done == true)
        #expect(last?.error == .canceled)
        let remaining = last?.data ?? .empty
        #expect(remaining.count > 0 && remaining.count < bytes.count)
        #expect(remaining == data.subrange((bytes.count - remaining.count)..<bytes.count))
        // What is in the pipe is exactly what the write reported as written.
        let written = drainNonBlocking(pipe.reader)
        #expect(written.count == bytes.count - remaining.count)
        #expect(written == Array(bytes[0..<written.count]))
    }

    @Test("close(stop: true) after an operation completed leaves its result alone", arguments: allBackends)
    func stopAfterCompletion(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("completed")
        try writeFile(path, randomBytes(100, seed: 55))
        let queue = IOQueue(label: "completed")
        let cleanup = CleanupRecorder(queue: queue)
        let channel = try IOChannel(kind: .stream, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine,
                                    cleanup: cleanup.handler)
        let r = Recorder(queue: queue)
        channel.read(length: .max, queue: queue, handler: r.handler)
        #expect(r.wait())
        channel.close(stop: true)
        #expect(cleanup.wait())
        #expect(r.settledShapes() == [Shape(false, 100, nil), Shape(true, 0, nil)])
        #expect(cleanup.error == nil)
    }

    @Test("releasing the last reference without closing acts as close: the cleanup handler runs", arguments: allBackends)
    func releaseActsAsClose(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("release")
        try writeFile(path, randomBytes(1000, seed: 56))
        let queue = IOQueue(label: "release")
        let cleanup = CleanupRecorder(queue: queue)
        let r = Recorder(queue: queue)
        weak var weakChannel: IOChannel?
        do {
            let channel = try IOChannel(kind: .random, path: FilePath(path), mode: .readOnly, queue: queue,
                                        engine: engine, cleanup: cleanup.handler)
            weakChannel = channel
            channel.read(offset: 0, length: 1000, queue: queue, handler: r.handler)
        }
        #expect(r.wait())
        #expect(r.bytes.count == 1000)
        #expect(cleanup.wait(timeout: .seconds(5)), "the cleanup handler did not run")
        #expect(waitUntil(timeout: .seconds(5)) { weakChannel == nil })
    }

    @Test("a path channel opens its fd lazily and closes it before its cleanup handler runs", arguments: allBackends)
    func pathChannelFileDescriptor(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("lazy")
        try writeFile(path, randomBytes(100, seed: 57))
        let queue = IOQueue(label: "lazy")
        let seenInCleanup = Locked<String?>("not run")
        let opened = Locked<FileDescriptor?>(nil)
        let cleanup = CleanupRecorder(queue: queue) { _ in
            guard let fd = opened.withLock({ $0 }) else { return }
            seenInCleanup.withLock { $0 = linkTarget(of: fd) }
        }
        let channel = try IOChannel(kind: .stream, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine,
                                    cleanup: cleanup.handler)
        #expect(channel.fileDescriptor == nil, "a path channel's fd is opened lazily")
        let barrier = Latch()
        channel.barrier {
            opened.withLock { $0 = channel.fileDescriptor }
            barrier.signal()
        }
        #expect(barrier.wait())
        let fd = try #require(opened.withLock { $0 }, "fileDescriptor inside a barrier opens a path channel")
        #expect(linkTarget(of: fd) == path)
        let r = Recorder(queue: queue)
        channel.read(length: .max, queue: queue, handler: r.handler)
        #expect(r.wait())
        #expect(r.bytes.count == 100)
        channel.close()
        #expect(channel.fileDescriptor == nil)
        #expect(cleanup.wait())
        #expect(seenInCleanup.withLock { $0 } != path, "the fd the channel opened was still open in its cleanup handler")
    }

    @Test("a barrier on one channel runs after a pending read of another channel of the fd completes",
          arguments: allBackends)
    func barrierWaitsForOtherChannel(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        defer { pipe.closeAll() }
        let queue = IOQueue(label: "barrier-pipe")
        let a = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: queue, engine: engine)
        let b = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: queue, engine: engine)
        let read = Recorder(queue: queue)
        a.read(length: 10, queue: queue, handler: read.handler)
        let barrierRan = Latch()
        let barrierSawRead = Atomic<Bool>(false)
        b.barrier {
            // The read's bytes were consumed from the pipe before the barrier.
            barrierSawRead.store(drainNonBlocking(pipe.reader).isEmpty, ordering: .relaxed)
            barrierRan.signal()
        }
        #expect(!barrierRan.wait(timeout: .milliseconds(200)), "the barrier ran while a read was pending")
        _ = try pipe.writer.writeAll(randomBytes(10, seed: 58))
        #expect(read.wait(timeout: .seconds(5)))
        #expect(barrierRan.wait(timeout: .seconds(5)))
        let pipeWasEmpty = barrierSawRead.load(ordering: .relaxed)
        #expect(pipeWasEmpty, "the barrier ran before the read consumed the pipe's bytes")
        #expect(read.bytes == randomBytes(10, seed: 58))
        a.close()
        b.close()
    }

    @Test("barrier ordering across two channels of one fd: after earlier writes, before later ones", arguments: allBackends)
    func barrierOrderingAcrossChannels(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("barrier")
        let fd = try FileDescriptor.open(FilePath(path), .readWrite, options: [.create, .truncate, .closeOnExec],
                                         permissions: [.ownerReadWrite])
        defer { try? fd.close() }
        let queue = IOQueue(label: "barrier")
        let a = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
        let b = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
        let first = randomBytes(300 * KiB, seed: 59), second = randomBytes(200 * KiB, seed: 60)
        let marker = Array("BARRIER".utf8)
        let w1 = Recorder(queue: queue), w2 = Recorder(queue: queue)
        let barrierRan = Latch()
        let seenPosition = Locked<Int64>(-1)
        let log = Locked<[String]>([])
        a.write(data: DataChunk(first), queue: queue, handler: w1.handler)
        b.barrier {
            log.withLock { $0.append("barrier start") }
            seenPosition.withLock { $0 = position(of: fd) }
            // The barrier has the fd to itself: it may write at the position.
            _ = try? fd.writeAll(marker)
            milliseconds(100)
            log.withLock { $0.append("barrier end") }
            barrierRan.signal()
        }
        let w2Started = Recorder(queue: queue) { call in
            if call.done { log.withLock { $0.append("second write done") } }
        }
        a.write(data: DataChunk(second), queue: queue, handler: w2Started.handler)
        b.write(data: DataChunk([0xFF]), queue: queue, handler: w2.handler)
        #expect(barrierRan.wait())
        #expect(w1.wait())
        #expect(w2Started.wait())
        #expect(w2.wait())
        #expect(seenPosition.withLock { $0 } == Int64(first.count), "the barrier ran before the first write finished")
        #expect(log.withLock { $0 } == ["barrier start", "barrier end", "second write done"])
        #expect(try readFile(path) == first + marker + second + [0xFF])
        a.close()
        b.close()
    }

    @Test("cleanup runs only after both channels of one fd are closed and every handler returned", arguments: allBackends)
    func cleanupWaitsForSiblingsAndHandlers(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("gate")
        try writeFile(path, randomBytes(1000, seed: 61))
        let fd = try openFile(path, .readOnly)
        defer { try? fd.close() }
        let queue = IOQueue(label: "gate", kind: .concurrent)
        // B's read's final call waits for the gate.
        let gate = Latch()
        let inHandler = Latch()
        let handlerReturned = Atomic<Bool>(false)
        let cleanupTooEarly = Atomic<Int>(0)
        let noteEarly: @Sendable (Errno?) -> Void = { _ in
            if !handlerReturned.load(ordering: .acquiring) { cleanupTooEarly.add(1, ordering: .relaxed) }
        }
        let cleanupA = CleanupRecorder(queue: queue, onCall: noteEarly)
        let cleanupB = CleanupRecorder(queue: queue, onCall: noteEarly)
        let a = IOChannel(kind: .random, fileDescriptor: fd, queue: queue, engine: engine, cleanup: cleanupA.handler)
        let b = IOChannel(kind: .random, fileDescriptor: fd, queue: queue, engine: engine, cleanup: cleanupB.handler)
        let held = Recorder(queue: queue) { call in
            if call.done {
                inHandler.signal()
                _ = gate.wait(timeout: .seconds(10))
                handlerReturned.store(true, ordering: .releasing)
            }
        }
        b.read(offset: 0, length: 1000, queue: queue, handler: held.handler)
        #expect(inHandler.wait())
        a.close()
        milliseconds(150)
        #expect(!cleanupA.hasRun, "A's cleanup ran while B was open")
        b.close()
        milliseconds(150)
        #expect(!cleanupA.hasRun, "A's cleanup ran while a handler was running")
        #expect(!cleanupB.hasRun, "B's cleanup ran while its handler was running")
        gate.signal()
        #expect(cleanupA.wait(timeout: .seconds(5)))
        #expect(cleanupB.wait(timeout: .seconds(5)))
        let early = cleanupTooEarly.load(ordering: .relaxed)
        #expect(early == 0, "a cleanup handler ran before the handler returned")
        #expect(cleanupA.error == nil && cleanupB.error == nil)
        #expect(held.bytes.count == 1000)
    }

    @Test("a reused fd number does not attach to the stale entry of a channel still open on the old file",
          arguments: allBackends)
    func reusedDescriptorNumber(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let old = randomBytes(1000, seed: 62), new = randomBytes(3000, seed: 63)
        try writeFile(dir.file("old"), old)
        try writeFile(dir.file("new"), new)
        let queue = IOQueue(label: "reuse")
        // A channel on the old file stays open while its fd number is reused.
        let reused = try openFile(dir.file("old"), .readOnly)
        defer { try? reused.close() }
        let oldChannel = IOChannel(kind: .stream, fileDescriptor: reused, queue: queue, engine: engine)
        let first = Recorder(queue: queue)
        oldChannel.read(length: 10, queue: queue, handler: first.handler)
        #expect(first.wait())
        #expect(first.bytes == Array(old[0..<10]))
        // dup2 closes the old file and puts the new one at the same number in
        // one step (closing first would let another test's fd take the number).
        let newFD = try openFile(dir.file("new"), .readOnly)
        #expect(dup2(newFD.rawValue, reused.rawValue) == reused.rawValue)
        try newFD.close()
        let cleanup = CleanupRecorder(queue: queue)
        let newChannel = IOChannel(kind: .random, fileDescriptor: reused, queue: queue, engine: engine,
                                   cleanup: cleanup.handler)
        let r = Recorder(queue: queue)
        newChannel.read(offset: 0, length: .max, queue: queue, handler: r.handler)
        #expect(r.wait())
        #expect(r.bytes == new)
        // Not gated by the old channel, which is still open.
        newChannel.close()
        #expect(cleanup.wait(timeout: .seconds(5)), "the new channel's cleanup waited for the old file's channel")
        oldChannel.close()
    }

    @Test("a pipe whose writer closes ends a read with EOF promptly, and the cleanup handler runs", arguments: allBackends)
    func writerClosesPipe(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        defer { try? pipe.reader.close() }
        let queue = IOQueue(label: "hup")
        let cleanup = CleanupRecorder(queue: queue)
        let channel = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: queue, engine: engine,
                                cleanup: cleanup.handler)
        let r = Recorder(queue: queue)
        channel.read(length: .max, queue: queue, handler: r.handler)
        _ = try pipe.writer.writeAll([1, 2, 3])
        #expect(r.waitForCalls(1, timeout: .seconds(5)))
        let start = monotonicNanoseconds()
        try pipe.writer.close()
        #expect(r.wait(timeout: .seconds(5)))
        let elapsed = monotonicNanoseconds() - start
        #expect(elapsed < 1_000_000_000, "EOF took \(elapsed / 1_000_000) ms")
        #expect(r.settledShapes() == [Shape(false, 3, nil), Shape(true, 0, nil)])
        channel.close()
        #expect(cleanup.wait(timeout: .seconds(2)))
        // A later read on a fresh channel sees EOF at once too.
        let again = IOChannel(kind: .stream, fileDescriptor: pipe.reader, queue: queue, engine: engine)
        let second = Recorder(queue: queue)
        again.read(length: 10, queue: queue, handler: second.handler)
        #expect(second.wait(timeout: .seconds(2)))
        #expect(second.settledShapes() == [Shape(true, 0, nil)])
        again.close()
    }
}

/// Where /proc/self/fd/N points (nil if the fd is closed).
func linkTarget(of fd: FileDescriptor) -> String? {
    var buffer = [CChar](repeating: 0, count: 4096)
    let n = readlink("/proc/self/fd/\(fd.rawValue)", &buffer, buffer.count - 1)
    guard n >= 0 else { return nil }
    return String(decoding: buffer[0..<n].map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
