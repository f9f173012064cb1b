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

/// Records the calls of a one-shot `IO.read` or `IO.write` handler.
final class OneShotRecorder: Sendable {
    let queue: IOQueue
    private let calls = Locked<[(data: DataChunk?, error: Errno?, onQueue: Bool)]>([])
    private let first = Latch()
    init(queue: IOQueue) { self.queue = queue }

    var readHandler: @Sendable (DataChunk, Errno?) -> Void { { [self] data, error in record(data, error) } }
    var writeHandler: @Sendable (DataChunk?, Errno?) -> Void { { [self] data, error in record(data, error) } }

    private func record(_ data: DataChunk?, _ error: Errno?) {
        let onQueue = queue.isCurrent
        let n = calls.withLock { c -> Int in
            c.append((data, error, onQueue))
            return c.count
        }
        if n == 1 { first.signal() }
    }

    func wait(timeout: Duration = .seconds(10)) -> Bool { first.wait(timeout: timeout) }
    /// The number of calls, once a little time has passed for an extra one to show.
    var settledCount: Int {
        milliseconds(50)
        return calls.withLock { $0.count }
    }
    var data: DataChunk? { calls.withLock { $0.first?.data } }
    var error: Errno? { calls.withLock { $0.first?.error } }
    var ranOnQueue: Bool { calls.withLock { $0.first?.onQueue ?? false } }
}

@Suite("IO.read and IO.write")
struct OneShotIOTests {
    @Test("IO.read of a file: one call with the bytes up to the length, or to EOF", arguments: allBackends)
    func readFileOnce(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("oneshot")
        let content = randomBytes(2 * MiB + 1234, seed: 101)
        try writeFile(path, content)
        for (length, expected) in [(1000, 1000), (.max, content.count), (3 * MiB, content.count)] {
            let fd = try openFile(path, .readOnly)
            defer { try? fd.close() }
            let queue = IOQueue(label: "oneshot-read")
            let r = OneShotRecorder(queue: queue)
            IO.read(from: fd, length: length, queue: queue, engine: engine, handler: r.readHandler)
            #expect(r.wait(timeout: .seconds(20)))
            #expect(r.settledCount == 1)
            #expect(r.error == nil)
            #expect(r.data == DataChunk(content[0..<expected]), "length \(length)")
            #expect(r.ranOnQueue)
        }
    }

    @Test("IO.read on a pipe waits for the first bytes and returns what is available", arguments: allBackends)
    func readPipe(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        defer { pipe.closeAll() }
        let queue = IOQueue(label: "oneshot-pipe")
        let r = OneShotRecorder(queue: queue)
        IO.read(from: pipe.reader, length: 1000, queue: queue, engine: engine, handler: r.readHandler)
        #expect(!r.wait(timeout: .milliseconds(150)), "IO.read returned before any bytes arrived")
        let bytes = randomBytes(10, seed: 102)
        _ = try pipe.writer.writeAll(bytes)
        #expect(r.wait(timeout: .seconds(5)))
        #expect(r.settledCount == 1)
        #expect(r.error == nil)
        #expect(r.data == DataChunk(bytes))
    }

    @Test("IO.read of a bad fd: (empty, EBADF)", arguments: allBackends)
    func readBadFD(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let queue = IOQueue(label: "oneshot-ebadf")
        let r = OneShotRecorder(queue: queue)
        IO.read(from: try closedDescriptorNumber(), length: 100, queue: queue, engine: engine, handler: r.readHandler)
        #expect(r.wait())
        #expect(r.settledCount == 1)
        #expect(r.error == .badFileDescriptor)
        #expect(r.data == DataChunk.empty)
    }

    @Test("IO.write: (nil, nil) on success, for a contiguous and a discontiguous chunk", arguments: allBackends)
    func writeFileOnce(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let bytes = randomBytes(MiB + 4321, seed: 103)
        for (name, chunk) in [("contiguous", DataChunk(bytes)), ("discontiguous", discontiguousChunk(bytes, regions: 700))] {
            let path = dir.file(name)
            let fd = try FileDescriptor.open(FilePath(path), .writeOnly, options: [.create, .truncate, .closeOnExec],
                                             permissions: [.ownerReadWrite])
            defer { try? fd.close() }
            let queue = IOQueue(label: "oneshot-write")
            let r = OneShotRecorder(queue: queue)
            IO.write(to: fd, data: chunk, queue: queue, engine: engine, handler: r.writeHandler)
            #expect(r.wait(timeout: .seconds(20)))
            #expect(r.settledCount == 1)
            #expect(r.error == nil)
            #expect(r.data == nil)
            #expect(r.ranOnQueue)
            #expect(try readFile(path) == bytes, "\(name)")
        }
    }

    @Test("IO.write to a bad fd: (all the data, EBADF)", arguments: allBackends)
    func writeBadFD(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let queue = IOQueue(label: "oneshot-write-ebadf")
        let r = OneShotRecorder(queue: queue)
        let data = DataChunk(randomBytes(777, seed: 104))
        IO.write(to: try closedDescriptorNumber(), data: data, queue: queue, engine: engine, handler: r.writeHandler)
        #expect(r.wait())
        #expect(r.settledCount == 1)
        #expect(r.error == .badFileDescriptor)
        #expect(r.data == data)
    }

    @Test("IO.write to a pipe without a reader: (the unwritten data, EPIPE)", arguments: allBackends)
    func writeBrokenPipe(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        try pipe.reader.close()
        defer { try? pipe.writer.close() }
        let queue = IOQueue(label: "oneshot-epipe")
        let r = OneShotRecorder(queue: queue)
        let data = DataChunk(randomBytes(5000, seed: 105))
        IO.write(to: pipe.writer, data: data, queue: queue, engine: engine, handler: r.writeHandler)
        #expect(r.wait())
        #expect(r.settledCount == 1)
        #expect(r.error == .brokenPipe)
        #expect(r.data == data)
    }
}
