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

/// The fault matrix on real kernels and files, each on both backends: the
/// error reaches exactly the operations it concerns, every byte reported
/// written is on disk, nothing hangs. (EISDIR, EPIPE, ECONNRESET on a read,
/// ENOSPC in pipelined writes and bad fds at creation are in
/// ChannelErrorTests, ChannelDeliveryTests and IOChannelSmokeTests.)
///
/// Faults that need process-wide state (RLIMIT_FSIZE, RLIMIT_NOFILE, another
/// user id) run in a child process (exit tests): the suite's tests run
/// concurrently in one process.
@Suite("Fault matrix")
struct FaultMatrixTests {
    // MARK: - in this process

    @Test("ENOSPC: a 3 MiB stream write and random writes into a full 1 MiB tmpfs report their unwritten bytes; reported bytes are on disk; after space is freed the channel writes again",
          arguments: allBackends)
    func noSpace(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let (dir, mountPoint) = try FullFilesystemTests.smallFilesystem()
        defer { umount2(mountPoint, Int32(MNT_DETACH)); _ = dir }
        let path = mountPoint + "/f"
        let fd = try FileDescriptor.open(FilePath(path), .readWrite, options: [.create, .closeOnExec],
                                         permissions: [.ownerReadWrite])
        defer { try? fd.close() }
        let queue = IOQueue(label: "enospc-matrix")
        let stream = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
        let bytes = randomBytes(3 * MiB, seed: 90)
        let w = Recorder(queue: queue)
        stream.write(data: DataChunk(bytes), queue: queue, handler: w.handler)
        #expect(w.wait(timeout: .seconds(20)))
        InjectedFaultTestsSupport.expectWellFormed(w, "stream write")
        let last = w.calls.last
        #expect(last?.error == .noSpace)
        let written = bytes.count - (last?.data?.count ?? bytes.count)
        // Up to four 1 MiB requests run at once: on the thread pool a later
        // one can take the space first (tmpfs files are sparse), so even
        // nothing may be reported written; what is reported must fit.
        #expect(written <= MiB, "\(written) bytes reported written into 1 MiB")
        #expect(last?.data == DataChunk(bytes[written...]))
        #expect(positionInBarrier(of: stream, fd) == Int64(written))
        #expect(Array(try readFile(path).prefix(written)) == Array(bytes[0..<written]))

        // Random writes past the end: each fails with all its bytes, none is lost silently.
        let random = IOChannel(kind: .random, fileDescriptor: FileDescriptor(rawValue: fd.rawValue), queue: queue,
                               engine: engine)
        let writes = (0..<4).map { _ in Recorder(queue: queue) }
        for (i, r) in writes.enumerated() {
            random.write(offset: Int64(2 * MiB + i * 256 * KiB), data: DataChunk(randomBytes(256 * KiB, seed: UInt64(91 + i))),
                         queue: queue, handler: r.handler)
        }
        for r in writes {
            #expect(r.wait(timeout: .seconds(20)))
            #expect(r.settledShapes() == [Shape(true, 256 * KiB, .noSpace)])
        }
        // Free the space: the same channels write again (the random
        // channel's offsets count from where the stream write left the position).
        #expect(ftruncate(fd.rawValue, 0) == 0)
        let again = Recorder(queue: queue)
        random.write(offset: 0, data: DataChunk(bytes[0..<(256 * KiB)]), queue: queue, handler: again.handler)
        #expect(again.wait())
        #expect(again.settledShapes() == [Shape(true, nil, nil)])
        #expect(try readFile(path) == [UInt8](repeating: 0, count: written) + Array(bytes[0..<(256 * KiB)]))
        stream.close()
        random.close()
    }

