#if canImport(Glibc)
import Glibc
#endif
import CLiburing
import Synchronization
import SystemPackage
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles
@testable import RingIOEngine
@testable import RingIOBase

@Suite("IOEngine")
struct EngineTests {
    @Test("10,000 reads and writes from 4 threads complete once, with the right bytes", arguments: allBackends)
    func concurrentReadsAndWrites(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend, ringEntries: 64)
        let dir = TemporaryDirectory()
        let threads = 4, perThread = 1250, block = 4096
        let failures = Locked<[String]>([])
        let done = Latch(count: threads)
        for t in 0..<threads {
            let path = dir.file("f\(t)")
            let fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
            #expect(fd >= 0)
            spawnThread(name: "test-producer") {
                defer { close(fd); done.signal() }
                // Half the requests write blocks, the other half read them back.
                let writes = perThread / 2, reads = perThread - writes
                let counts = Locked([Int](repeating: 0, count: perThread))
                let results = Locked([Int32](repeating: 0, count: perThread))
                let writeBuffers = (0..<writes).map { b -> TestBuffer in
                    let buf = TestBuffer(count: block)
                    buf.pointer.copyBytes(from: pattern(stream: t, block: b, count: block))
                    return buf
                }
                let wrote = Latch(count: writes)
                for b in 0..<writes {
                    let buf = writeBuffers[b]
                    engine.submit(IORequest(.write(fd: fd, buffer: UnsafeRawBufferPointer(buf.pointer), offset: Int64(b * block)), owner: buf) { res in
                        counts.withLock { $0[b] += 1 }
                        results.withLock { $0[b] = res }
                        wrote.signal()
                    })
                }
                guard wrote.wait(timeout: .seconds(60)) else {
                    failures.withLock { $0.append("thread \(t): writes did not complete") }
                    return
                }
                let readBuffers = (0..<reads).map { _ in TestBuffer(count: block) }
                let readDone = Latch(count: reads)
                for r in 0..<reads {
                    let buf = readBuffers[r]
                    let b = r % writes
                    engine.submit(IORequest(.read(fd: fd, buffer: buf.pointer, offset: Int64(b * block)), owner: buf) { res in
                        counts.withLock { $0[writes + r] += 1 }
                        results.withLock { $0[writes + r] = res }
                        readDone.signal()
                    })
                }
                guard readDone.wait(timeout: .seconds(60)) else {
                    failures.withLock { $0.append("thread \(t): reads did not complete") }
                    return
                }
                // A late second completion would show up here.
                usleep(10_000)
                let c = counts.withLock { $0 }
                let res = results.withLock { $0 }
                if c.contains(where: { $0 != 1 }) {
                    failures.withLock { $0.append("thread \(t): a request completed other than once") }
                }
                if res.contains(where: { $0 != Int32(block) }) {
                    failures.withLock { $0.append("thread \(t): a request returned \(res.first { $0 != Int32(block) }!)") }
                }
                for r in 0..<reads where readBuffers[r].bytes != pattern(stream: t, block: r % writes, count: block) {
                    failures.withLock { $0.append("thread \(t): read \(r) has the wrong bytes") }
                    break
                }
            }
        }
        #expect(done.wait(timeout: .seconds(120)))
        #expect(failures.withLock { $0 } == [])
    }

    @Test("more requests than ring entries all complete", arguments: allBackends)
    func moreThanRingEntries(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend, ringEntries: 4)
        let n = 20_000
        let completed = Atomic<Int>(0)
        let latch = Latch(count: n)
        var batch: [IORequest] = []
        for i in 0..<n {
            batch.append(IORequest(.nop) { res in
                if res == 0 { completed.add(1, ordering: .relaxed) }
                latch.signal()
            })
            if i % 1000 == 999 {
                engine.submit(contentsOf: batch)
                batch.removeAll()
            }
        }
        #expect(latch.wait(timeout: .seconds(60)))
        let completedCount = completed.load(ordering: .relaxed)
        #expect(completedCount == n)
    }

    @Test("cancel ends a read blocked on an empty pipe with ECANCELED, promptly", arguments: allBackends)
    func cancelBlockedPipeRead(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        weak var weakOwner: TestBuffer?
        let result = Locked<Int32?>(nil)
        let latch = Latch()
        let request: IORequest
        do {
            let buffer = TestBuffer(count: 4096)
            weakOwner = buffer
            request = IORequest(.read(fd: fds[0], buffer: buffer.pointer, offset: -1), owner: buffer, mayBlock: true) { res in
                result.withLock { $0 = res }
                latch.signal()
            }
        }
        engine.submit(request)
        #expect(!latch.wait(timeout: .milliseconds(100)), "the read should still be waiting for data")
        #expect(weakOwner != nil, "the owner must live while the request is in flight")
        let start = monotonicNanoseconds()
        engine.cancel(request)
        #expect(latch.wait(timeout: .seconds(5)))
        let elapsed = monotonicNanoseconds() - start
        #expect(result.withLock { $0 } == -ECANCELED)
        #expect(elapsed < 1_000_000_000, "cancel took \(elapsed / 1_000_000) ms")
    }

    @Test("the owner is released after completion", arguments: allBackends)
    func ownerReleased(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        weak var weakOwner: TestBuffer?
        do {
            let buffer = TestBuffer(count: 16)
            weakOwner = buffer
            #expect(perform(engine, .nop, owner: buffer) == 0)
        }
        // The engine drops its reference right after the completion returns.
        for _ in 0..<100 where weakOwner != nil { usleep(1000) }
        #expect(weakOwner == nil)
    }

    @Test("a write to a pipe without a reader reports EPIPE and does not raise SIGPIPE", arguments: allBackends)
    func brokenPipe(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        close(fds[0])
        defer { close(fds[1]) }
        let buffer = TestBuffer(count: 128)
        let res = perform(engine, .write(fd: fds[1], buffer: UnsafeRawBufferPointer(buffer.pointer), offset: -1), owner: buffer, mayBlock: true)
        #expect(res == -EPIPE)
    }

    @Test("openat, statx, writev, readv, fsync and close", arguments: allBackends)
    func fileLifecycle(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        final class Path: @unchecked Sendable {
            // @unchecked: immutable after init.
            let cString: [CChar]
            init(_ s: String) { cString = Array(s.utf8CString) }
        }
        let path = Path(dir.file("lifecycle"))
        let fd = path.cString.withUnsafeBufferPointer { p in
            perform(engine, .openat(directory: AT_FDCWD, path: p.baseAddress!, flags: O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, mode: 0o600), owner: path)
        }
        let openedFD = try #require(fd)
        #expect(openedFD >= 0)

        let a = TestBuffer(count: 3000), b = TestBuffer(count: 5000)
        a.pointer.copyBytes(from: pattern(stream: 1, block: 0, count: 3000))
        b.pointer.copyBytes(from: pattern(stream: 1, block: 1, count: 5000))
        final class IOVecs: @unchecked Sendable {
            // @unchecked: written before submission, read by the kernel only.
            let vecs: UnsafeMutablePointer<iovec>
            let keep: [TestBuffer]
            init(_ buffers: [TestBuffer]) {
                keep = buffers
                vecs = .allocate(capacity: buffers.count)
                for (i, buf) in buffers.enumerated() {
                    vecs[i] = iovec(iov_base: buf.pointer.baseAddress, iov_len: buf.pointer.count)
                }
            }
            deinit { vecs.deallocate() }
        }
        let out = IOVecs([a, b])
        #expect(perform(engine, .writev(fd: openedFD, iovecs: out.vecs, count: 2, offset: 100), owner: out) == 8000)
        #expect(perform(engine, .fsync(fd: openedFD, dataOnly: true)) == 0)

        final class StatBox: @unchecked Sendable {
            // @unchecked: written by the kernel before the completion, read after it.
            let stx = UnsafeMutablePointer<cliburing_statx_t>.allocate(capacity: 1)
            let path: Path
            init(_ path: Path) { self.path = path }
            deinit { stx.deallocate() }
        }
        let box = StatBox(path)
        let statResult = path.cString.withUnsafeBufferPointer { p in
            perform(engine, .statx(directory: AT_FDCWD, path: p.baseAddress!, flags: 0, mask: UInt32(STATX_SIZE), buffer: box.stx), owner: box)
        }
        #expect(statResult == 0)
        #expect(box.stx.pointee.stx_size == 8100)

        let c = TestBuffer(count: 4000), d = TestBuffer(count: 4100)
        let into = IOVecs([c, d])
        #expect(perform(engine, .readv(fd: openedFD, iovecs: into.vecs, count: 2, offset: 0), owner: into) == 8100)
        let expected = [UInt8](repeating: 0, count: 100) + pattern(stream: 1, block: 0, count: 3000) + pattern(stream: 1, block: 1, count: 5000)
        #expect(c.bytes + d.bytes == expected)

        var before = stat()
        fstat(openedFD, &before)
        #expect(perform(engine, .close(fd: openedFD)) == 0)
        // Closed: the number is free, or (tests run in parallel) already reused for another file.
        var after = stat()
        let reused = fstat(openedFD, &after) == 0
        #expect(!reused || after.st_ino != before.st_ino || after.st_dev != before.st_dev, "the fd is closed")
        let missing = Path(dir.file("missing"))
        let res = missing.cString.withUnsafeBufferPointer { p in
            perform(engine, .openat(directory: AT_FDCWD, path: p.baseAddress!, flags: O_RDONLY, mode: 0), owner: missing)
        }
        #expect(res == -ENOENT)
    }

    @Test("a bad fd gives EBADF", arguments: allBackends)
    func badFileDescriptor(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let buffer = TestBuffer(count: 16)
        #expect(perform(engine, .read(fd: 987_654, buffer: buffer.pointer, offset: 0), owner: buffer) == -EBADF)
    }

    @Test("an engine released with a request in flight completes it with ECANCELED", arguments: allBackends)
    func shutdownCancelsInFlight(backend: IOEngine.Backend) throws {
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        defer { close(fds[0]); close(fds[1]) }
        let result = Locked<Int32?>(nil)
        let latch = Latch()
        do {
            let engine = try makeEngine(backend)
            let buffer = TestBuffer(count: 64)
            engine.submit(IORequest(.read(fd: fds[0], buffer: buffer.pointer, offset: -1), owner: buffer, mayBlock: true) { res in
                result.withLock { $0 = res }
                latch.signal()
            })
            usleep(20_000)
        }
        if backend == .threadPool {
            // A pool worker blocked in poll is interrupted only by a cancel;
            // shutdown stops queued work. Unblock it with data.
            var byte: UInt8 = 7
            _ = write(fds[1], &byte, 1)
        }
        #expect(latch.wait(timeout: .seconds(5)))
        let res = result.withLock { $0 }
        #expect(res == -ECANCELED || res == 1)
    }

    @Test("the shared engine honours RINGIO_BACKEND and explains a fallback")
    func sharedEngine() {
        let engine = IOEngine.shared
        if let env = getenv("RINGIO_BACKEND"), String(cString: env) == "threadpool" {
            #expect(engine.backend == .threadPool)
            #expect(engine.fallbackReason == "RINGIO_BACKEND=threadpool")
        } else if engine.backend == .ioUring {
            #expect(engine.fallbackReason == nil)
        } else {
            #expect(engine.fallbackReason?.contains("io_uring") == true)
        }
        #expect(IOEngine.explainSetupFailure(.noFunction).contains("ENOSYS"))
        #expect(IOEngine.explainSetupFailure(.notPermitted).contains("EPERM"))
    }

    @Test("many requests are submitted with few io_uring_enter calls")
    func batching() throws {
        let engine = try makeEngine(.ioUring, ringEntries: 256)
        let before = engine.enterCalls
        let n = 10_000
        let latch = Latch(count: n)
        var batch: [IORequest] = []
        for _ in 0..<n { batch.append(IORequest(.nop) { _ in latch.signal() }) }
        engine.submit(contentsOf: batch)
        #expect(latch.wait(timeout: .seconds(30)))
        let calls = engine.enterCalls - before
        #expect(calls < UInt64(n / 10), "\(calls) io_uring_enter calls for \(n) requests")
    }
}

