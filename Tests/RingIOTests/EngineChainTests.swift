#if canImport(Glibc)
import Glibc
#endif
import CLiburing
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles
@testable import RingIOBase

/// Submits `operations` as one linked chain and waits for every result.
private func performChain(_ engine: IOEngine, _ operations: [IORequest.Operation],
                          owner: AnyObject? = nil) -> [Int32]? {
    let results = Locked([Int32?](repeating: nil, count: operations.count))
    let latch = Latch(count: operations.count)
    let requests = operations.enumerated().map { i, operation in
        IORequest(operation, owner: owner) { res in
            results.withLock { $0[i] = res }
            latch.signal()
        }
    }
    engine.submit(linked: requests)
    guard latch.wait(timeout: .seconds(10)) else { return nil }
    return results.withLock { $0.map { $0 ?? Int32.min } }
}

@Suite("IOEngine linked chains and path requests")
struct EngineChainTests {
    @Test("a chain runs in order: a write, then a read of what it wrote", arguments: allBackends)
    func chainRunsInOrder(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let fd = open(dir.file("f"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        try #require(fd >= 0)
        defer { close(fd) }
        let source = TestBuffer(count: 8192), target = TestBuffer(count: 8192)
        source.pointer.copyBytes(from: pattern(stream: 1, block: 0, count: 8192))
        // Repeated so that a backend that ran chain members in parallel would be caught.
        for round in 0..<50 {
            let results = performChain(engine, [
                .write(fd: fd, buffer: UnsafeRawBufferPointer(source.pointer), offset: Int64(round * 8192)),
                .read(fd: fd, buffer: target.pointer, offset: Int64(round * 8192)),
            ], owner: [source, target] as AnyObject)
            #expect(results == [8192, 8192])
            #expect(target.bytes == source.bytes)
            target.pointer.initializeMemory(as: UInt8.self, repeating: 0)
        }
    }

    @Test("a short read breaks the chain: the later requests complete with ECANCELED and do not run", arguments: allBackends)
    func shortReadBreaksChain(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("short")
        let fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        try #require(fd >= 0)
        defer { close(fd) }
        #expect(write(fd, "ab", 2) == 2)
        let buffer = TestBuffer(count: 10)
        let results = performChain(engine, [
            .read(fd: fd, buffer: buffer.pointer, offset: 0),
            .write(fd: fd, buffer: UnsafeRawBufferPointer(buffer.pointer), offset: 100),
            .nop,
        ], owner: buffer)
        #expect(results == [2, -ECANCELED, -ECANCELED])
        var info = stat()
        #expect(fstat(fd, &info) == 0)
        #expect(info.st_size == 2, "the cancelled write must not have run")
    }

    @Test("a failed open breaks the chain", arguments: allBackends)
    func failedOpenBreaksChain(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let missing = PathBuffer(dir.file("missing"))
        let results = performChain(engine, [
            .openat(directory: AT_FDCWD, path: missing.pointer, flags: O_RDONLY | O_CLOEXEC, mode: 0),
            .nop,
            .nop,
        ], owner: missing)
        #expect(results == [-ENOENT, -ECANCELED, -ECANCELED])
    }

    @Test("a chain of one is a plain request; chains from many threads keep their order", arguments: allBackends)
    func manyChains(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend, ringEntries: 8)
        let dir = TemporaryDirectory()
        #expect(performChain(engine, [.nop]) == [0])
        // 200 chains of 6 through an 8-entry ring (16 CQEs): chains wait whole for room.
        let fd = open(dir.file("many"), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        try #require(fd >= 0)
        defer { close(fd) }
        let block = 512
        let buffers = (0..<200).map { i -> TestBuffer in
            let b = TestBuffer(count: block)
            b.pointer.copyBytes(from: pattern(stream: 2, block: i, count: block))
            return b
        }
        let readBack = (0..<200).map { _ in TestBuffer(count: block) }
        let order = Locked([[Int]](repeating: [], count: 200))
        let latch = Latch(count: 200 * 6)
        for i in 0..<200 {
            let ops: [IORequest.Operation] = [
                .nop,
                .write(fd: fd, buffer: UnsafeRawBufferPointer(buffers[i].pointer), offset: Int64(i * block)),
                .nop,
                .read(fd: fd, buffer: readBack[i].pointer, offset: Int64(i * block)),
                .nop,
                .nop,
            ]
            engine.submit(linked: ops.enumerated().map { step, op in
                IORequest(op, owner: [buffers[i], readBack[i]] as AnyObject) { res in
                    order.withLock { $0[i].append(res < 0 ? -1 : step) }
                    latch.signal()
                }
            })
        }
        try #require(latch.wait(timeout: .seconds(30)))
        for i in 0..<200 {
            #expect(order.withLock { $0[i] } == [0, 1, 2, 3, 4, 5])
            #expect(readBack[i].bytes == buffers[i].bytes)
        }
    }

    @Test("renameat and unlinkat", arguments: allBackends)
    func renameAndUnlink(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let a = PathBuffer(dir.file("a")), b = PathBuffer(dir.file("b"))
        let fd = open(dir.file("a"), O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
        try #require(fd >= 0)
        close(fd)
        let owner = [a, b] as AnyObject
        #expect(perform(engine, .renameat(oldDirectory: AT_FDCWD, oldPath: a.pointer, newDirectory: AT_FDCWD,
                                           newPath: b.pointer, flags: 0), owner: owner) == 0)
        #expect(access(dir.file("a"), F_OK) != 0 && access(dir.file("b"), F_OK) == 0)
        // RENAME_NOREPLACE (1) refuses an existing target.
        let fd2 = open(dir.file("a"), O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
        close(fd2)
        #expect(perform(engine, .renameat(oldDirectory: AT_FDCWD, oldPath: a.pointer, newDirectory: AT_FDCWD,
                                           newPath: b.pointer, flags: 1), owner: owner) == -EEXIST)
        #expect(perform(engine, .unlinkat(directory: AT_FDCWD, path: b.pointer, flags: 0), owner: owner) == 0)
        #expect(perform(engine, .unlinkat(directory: AT_FDCWD, path: b.pointer, flags: 0), owner: owner) == -ENOENT)
    }
}

/// A NUL-terminated path that lives as long as the requests holding it.
final class PathBuffer: Sendable {
    // Sendable: the bytes are written once, in init, and only read afterwards.
    nonisolated(unsafe) let pointer: UnsafeMutablePointer<CChar>
    init(_ path: String) {
        let utf8 = Array(path.utf8CString)
        pointer = .allocate(capacity: utf8.count)
        pointer.initialize(from: utf8, count: utf8.count)
    }
    deinit { pointer.deallocate() }
}