    @Test("ENOSPC: IO.writeFile into a full filesystem throws and leaves the old file and no temporary file",
          arguments: allBackends)
    func atomicWriteIntoFullFilesystem(backend: IOEngine.Backend) async throws {
        let engine = try makeEngine(backend)
        let (dir, mountPoint) = try FullFilesystemTests.smallFilesystem()
        defer { umount2(mountPoint, Int32(MNT_DETACH)); _ = dir }
        let path = mountPoint + "/settings"
        let old = randomBytes(300 * KiB, seed: 92)
        try writeFile(path, old)
        let error = await #expect(throws: IOError.self) {
            try await IO.writeFile(DataChunk(randomBytes(900 * KiB, seed: 93)), to: FilePath(path), engine: engine)
        }
        #expect(error?.errno == .noSpace)
        #expect(try readFile(path) == old)
        #expect(try FileManagerLite.names(in: mountPoint) == ["settings"])
    }

    @Test("EBADF: an fd closed under a channel fails the later operations of that channel only; the earlier ones and the cleanup complete",
          arguments: allBackends, [IOChannel.Kind.stream, .random])
    func fdClosedUnderChannel(backend: IOEngine.Backend, kind: IOChannel.Kind) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let content = randomBytes(300 * KiB, seed: 94)
        try writeFile(dir.file("f"), content)
        let opened = try openFile(dir.file("f"))
        // A high fd number, which no other test's open will reuse meanwhile.
        let high = fcntl(opened.rawValue, F_DUPFD_CLOEXEC, 950)
        try opened.close()
        try #require(high >= 0)
        let fd = FileDescriptor(rawValue: high)
        let queue = IOQueue(label: "closed-under")
        let cleanup = CleanupRecorder(queue: queue)
        let channel = IOChannel(kind: kind, fileDescriptor: fd, queue: queue, engine: engine, cleanup: cleanup.handler)
        let first = Recorder(queue: queue)
        channel.read(offset: 0, length: .max, queue: queue, handler: first.handler)
        #expect(first.wait())
        #expect(first.bytes == content)
        close(high)
        let read = Recorder(queue: queue), write = Recorder(queue: queue)
        channel.read(offset: 0, length: 100, queue: queue, handler: read.handler)
        channel.write(offset: 0, data: DataChunk([1, 2, 3]), queue: queue, handler: write.handler)
        #expect(read.wait())
        #expect(write.wait())
        #expect(read.settledShapes() == [Shape(true, nil, .badFileDescriptor)])
        #expect(write.settledShapes() == [Shape(true, 3, .badFileDescriptor)])
        channel.close()
        #expect(cleanup.wait())
        #expect(try readFile(dir.file("f")) == content, "the file changed")
    }

    @Test("a file truncated while a random channel reads it: the read delivers the file's new length, in order, then EOF; a read past the new end gets EOF",
          arguments: allBackends)
    func truncatedWhileReading(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let content = randomBytes(24 * MiB, seed: 95)
        try writeFile(dir.file("f"), content)
        let fd = try openFile(dir.file("f"))
        defer { try? fd.close() }
        let queue = IOQueue(label: "truncated")
        let channel = IOChannel(kind: .random, fileDescriptor: fd, queue: queue, engine: engine)
        // The first call holds the handler until the file is cut: reading
        // pauses at the 8 MiB read-ahead bound, far before the new end.
        let cut = Latch()
        let newSize = 12 * MiB + 4321
        let r = Recorder(queue: queue) { call in
            if !call.done { _ = cut.wait() }
        }
        channel.read(offset: 0, length: .max, queue: queue, handler: r.handler)
        #expect(r.waitForCalls(1))
        #expect(ftruncate(fd.rawValue, off_t(newSize)) == 0)
        cut.signal()
        #expect(r.wait(timeout: .seconds(20)))
        InjectedFaultTestsSupport.expectWellFormed(r, "read")
        #expect(r.bytes.count == newSize)
        #expect(r.bytes == Array(content[0..<newSize]))
        #expect(r.calls.last?.shape == Shape(true, 0, nil))
        let past = Recorder(queue: queue)
        channel.read(offset: Int64(16 * MiB), length: MiB, queue: queue, handler: past.handler)
        #expect(past.wait())
        #expect(past.settledShapes() == [Shape(true, 0, nil)])
        channel.close()
    }

    @Test("cancel in flight: close(stop: true) during a 16 MiB write and a 16 MiB read of files; what was reported is exact",
          arguments: allBackends)
    func cancelInFlight(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(16 * MiB, seed: 96)
        let out = try FileDescriptor.open(FilePath(dir.file("out")), .readWrite, options: [.create, .closeOnExec],
                                          permissions: [.ownerReadWrite])
        defer { try? out.close() }
        let queue = IOQueue(label: "cancel-in-flight")
        let writer = IOChannel(kind: .stream, fileDescriptor: out, queue: queue, engine: engine)
        writer.setHighWater(256 * KiB)
        let w = Recorder(queue: queue) { call in
            if !call.done { writer.close(stop: true) }
        }
        writer.write(data: DataChunk(bytes), queue: queue, handler: w.handler)
        #expect(w.wait(timeout: .seconds(20)))
        InjectedFaultTestsSupport.expectWellFormed(w, "write")
        let last = w.calls.last
        let unwritten = last?.data?.count ?? 0
        #expect(last?.error == .canceled || last?.shape == Shape(true, nil, nil), "\(w.shapes)")
        #expect(last?.error != .canceled || unwritten > 0)
        let written = bytes.count - unwritten
        #expect(last?.data.map { $0 == DataChunk(bytes[written...]) } ?? true)
        #expect(Array(try readFile(dir.file("out")).prefix(written)) == Array(bytes[0..<written]))

        try writeFile(dir.file("in"), bytes)
        let input = try openFile(dir.file("in"), .readOnly)
        defer { try? input.close() }
        let reader = IOChannel(kind: .random, fileDescriptor: input, queue: queue, engine: engine)
        let r = Recorder(queue: queue) { call in
            if !call.done { reader.close(stop: true) }
        }
        reader.read(offset: 0, length: .max, queue: queue, handler: r.handler)
        #expect(r.wait(timeout: .seconds(20)))
        InjectedFaultTestsSupport.expectWellFormed(r, "read")
        #expect(r.calls.last?.shape == Shape(true, nil, .canceled) || r.calls.last?.shape == Shape(true, 0, nil))
        #expect(r.bytes == Array(bytes.prefix(r.bytes.count)))
    }

    @Test("ECONNRESET while a write waits on a full socket: the write ends with the error and its unwritten bytes; nothing hangs",
          arguments: allBackends)
    func resetDuringWrite(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let sockets = try TestSockets(.tcpLoopback)
        defer { try? sockets.local.close() }
        let queue = IOQueue(label: "reset-write")
        let channel = IOChannel(kind: .stream, fileDescriptor: sockets.local, queue: queue, engine: engine)
        let bytes = randomBytes(16 * MiB, seed: 97)
        let w = Recorder(queue: queue), r = Recorder(queue: queue)
        channel.write(data: DataChunk(bytes), queue: queue, handler: w.handler)
        channel.read(length: 100, queue: queue, handler: r.handler)
        milliseconds(100)
        #expect(!w.isDone, "16 MiB fit in the socket buffers")
        resetAndClose(sockets.peer)
        #expect(w.wait(timeout: .seconds(5)))
        #expect(r.wait(timeout: .seconds(5)))
        InjectedFaultTestsSupport.expectWellFormed(w, "write")
        InjectedFaultTestsSupport.expectWellFormed(r, "read")
        let last = w.calls.last
        #expect(last?.error == .connectionReset || last?.error == .brokenPipe, "\(w.shapes)")
        let unwritten = last?.data?.count ?? 0
        #expect(unwritten > 0 && last?.data == DataChunk(bytes[(bytes.count - unwritten)...]))
        // The pending read sees the reset (or the end of the stream once the
        // write has taken the error).
        #expect(r.calls.last?.shape == Shape(true, nil, .connectionReset) || r.calls.last?.shape == Shape(true, 0, nil),
                "\(r.shapes)")
        channel.close()
    }

    @Test("an engine whose last reference is a request's completion is released when it completes, without a deadlock",
          arguments: allBackends)
    func engineReleasedByItsLastRequest(backend: IOEngine.Backend) throws {
        var engine: IOEngine? = try makeEngine(backend)
        weak let released = engine
        // The backend goes once its threads have stopped: a deadlocked one never does.
        weak let backend = engine!.core
        let pipe = try TestPipe()
        defer { pipe.closeAll() }
        let completed = Latch()
        // Only the request's completion holds the engine once the test lets go.
        engine!.submit(IORequest(.poll(fd: pipe.reader.rawValue, events: UInt32(POLLIN)), mayBlock: true) {
            [engine] _ in
            _ = engine
            completed.signal()
        })
        engine = nil
        milliseconds(20)
        _ = try pipe.writer.writeAll([1])
        #expect(completed.wait(timeout: .seconds(5)))
        #expect(waitUntil(timeout: .seconds(5)) { released == nil }, "the engine was not released")
        #expect(waitUntil(timeout: .seconds(5)) { backend == nil }, "the backend's threads did not stop (deadlocked in shutdown?)")
    }

    // MARK: - in a child process

    @Test("EFBIG: RLIMIT_FSIZE with SIGXFSZ ignored: a stream write stops at the limit with its unwritten bytes; a random write past it fails whole",
          arguments: allBackends)
    func fileTooLarge(backend: IOEngine.Backend) async throws {
        _ = try makeEngine(backend)  // skips where io_uring is unavailable
        let useRing = backend == .ioUring
        let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) { [useRing = useRing as Bool] in
            ChildChecks.run { checks in try fileTooLargeChild(useRing: useRing, checks) }
        }
        ChildChecks.report(result)
    }

    @Test("EMFILE: with 999 fds free, 1,000 path channels kept open all work (idle ones let go of their fds) and read on; with none free, a path channel fails cleanly with EMFILE",
          arguments: allBackends)
    func tooManyOpenFiles(backend: IOEngine.Backend) async throws {
        _ = try makeEngine(backend)
        let useRing = backend == .ioUring
        let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) { [useRing = useRing as Bool] in
            ChildChecks.run { checks in try tooManyOpenFilesChild(useRing: useRing, checks) }
        }
        ChildChecks.report(result)
    }

    @Test("EMFILE before the thread pool has a worker: requests fail with EMFILE instead of waiting forever; with fds back, it works")
    func threadPoolWithoutDescriptors() async throws {
        let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) {
            ChildChecks.run { checks in try threadPoolWithoutDescriptorsChild(checks) }
        }
        ChildChecks.report(result)
    }

    @Test("EACCES: as another user, opening an unreadable file and creating in an unwritable directory fail with EACCES",
          arguments: allBackends)
    func permissionDenied(backend: IOEngine.Backend) async throws {
        _ = try makeEngine(backend)
        guard geteuid() == 0 else {
            try Test.cancel("not root: cannot switch to another user to get EACCES, skipping")
        }
        let dir = TemporaryDirectory()
        #expect(chmod(dir.path, 0o755) == 0)
        try writeFile(dir.file("secret"), randomBytes(100, seed: 98))
        #expect(chmod(dir.file("secret"), 0o600) == 0)
        try writeFile(dir.file("public"), randomBytes(100, seed: 99))
        #expect(chmod(dir.file("public"), 0o644) == 0)
        let useRing = backend == .ioUring
        let path = dir.path
        let result = await #expect(processExitsWith: .success, observing: [\.standardErrorContent]) { [useRing = useRing as Bool, path = path as String] in
            ChildChecks.run { checks in try permissionDeniedChild(useRing: useRing, directory: path, checks) }
        }
        ChildChecks.report(result)
    }
}