/// Records what its requests reported (`IORequestTarget`).
private final class RecordingTarget: IORequestTarget {
    let seen = Locked<[(tag: Int, result: Int32)]>([])
    let latch = Latch()
    func requestCompleted(_ request: IORequest, tag: Int, result: Int32) {
        seen.withLock { $0.append((tag, result)) }
        latch.signal()
    }
}

@Suite("IORequest: completion to a target, with a tag")
struct IORequestTargetTests {
    @Test("an engine tells the target once, with the request's tag and result", arguments: allBackends)
    func engineTellsTarget(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let target = RecordingTarget()
        let request = IORequest(.nop, target: target, tag: 7, owner: nil, mayBlock: false)
        engine.submit(request)
        #expect(target.latch.wait())
        #expect(target.seen.withLock { $0.map(\.tag) } == [7])
        #expect(target.seen.withLock { $0.map(\.result) } == [0])
    }

    @Test("`completion` of a target's request tells the target (code that calls the closure still works)")
    func completionClosureTellsTarget() {
        let target = RecordingTarget()
        let request = IORequest(.nop, target: target, tag: 3, owner: nil, mayBlock: false)
        request.completion(-5)
        #expect(target.seen.withLock { $0.map(\.tag) } == [3])
        #expect(target.seen.withLock { $0.map(\.result) } == [-5])
    }
}
