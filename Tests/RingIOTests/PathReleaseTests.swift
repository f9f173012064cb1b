#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Synchronization
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOBase

/// A path channel with nothing queued may let go of its fd and open its
/// path again on its next use (PathDescriptors.swift): never truncating or
/// refusing what it wrote, at the stream position it had, never on another
/// file, never once the user saw the fd.
@Suite("Path channels that let go of their fds")
struct PathReleaseTests {
    /// Lets the channel go of its fd once its last operation has left the
    /// entry (its handler returns a moment after the awaiting task resumes).
    static func release(_ channel: IOChannel) async -> Bool {
        for _ in 0..<6000 {
            if channel.core.releaseIfIdle() { return true }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return false
    }

    @Test("a reopen never truncates (.truncate) nor refuses (.exclusive) what the channel wrote", arguments: allBackends)
    func reopenKeepsData(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let queue = IOQueue(label: "reopen-truncate")
        let first = randomBytes(1000, seed: 1), second = randomBytes(500, seed: 2)

        let random = try IOChannel(kind: .random, path: FilePath(dir.file("t")), mode: .readWrite,
                                   options: [.create, .truncate], queue: queue, engine: engine)
        try await random.write(offset: 0, data: DataChunk(first))
        #expect(await Self.release(random))
        #expect(random.core.currentEntry == nil, "the fd was let go of")
        try await random.write(offset: 1000, data: DataChunk(second))
        #expect(try readFile(dir.file("t")) == first + second, "the reopen did not truncate")
        #expect(await Self.release(random))
        #expect(try await random.read(offset: 0, length: 4096) == DataChunk(first + second))
        random.close()

        let stream = try IOChannel(kind: .stream, path: FilePath(dir.file("x")), mode: .writeOnly,
                                   options: [.create, .exclusiveCreate], queue: queue, engine: engine)
        try await stream.write(data: DataChunk(first))
        #expect(await Self.release(stream))
        try await stream.write(data: DataChunk(second))
        #expect(stream.openError == nil, "the reopen did not fail with EEXIST")
        #expect(try readFile(dir.file("x")) == first + second)
        stream.close()
    }

    @Test("a stream channel reads and writes on from where it stood across a release", arguments: allBackends)
    func positionKept(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(10_000, seed: 3)
        try writeFile(dir.file("f"), bytes)
        let queue = IOQueue(label: "reopen-position")
        let reader = try IOChannel(kind: .stream, path: FilePath(dir.file("f")), mode: .readOnly, queue: queue,
                                   engine: engine)
        var read: [UInt8] = []
        for _ in 0..<5 {
            read += Array(try await reader.read(length: 1000))
            #expect(await Self.release(reader))
        }
        // A queued handler read too, not only the awaited one.
        let r = Recorder(queue: queue)
        reader.read(length: .max, queue: queue, handler: r.handler)
        #expect(r.wait())
        #expect(read + r.bytes == bytes)
        reader.close()

        let writer = try IOChannel(kind: .stream, path: FilePath(dir.file("w")), mode: .readWrite,
                                   options: [.create, .truncate], queue: queue, engine: engine)
        for i in 0..<4 {
            try await writer.write(data: DataChunk(bytes[(i * 100)..<((i + 1) * 100)]))
            #expect(await Self.release(writer))
        }
        #expect(try readFile(dir.file("w")) == Array(bytes[0..<400]))
        writer.close()
    }

    @Test("renamed or replaced after a release: the operation fails with ESTALE naming the path; removed: ENOENT; never the other file's bytes",
          arguments: allBackends)
    func replacedDetected(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let original = randomBytes(4096, seed: 4), other = randomBytes(4096, seed: 5)
        try writeFile(dir.file("f"), original)
        try writeFile(dir.file("other"), other)
        let queue = IOQueue(label: "reopen-replaced")
        let cleanup = CleanupRecorder(queue: queue)
        let channel = try IOChannel(kind: .random, path: FilePath(dir.file("f")), mode: .readOnly, queue: queue,
                                    engine: engine, cleanup: cleanup.handler)
        #expect(try await channel.read(offset: 0, length: 100) == DataChunk(original[0..<100]))
        #expect(await Self.release(channel))
        #expect(rename(dir.file("other"), dir.file("f")) == 0)
        await #expect(throws: Errno.staleNFSFileHandle) { try await channel.read(offset: 100, length: 100) }
        let error = try #require(channel.openError)
        #expect(error.errno == .staleNFSFileHandle && error.path == FilePath(dir.file("f")))
        #expect(error.description.contains(dir.file("f")) && error.description.contains("another file"), "\(error)")
        #expect(cleanup.wait() && cleanup.error == .staleNFSFileHandle)
        await #expect(throws: Errno.staleNFSFileHandle) { try await channel.read(offset: 0, length: 100) }
        channel.close()

        // Removed: ENOENT (no `.create` on a reopen), with the same words.
        try writeFile(dir.file("g"), original)
        let writer = try IOChannel(kind: .stream, path: FilePath(dir.file("g")), mode: .writeOnly,
                                   options: [.create], queue: queue, engine: engine)
        try await writer.write(data: DataChunk(other[0..<10]))
        #expect(await Self.release(writer))
        #expect(unlink(dir.file("g")) == 0)
        await #expect(throws: Errno.noSuchFileOrDirectory) { try await writer.write(data: DataChunk(other)) }
        #expect(access(dir.file("g"), F_OK) != 0, "the reopen made no new file")
        #expect(writer.openError?.description.contains("no longer at this path") == true)
        writer.close()
    }

    @Test("once fileDescriptor has shown the fd, the channel never lets go of it", arguments: allBackends)
    func fileDescriptorPins(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        try writeFile(dir.file("f"), randomBytes(100, seed: 6))
        let queue = IOQueue(label: "reopen-pin")
        let channel = try IOChannel(kind: .stream, path: FilePath(dir.file("f")), mode: .readOnly, queue: queue,
                                    engine: engine)
        #expect(channel.fileDescriptor == nil, "not open yet")
        _ = try await channel.read(length: 10)
        #expect(await Self.release(channel), "unseen, it may let go")
        _ = try await channel.read(length: 10)
        let fd = try #require(channel.fileDescriptor)
        for _ in 0..<20 { #expect(!channel.core.releaseIfIdle()) }
        #expect(fcntl(fd.rawValue, F_GETFD) != -1, "the fd the user saw is still open")
        #expect(channel.fileDescriptor == fd)
        #expect(try await channel.read(length: 10).count == 10)
        // synchronize() uses the fd inside its barrier without pinning it.
        let other = try IOChannel(kind: .stream, path: FilePath(dir.file("f")), mode: .readOnly, queue: queue,
                                  engine: engine)
        _ = try await other.read(length: 10)
        try await other.synchronize()
        #expect(await Self.release(other))
        other.close()
        channel.close()
    }

    @Test("RLIMIT_NOFILE 1024: 10,000 path channels read at once, each closed from its handler; 2,000 kept open read twice, the second read on from the first",
          .timeLimit(.minutes(5)), arguments: allBackends)
    func tenThousandUnderLimit(backend: IOEngine.Backend) async throws {
        _ = try makeEngine(backend)  // skips where io_uring is unavailable
        let useRing = backend == .ioUring
        let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) { [useRing = useRing as Bool] in
            ChildChecks.run { checks in try tenThousandChild(useRing: useRing, checks) }
        }
        ChildChecks.report(result)
    }

    @Test("EMFILE: the limit is read once and again after EMFILE; an open waiting for a close opens once a busy holder closes, and fails with EMFILE (no hang) once the last holder is pinned",
          .timeLimit(.minutes(5)), arguments: [IOEngine.Backend.ioUring])
    // io_uring only: the thread pool opens an eventfd for each new worker,
    // which may take the very fd number a holder just gave up (seen at load:
    // c's retry failed with EMFILE), so this exact sequence cannot be held
    // there. The rules it checks are PathDescriptors', the same for both
    // backends; FaultMatrixTests' EMFILE child runs on both.
    func waitingOpenNeverHangs(backend: IOEngine.Backend) async throws {
        _ = try makeEngine(backend)
        let useRing = backend == .ioUring
        let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) { [useRing = useRing as Bool] in
            ChildChecks.run { checks in try waitingOpenChild(useRing: useRing, checks) }
        }
        ChildChecks.report(result)
    }
}

