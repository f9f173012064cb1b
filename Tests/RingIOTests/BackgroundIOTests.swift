import SystemPackage
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOEngine
@testable import RingIOBase

/// Reads and writes whose handlers run on a `.background` queue go to the
/// kernel with the idle I/O class (io_uring's SQE `ioprio`).
@Suite("I/O of .background queues")
struct BackgroundIOTests {
    @Test("a .background queue's requests carry the idle I/O class, others the default")
    func priorityOfRequests() {
        #expect(ChannelOperation.ioPriority(for: IOQueue(label: "bg", priority: .background)) == 3 << 13)
        #expect(ChannelOperation.ioPriority(for: .global(priority: .background)) == IORequest.idleIOPriority)
        #expect(ChannelOperation.ioPriority(for: IOQueue(label: "t", target: .global(priority: .background))) == 0)
        for priority in IOQueue.Priority.allCases where priority != .background {
            #expect(ChannelOperation.ioPriority(for: .global(priority: priority)) == 0)
        }
    }

    @Test("a file written and read back from a .background queue: the kernel takes the idle class",
          arguments: allBackends)
    func fileRoundTrip(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let path = dir.file("background")
        let bytes = randomBytes(3 * MiB + 17, seed: 271)
        let queue = IOQueue(label: "background-io", priority: .background)
        let fd = try FileDescriptor.open(FilePath(path), .readWrite, options: [.create, .truncate],
                                         permissions: [.ownerReadWrite])
        defer { try? fd.close() }
        let wrote = OneShotRecorder(queue: queue)
        IO.write(to: fd, data: DataChunk(bytes), queue: queue, engine: engine, handler: wrote.writeHandler)
        #expect(wrote.wait(timeout: .seconds(20)))
        #expect(wrote.error == nil)
        let read = OneShotRecorder(queue: queue)
        let reader = try FileDescriptor.open(FilePath(path), .readOnly)
        defer { try? reader.close() }
        IO.read(from: reader, length: .max, queue: queue, engine: engine, handler: read.readHandler)
        #expect(read.wait(timeout: .seconds(20)))
        #expect(read.error == nil)
        #expect(read.data == DataChunk(bytes))
        #expect(read.ranOnQueue)
    }

    @Test("a pipe read from a .background queue", arguments: allBackends)
    func pipeRead(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let pipe = try TestPipe()
        defer { pipe.closeAll() }
        let queue = IOQueue(label: "background-pipe", priority: .background)
        let r = OneShotRecorder(queue: queue)
        IO.read(from: pipe.reader, length: 100, queue: queue, engine: engine, handler: r.readHandler)
        let bytes = randomBytes(100, seed: 272)
        _ = try pipe.writer.writeAll(bytes)
        #expect(r.wait(timeout: .seconds(5)))
        #expect(r.error == nil)
        #expect(r.data == DataChunk(bytes))
    }
}