/// Shared by the fault tests.
enum InjectedFaultTestsSupport {
    /// The handler calls of one operation are well formed: exactly one
    /// `done`, the last, and no two calls overlapped.
    static func expectWellFormed(_ r: Recorder, _ what: String, sourceLocation: SourceLocation = #_sourceLocation) {
        let calls = r.settledShapes()
        #expect(calls.filter(\.done).count == 1 && calls.last?.done == true, "\(what): \(calls)",
                sourceLocation: sourceLocation)
        #expect(r.overlaps == 0, "\(what): handler calls overlapped", sourceLocation: sourceLocation)
    }
}

/// Checks made in an exit test's child process: failures go to stderr with a
/// marker, and the parent records them as issues. The child exits with
/// success once its checks ran (a crash or a hang fails the exit test itself).
final class ChildChecks: @unchecked Sendable {
    // @unchecked: used by the child's test thread only.
    static let marker = "CHILD CHECK FAILED: "
    static let completed = "CHILD CHECKS COMPLETED"
    private var failures: [String] = []

    func check(_ condition: Bool, _ message: @autoclosure () -> String, line: Int = #line) {
        if !condition { failures.append("line \(line): \(message())") }
    }

    /// Runs `body`, writes the failed checks to stderr and exits the child.
    static func run(_ body: (ChildChecks) throws -> Void) -> Never {
        let checks = ChildChecks()
        do { try body(checks) } catch { checks.failures.append("threw \(error)") }
        for line in checks.failures.map({ marker + $0 }) + [completed] {
            _ = (line + "\n").withCString { Glibc.write(2, $0, strlen($0)) }
        }
        exit(0)
    }