/// Sets the soft `RLIMIT_NOFILE`; false if the hard limit is lower.
private func setOpenFileLimit(_ limit: Int) -> Bool {
    var rl = rlimit()
    getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &rl)
    guard rl.rlim_max >= rlim_t(limit) else { return false }
    rl.rlim_cur = rlim_t(limit)
    return setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &rl) == 0
}

private func waitingOpenChild(useRing: Bool, _ checks: ChildChecks) throws {
    guard setOpenFileLimit(256) else { return checks.check(false, "setrlimit(256): \(errno)") }
    let engine = try childEngine(useRing: useRing)
    let dir = TemporaryDirectory()
    let content = randomBytes(100, seed: 9)
    try writeFile(dir.file("f"), content)
    let queue = IOQueue(label: "waiting-open")
    let blocked = IOQueue(label: "waiting-open.blocked")
    func channel() throws -> IOChannel {
        try IOChannel(kind: .random, path: FilePath(dir.file("f")), mode: .readOnly, queue: queue, engine: engine)
    }
    /// A read whose handler waits for `gate` (its channel is busy till then).
    func busyRead(_ channel: IOChannel, gate: Latch) {
        let entered = Latch()
        channel.read(offset: 0, length: 10, queue: blocked) { done, _, _ in
            guard done else { return }
            entered.signal()
            _ = gate.wait(timeout: .seconds(300))
        }
        checks.check(entered.wait(timeout: .seconds(60)), "the busy read did not run")
    }
    func read(_ channel: IOChannel, timeout: Duration = .seconds(60)) -> Recorder {
        let r = Recorder(queue: queue)
        channel.read(offset: 0, length: 100, queue: queue, handler: r.handler)
        _ = r.wait(timeout: timeout)
        return r
    }

    // The limit is read at the first open, not at every one: a raised limit
    // counts from the next EMFILE.
    let a = try channel()
    checks.check(read(a).bytes == content, "first read")
    checks.check(PathDescriptors.shared.currentCap == 128, "cap \(PathDescriptors.shared.currentCap) at limit 256")
    guard setOpenFileLimit(1024) else { return checks.check(false, "setrlimit(1024): \(errno)") }
    let b = try channel()
    checks.check(read(b).bytes == content, "second read")
    checks.check(PathDescriptors.shared.currentCap == 128, "the limit was read again before any EMFILE")
    // Every number taken: the next open fails with EMFILE, reads the limit
    // again, and opens once an idle holder (a or b) lets go of its fd.
    var fillers: [Int32] = []
    func takeEveryNumber() {
        while true {
            let d = dup(2)
            if d < 0 { break }
            fillers.append(d)
        }
    }
    takeEveryNumber()
    let c = try channel()
    checks.check(read(c).bytes == content, "read after EMFILE")
    checks.check(PathDescriptors.shared.currentCap == 512, "cap \(PathDescriptors.shared.currentCap) after EMFILE at limit 1024")
    for other in [a, b] where other.core.currentEntry != nil { _ = other.core.releaseIfIdle() }
    checks.check(waitUntil { PathDescriptors.shared.openCount == 1 }, "path fds open: \(PathDescriptors.shared.openCount)")
    takeEveryNumber()

    // c, the one holder, is busy; d waits for a close. c closes: once its
    // handler returns its fd closes and d opens.
    let gate1 = Latch()
    busyRead(c, gate: gate1)
    let d = try channel()
    let dRead = Recorder(queue: queue)
    d.read(offset: 0, length: 100, queue: queue, handler: dRead.handler)
    checks.check(waitUntil(timeout: .seconds(60)) { PathDescriptors.shared.waitingCount == 1 }, "d does not wait")
    c.close()
    gate1.signal()
    checks.check(dRead.wait(timeout: .seconds(60)) && dRead.bytes == content, "d after c closed: \(dRead.shapes)")

    // d, now the one holder, is busy; e waits. d is pinned (fileDescriptor):
    // no fd will close by itself, so e tries once more and fails with
    // EMFILE (before, it waited forever).
    let gate2 = Latch()
    busyRead(d, gate: gate2)
    let e = try channel()
    let eRead = Recorder(queue: queue)
    e.read(offset: 0, length: 100, queue: queue, handler: eRead.handler)
    checks.check(waitUntil(timeout: .seconds(60)) { PathDescriptors.shared.waitingCount == 1 }, "e does not wait")
    checks.check(d.fileDescriptor != nil, "d has no fd")
    checks.check(eRead.wait(timeout: .seconds(20)), "e hung after the last holder was pinned")
    checks.check(eRead.shapes == [Shape(true, nil, .tooManyOpenFiles)], "e: \(eRead.shapes)")
    gate2.signal()
    for channel in [a, b, d, e] { channel.close() }
    fillers.forEach { close($0) }
}

