#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOBase
@testable import RingIOEngine
@testable import RingIOQueue
@testable import RingIOData

/// Stream writes queued on an `O_APPEND` fd go out together, one `pwritev`
/// at the end of the file per run, and report exactly as writes run one
/// after another would.
@Suite("Coalesced O_APPEND writes")
struct AppendCoalescingTests {
    static let piece = 100 * KiB
    static let head = randomBytes(1000, seed: 70)

    /// `count` writes of `piece` bytes (two regions each) queued at once on
    /// an `O_APPEND` fd whose file already holds `head` and whose position is
    /// 0. Returns the recorders, the pieces, the channel and the fd.
    static func queueAppends(_ engine: IOEngine, _ dir: TemporaryDirectory, queue: IOQueue, count: Int = 8,
                             piece: Int = piece) throws -> ([Recorder], [[UInt8]], IOChannel, FileDescriptor) {
        let path = FilePath(dir.file("log"))
        let setup = try FileDescriptor.open(path, .writeOnly, options: [.create, .truncate],
                                            permissions: [.ownerReadWrite])
        _ = try setup.writeAll(head)
        try setup.close()
        let fd = try FileDescriptor.open(path, .writeOnly, options: [.append, .closeOnExec])
        let channel = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
        let pieces = (0..<count).map { randomBytes(piece, seed: 80 + UInt64($0)) }
        let recorders = pieces.map { _ in Recorder(queue: queue) }
        // Queued while a barrier runs: all are admitted together when it returns.
        let queued = Latch()
        channel.barrier {
            for (bytes, r) in zip(pieces, recorders) {
                let data = DataChunk(bytes[..<(piece / 2)]).concat(DataChunk(bytes[(piece / 2)...]))
                channel.write(data: data, queue: queue, handler: r.handler)
            }
            queued.signal()
        }
        #expect(queued.wait())
        return (recorders, pieces, channel, fd)
    }

    @Test("queued appends land whole and in order after what the file held; the position ends at the end",
          arguments: allBackends)
    func appendsInOrder(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        let queue = IOQueue(label: "append-order")
        // 40 writes of 100 KiB: four runs of at most 1 MiB, one at a time.
        let (recorders, pieces, channel, fd) = try Self.queueAppends(engine, dir, queue: queue, count: 40)
        defer { try? fd.close() }
        for r in recorders { #expect(r.wait()) }
        for r in recorders { #expect(r.settledShapes() == [Shape(true, nil, nil)]) }
        let expected = Self.head + pieces.flatMap { $0 }
        #expect(positionInBarrier(of: channel, fd) == Int64(expected.count))
        // A lone write after them appends too.
        let tail = randomBytes(1000, seed: 90)
        let next = Recorder(queue: queue)
        channel.write(data: DataChunk(tail), queue: queue, handler: next.handler)
        #expect(next.wait())
        channel.close()
        let same = try readFile(dir.file("log")) == expected + tail
        #expect(same, "the log holds the head, then every record in submission order")
    }

    @Test("the disk fills up inside an append run: each write reports exactly its share, those behind it nothing",
          arguments: allBackends)
    func diskFillsInAppendRun(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        // The run's one pwritev moves 250 KiB (inside the third write), then
        // the rest of it fails with ENOSPC. Written one at a time instead,
        // the first write would take the ENOSPC and the others succeed.
        engine.faults.add(.init(target: .writes, fault: .shortenWrite(to: 2 * Self.piece + 50 * KiB), times: 1))
        engine.faults.add(.init(target: .writes, fault: .fail(ENOSPC), times: 1))
        let queue = IOQueue(label: "append-enospc")
        let (recorders, pieces, channel, fd) = try Self.queueAppends(engine, dir, queue: queue)
        defer { try? fd.close() }
        for r in recorders { #expect(r.wait()) }
        let outcome = recorders.map { $0.calls.last! }
        let expectedShapes = [Shape(true, nil, nil), Shape(true, nil, nil), Shape(true, Self.piece - 50 * KiB, .noSpace)]
            + Array(repeating: Shape(true, Self.piece, .canceled), count: 5)
        #expect(outcome.map(\.shape) == expectedShapes)
        let written = zip(pieces, outcome).flatMap { piece, call in piece.prefix(piece.count - (call.data?.count ?? 0)) }
        let expected = Self.head + written
        #expect(positionInBarrier(of: channel, fd) == Int64(expected.count))
        channel.close()
        let same = try readFile(dir.file("log")) == expected
        #expect(same, "the log holds exactly the bytes reported written")
    }
}