    /// Records the child's failed checks in the parent.
    static func report(_ result: ExitTest.Result?, sourceLocation: SourceLocation = #_sourceLocation) {
        guard let result else { return }
        let text = String(decoding: result.standardErrorContent, as: UTF8.self)
        if !text.contains(completed) {
            Issue.record("the child did not complete its checks: \(text)", sourceLocation: sourceLocation)
        }
        for line in text.split(separator: "\n") where line.hasPrefix(marker) {
            Issue.record(Comment(rawValue: String(line)), sourceLocation: sourceLocation)
        }
    }
}

func childEngine(useRing: Bool) throws -> IOEngine {
    try IOEngine(configuration: .init(ringEntries: 64, backend: useRing ? .ioUring : .threadPool))
}

/// Writes `bytes` through a new recorder and waits for the final call.
private func recordedWrite(_ channel: IOChannel, offset: Int64 = 0, _ data: DataChunk, queue: IOQueue) -> Recorder {
    let r = Recorder(queue: queue)
    channel.write(offset: offset, data: data, queue: queue, handler: r.handler)
    _ = r.wait(timeout: .seconds(20))
    return r
}

private func fileTooLargeChild(useRing: Bool, _ checks: ChildChecks) throws {
    signal(SIGXFSZ, SIG_IGN)
    let limit = MiB + 512 * KiB
    var rl = rlimit(rlim_cur: rlim_t(limit), rlim_max: rlim_t(limit))
    checks.check(setrlimit(__rlimit_resource_t(RLIMIT_FSIZE.rawValue), &rl) == 0, "setrlimit: \(errno)")
    let engine = try childEngine(useRing: useRing)
    let dir = TemporaryDirectory()
    let path = dir.file("big")
    let fd = try FileDescriptor.open(FilePath(path), .readWrite, options: [.create, .closeOnExec],
                                     permissions: [.ownerReadWrite])
    defer { try? fd.close() }
    let queue = IOQueue(label: "efbig")
    let stream = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
    let bytes = randomBytes(3 * MiB, seed: 100)
    let w = recordedWrite(stream, DataChunk(bytes), queue: queue)
    let last = w.calls.last
    checks.check(w.isDone && w.calls.filter(\.done).count == 1, "the write did not end once: \(w.shapes)")
    checks.check(last?.error == .fileTooLarge, "stream write: \(w.shapes)")
    checks.check(last?.data?.count == bytes.count - limit, "unwritten: \(last?.data?.count ?? -1)")
    checks.check(last?.data == DataChunk(bytes[limit...]), "the unwritten bytes are not the tail")
    checks.check(positionInBarrier(of: stream, fd) == Int64(limit), "the position is not at the limit")
    checks.check((try readFile(path)) == Array(bytes[0..<limit]), "the file is not the reported bytes")

    // Offsets of a random channel count from the position when it is made.
    _ = lseek(fd.rawValue, 0, SEEK_SET)
    let random = IOChannel(kind: .random, fileDescriptor: FileDescriptor(rawValue: fd.rawValue), queue: queue, engine: engine)
    let past = recordedWrite(random, offset: Int64(2 * MiB), DataChunk(randomBytes(100, seed: 101)), queue: queue)
    checks.check(past.settledShapes() == [Shape(true, 100, .fileTooLarge)], "random write past the limit: \(past.shapes)")
    let below = recordedWrite(random, offset: 0, DataChunk(bytes[0..<1000]), queue: queue)
    checks.check(below.settledShapes() == [Shape(true, nil, nil)], "a write below the limit failed: \(below.shapes)")
    stream.close()
    random.close()
}