private func tenThousandChild(useRing: Bool, _ checks: ChildChecks) throws {
    var rl = rlimit()
    getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &rl)
    rl.rlim_cur = 1024
    checks.check(setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &rl) == 0, "setrlimit: \(errno)")
    let engine = try childEngine(useRing: useRing)
    let dir = TemporaryDirectory()
    let content = randomBytes(8192, seed: 7)
    let files = 50
    for f in 0..<files { try writeFile(dir.file("f\(f)"), content) }
    let queue = IOQueue(label: "ten-thousand")

    /// One read on each channel, all submitted at once; `close`: each
    /// channel closes from its handler. Returns the failures.
    func readAll(_ channels: [IOChannel], offset: @escaping @Sendable (Int) -> Int, close: Bool, _ what: String) -> Int {
        let left = Atomic<Int>(channels.count)
        let failures = Atomic<Int>(0)
        let done = Latch()
        for (i, channel) in channels.enumerated() {
            let start = offset(i)
            let bytes = Locked<[UInt8]>([])
            channel.read(offset: Int64(start), length: 100, queue: queue) { isDone, data, error in
                if let data { bytes.withLock { $0 += Array(data) } }
                guard isDone else { return }
                if error != nil || bytes.withLock({ $0 }) != Array(content[start..<(start + 100)]) {
                    failures.add(1, ordering: .relaxed)
                }
                if close { channel.close() }
                if left.subtract(1, ordering: .relaxed).newValue == 0 { done.signal() }
            }
        }
        checks.check(done.wait(timeout: .seconds(240)), "\(what): hung, \(left.load(ordering: .relaxed)) left")
        return failures.load(ordering: .relaxed)
    }

    // 10,000 fresh random channels, one read each submitted at once, each
    // closed from its handler: the opens past the limit wait for a close.
    let fresh = try (0..<10_000).map { i in
        try IOChannel(kind: .random, path: FilePath(dir.file("f\(i % files)")), mode: .readOnly, queue: queue,
                      engine: engine)
    }
    let freshFailures = readAll(fresh, offset: { ($0 % 2) * 4096 }, close: true, "10,000 at once")
    checks.check(freshFailures == 0, "\(freshFailures) of 10,000 reads at once failed")

    // 2,000 stream channels kept open (twice the limit): each reads once,
    // all at once, then each reads on from where it stood (most reopen).
    let kept = try (0..<2000).map { i in
        try IOChannel(kind: .stream, path: FilePath(dir.file("f\(i % files)")), mode: .readOnly, queue: queue,
                      engine: engine)
    }
    let firstFailures = readAll(kept, offset: { _ in 0 }, close: false, "kept, first reads")
    checks.check(firstFailures == 0, "\(firstFailures) first reads failed")
    let secondFailures = readAll(kept, offset: { _ in 100 }, close: false, "kept, second reads")
    checks.check(secondFailures == 0, "\(secondFailures) second reads failed")
    for channel in kept { channel.close() }
}