/// The open fds of this process.
func openDescriptors() -> [Int32] {
    (try? FileManagerLite.names(in: "/proc/self/fd").compactMap { Int32($0) }) ?? []
}

private func tooManyOpenFilesChild(useRing: Bool, _ checks: ChildChecks) throws {
    let engine = try childEngine(useRing: useRing)
    let dir = TemporaryDirectory()
    let path = dir.file("shared")
    let content = randomBytes(1000, seed: 102)
    try writeFile(path, content)
    let queue = IOQueue(label: "emfile")
    // Warm up: the engine's threads (and the pool's eventfds) exist before the count.
    let warm = try IOChannel(kind: .stream, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine)
    let w = Recorder(queue: queue)
    warm.read(length: .max, queue: queue, handler: w.handler)
    _ = w.wait()
    warm.close()
    milliseconds(50)
    // The lowest limit below which exactly 999 fd numbers are free.
    func isOpen(_ fd: Int32) -> Bool { fcntl(fd, F_GETFD) != -1 }
    var limit: Int32 = 999
    var used = (0..<limit).filter(isOpen).count
    while Int(limit) - used < 999 {
        if isOpen(limit) { used += 1 }
        limit += 1
    }
    var rl = rlimit()
    getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &rl)
    rl.rlim_cur = rlim_t(limit)
    checks.check(setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &rl) == 0, "setrlimit: \(errno)")

    /// A new path channel on `path` and its first read of 10 bytes, done.
    func openAndRead(_ what: String) throws -> (IOChannel, CleanupRecorder, Recorder) {
        let cleanup = CleanupRecorder(queue: queue)
        let channel = try IOChannel(kind: .stream, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine,
                                    cleanup: cleanup.handler)
        let r = Recorder(queue: queue)
        channel.read(length: 10, queue: queue, handler: r.handler)
        checks.check(r.wait(), "\(what): the read hung")
        return (channel, cleanup, r)
    }
    // 1,000 path channels kept open: the idle ones let go of their fds
    // (PathDescriptors.swift), so none fails.
    var channels: [(channel: IOChannel, cleanup: CleanupRecorder)] = []
    for i in 0..<1000 {
        let (channel, cleanup, r) = try openAndRead("channel \(i)")
        if r.bytes != Array(content[0..<10]) {
            checks.check(false, "channel \(i): \(r.shapes)")
            break
        }
        channels.append((channel, cleanup))
    }
    checks.check(channels.count == 1000, "only \(channels.count) channels opened")
    // Each reads on from where it stood (most open their path again).
    for (i, (channel, _)) in channels.enumerated() where i % 37 == 0 {
        let r = Recorder(queue: queue)
        channel.read(length: .max, queue: queue, handler: r.handler)
        checks.check(r.wait() && r.bytes == Array(content[10...]), "channel \(i) read on: \(r.shapes)")
    }
    for (channel, cleanup) in channels {
        channel.close()
        checks.check(cleanup.wait(), "a cleanup did not run")
    }
    // No path channel holds an fd, every other number is taken: a path
    // channel fails cleanly with EMFILE, its cleanup too.
    checks.check(waitUntil { PathDescriptors.shared.openCount == 0 }, "path fds still open: \(PathDescriptors.shared.openCount)")
    var fillers: [Int32] = []
    while true {
        let d = dup(2)
        if d < 0 { break }
        fillers.append(d)
    }
    let (refused, cleanup, r) = try openAndRead("with no fd free")
    checks.check(r.settledShapes() == [Shape(true, nil, .tooManyOpenFiles)], "with no fd free: \(r.shapes)")
    checks.check(cleanup.wait() && cleanup.error == .tooManyOpenFiles, "cleanup got \(cleanup.error.map { "\($0)" } ?? "nil")")
    refused.close()
    // One fd free again, taken by a path channel whose fd the user has seen
    // (`fileDescriptor` pins it: it never closes before the channel does).
    // With every other number taken, a new path channel fails with EMFILE
    // at once: it does not wait for a close that only the user can make.
    close(fillers.removeLast())
    let (pinned, _, pinnedRead) = try openAndRead("pinned")
    checks.check(pinnedRead.bytes == Array(content[0..<10]), "the pinned channel's read: \(pinnedRead.shapes)")
    checks.check(pinned.fileDescriptor != nil, "the pinned channel has no fd")
    let (second, _, secondRead) = try openAndRead("beside a pinned fd")
    checks.check(secondRead.settledShapes() == [Shape(true, nil, .tooManyOpenFiles)],
                 "beside a pinned fd, with no fd free: \(secondRead.shapes)")
    second.close()
    pinned.close()
    fillers.forEach { close($0) }
    // With fds again, a new path channel opens.
    let again = try IOChannel(kind: .stream, path: FilePath(path), mode: .readOnly, queue: queue, engine: engine)
    let after = Recorder(queue: queue)
    again.read(length: .max, queue: queue, handler: after.handler)
    checks.check(after.wait() && after.bytes == content, "a channel opened after the fds came back: \(after.shapes)")
    again.close()
}

private func threadPoolWithoutDescriptorsChild(_ checks: ChildChecks) throws {
    let engine = try childEngine(useRing: false)
    // A pipe, not a file: a cached file's read may be carried out on the
    // caller's thread (an inline `RWF_NOWAIT` try) and need no worker at
    // all; a pipe's read always goes to the pool.
    let content = randomBytes(1000, seed: 103)
    var ends: [Int32] = [0, 0]
    checks.check(pipe(&ends) == 0, "pipe: \(errno)")
    checks.check(content.withUnsafeBytes { write(ends[1], $0.baseAddress, $0.count) } == content.count, "pipe write")
    close(ends[1])
    let fd = FileDescriptor(rawValue: ends[0])
    // No fd number is free: the pool cannot make a worker's cancel eventfd.
    var lowestFree: Int32 = 0
    while fcntl(lowestFree, F_GETFD) != -1 { lowestFree += 1 }
    var rl = rlimit()
    getrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &rl)
    let saved = rl
    // The limit sits just above stdin, stdout and stderr, which nothing
    // closes: an fd that another thread of the process closes frees no number
    // a worker could take (with the limit at the lowest free number, such a
    // close let the pool start a worker at load, and the read succeeded).
    rl.rlim_cur = rlim_t(min(lowestFree, 3))
    checks.check(setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &rl) == 0, "setrlimit: \(errno)")
    // An fd below the limit may have been closed since the scan (by the exit
    // test's own machinery, in a whole `swift test` run): fill every hole.
    // Filled again right before each request: the runtime's own threads may
    // close an fd in between, and a free number lets the pool start a worker.
    var fillers: [Int32] = []
    func fillHoles() {
        while true {
            let d = dup(fd.rawValue)
            if d < 0 { break }
            fillers.append(d)
        }
    }
    fillHoles()
    defer { fillers.forEach { close($0) } }
    let nop = perform(engine, .nop, timeout: .seconds(5))
    checks.check(nop == -EMFILE, "a NOP with no worker: \(nop.map { "\($0)" } ?? "no completion in 5 s")")
    let queue = IOQueue(label: "no-fds")
    let channel = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
    let r = Recorder(queue: queue)
    fillHoles()
    channel.read(length: .max, queue: queue, handler: r.handler)
    checks.check(r.wait(timeout: .seconds(5)), "the read waited forever")
    checks.check(r.settledShapes() == [Shape(true, nil, .tooManyOpenFiles)], "read: \(r.shapes)")
    // With fds again, the pool starts a worker and the channel reads every
    // byte (the failed read took none).
    rl = saved
    checks.check(setrlimit(__rlimit_resource_t(RLIMIT_NOFILE.rawValue), &rl) == 0, "setrlimit: \(errno)")
    let again = Recorder(queue: queue)
    channel.read(length: .max, queue: queue, handler: again.handler)
    checks.check(again.wait(timeout: .seconds(5)) && again.bytes == content, "read after: \(again.shapes)")
    channel.close()
    try fd.close()
}

private func permissionDeniedChild(useRing: Bool, directory: String, _ checks: ChildChecks) throws {
    // Every thread of the process takes the new ids (glibc applies them to all).
    checks.check(setgroups(0, nil) == 0, "setgroups: \(errno)")
    checks.check(setgid(65534) == 0, "setgid: \(errno)")
    checks.check(setuid(65534) == 0, "setuid: \(errno)")
    let engine = try childEngine(useRing: useRing)
    let queue = IOQueue(label: "eacces")
    let cleanup = CleanupRecorder(queue: queue)
    let secret = try IOChannel(kind: .stream, path: FilePath(directory + "/secret"), mode: .readOnly, queue: queue,
                               engine: engine, cleanup: cleanup.handler)
    let r = Recorder(queue: queue)
    secret.read(length: .max, queue: queue, handler: r.handler)
    checks.check(r.wait(), "the read hung")
    checks.check(r.settledShapes() == [Shape(true, nil, .permissionDenied)], "unreadable file: \(r.shapes)")
    secret.close()
    checks.check(cleanup.wait() && cleanup.error == .permissionDenied, "cleanup: \(cleanup.error.map { "\($0)" } ?? "nil")")

    let created = try IOChannel(kind: .stream, path: FilePath(directory + "/new"), mode: .writeOnly, options: [.create],
                                permissions: [.ownerReadWrite], queue: queue, engine: engine)
    let w = Recorder(queue: queue)
    created.write(data: DataChunk([1, 2, 3]), queue: queue, handler: w.handler)
    checks.check(w.wait(), "the write hung")
    checks.check(w.settledShapes() == [Shape(true, 3, .permissionDenied)], "create in an unwritable directory: \(w.shapes)")
    created.close()

    // A readable file beside them still reads.
    let open = try IOChannel(kind: .stream, path: FilePath(directory + "/public"), mode: .readOnly, queue: queue,
                             engine: engine)
    let ok = Recorder(queue: queue)
    open.read(length: .max, queue: queue, handler: ok.handler)
    checks.check(ok.wait() && ok.bytes.count == 100 && ok.calls.last?.error == nil, "readable file: \(ok.shapes)")
    open.close()
}

/// Directory listing without Foundation.
enum FileManagerLite {
    static func names(in path: String) throws -> [String] {
        guard let dir = opendir(path) else { throw Errno(rawValue: errno) }
        defer { closedir(dir) }
        var out: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != "." && name != ".." { out.append(name) }
        }
        return out
    }
}
