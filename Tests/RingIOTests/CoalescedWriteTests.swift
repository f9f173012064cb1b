#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Testing
import RingIOTestSupport
@_spi(Engine) @testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles
@testable import RingIOBase
@testable import RingIOEngine
@testable import RingIOQueue
@testable import RingIOData

/// How the bytes of one coalesced `pwritev` fall to the writes it carried,
/// without the kernel.
@Suite("CoalescedWrite.attribute: which writes' bytes are on disk")
struct CoalescedAttributionTests {
    typealias Outcome = CoalescedWrite.Outcome

    @Test("a whole run: every write reports all its bytes written")
    func whole() {
        #expect(CoalescedWrite.attribute(lengths: [10, 20, 30], written: 60, error: nil) == [.written, .written, .written])
    }

    @Test("cut inside a write: earlier ones written, it reports its first bytes and the error, later ones nothing")
    func cutInside() {
        let outcomes = CoalescedWrite.attribute(lengths: [10, 20, 30, 40], written: 25, error: .noSpace)
        #expect(outcomes == [.written, .cut(bytes: 15, .noSpace), .untouched(.canceled), .untouched(.canceled)])
    }

    @Test("cut on a boundary: the first write not reached reports all its bytes unwritten, with the error")
    func cutOnBoundary() {
        let outcomes = CoalescedWrite.attribute(lengths: [10, 20, 30], written: 30, error: .noSpace)
        #expect(outcomes == [.written, .written, .cut(bytes: 0, .noSpace)])
        let none = CoalescedWrite.attribute(lengths: [10, 20], written: 0, error: .ioError)
        #expect(none == [.cut(bytes: 0, .ioError), .untouched(.canceled)])
    }

    @Test("a write stopped before the run went out is left out: it reports ECANCELED, the others their own bytes")
    func stoppedLeftOut() {
        let outcomes = CoalescedWrite.attribute(lengths: [10, nil, 20, nil, 30], written: 35, error: .ioError)
        #expect(outcomes == [.written, .untouched(.canceled), .written, .untouched(.canceled),
                             .cut(bytes: 5, .ioError)])
    }

    @Test("short of the total with no error (cannot happen: the run goes on) still never reports unwritten bytes as written")
    func shortWithoutError() {
        let outcomes = CoalescedWrite.attribute(lengths: [10, 10], written: 12, error: nil)
        #expect(outcomes == [.written, .cut(bytes: 2, .ioError)])
    }
}

#if DEBUG
/// Coalesced stream writes against the kernel, with the disk filling up
/// in the middle of a run (injected: `IOEngine.faults`).
@Suite("Coalesced stream writes")
struct CoalescedWriteTests {
    /// Where the disk fills up: after how many bytes of the run (`nil`: at once).
    struct Fill: Sendable, CustomStringConvertible {
        var after: Int?
        var expected: [Shape]
        var description: String { after.map { "ENOSPC after \($0) bytes" } ?? "ENOSPC at once" }
    }

    static let piece = 100 * KiB
    static let fills: [Fill] = [
        // Inside the third write (in the first of its two regions).
        Fill(after: 2 * piece + 50 * KiB,
             expected: [Shape(true, nil, nil), Shape(true, nil, nil), Shape(true, piece - 50 * KiB, .noSpace)]
                + Array(repeating: Shape(true, piece, .canceled), count: 5)),
        // On the boundary of the third write.
        Fill(after: 2 * piece,
             expected: [Shape(true, nil, nil), Shape(true, nil, nil), Shape(true, piece, .noSpace)]
                + Array(repeating: Shape(true, piece, .canceled), count: 5)),
        Fill(after: nil,
             expected: [Shape(true, piece, .noSpace)] + Array(repeating: Shape(true, piece, .canceled), count: 7)),
    ]

    /// `count` writes of `piece` bytes (two regions each; default: eight of
    /// 100 KiB, one run) queued at once. Returns the recorders, the pieces,
    /// the channel and the fd.
    static func queueRun(_ engine: IOEngine, _ dir: TemporaryDirectory, queue: IOQueue, count: Int = 8,
                         piece: Int = piece) throws -> ([Recorder], [[UInt8]], IOChannel, FileDescriptor) {
        let fd = try FileDescriptor.open(FilePath(dir.file("out")), .readWrite, options: [.create, .closeOnExec],
                                         permissions: [.ownerReadWrite])
        let channel = IOChannel(kind: .stream, fileDescriptor: fd, queue: queue, engine: engine)
        let pieces = (0..<count).map { randomBytes(piece, seed: 40 + UInt64($0)) }
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
        let admitted = queued.wait()
        #expect(admitted)
        return (recorders, pieces, channel, fd)
    }

    @Test("the disk fills up in a run: the bytes reported written are on disk, those reported unwritten are not",
          arguments: allBackends, fills)
    func diskFillsInRun(backend: IOEngine.Backend, fill: Fill) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        if let after = fill.after {
            engine.faults.add(.init(target: .writes, fault: .shortenWrite(to: after), times: 1))
        }
        engine.faults.add(.init(target: .writes, fault: .fail(ENOSPC), times: 1))
        let queue = IOQueue(label: "coalesced-enospc")
        let (recorders, pieces, channel, fd) = try Self.queueRun(engine, dir, queue: queue)
        defer { try? fd.close() }
        for r in recorders { #expect(r.wait()) }
        for (i, r) in recorders.enumerated() { InjectedFaultTests.expectWellFormed(r, "write \(i)") }
        let outcome = recorders.map { $0.calls.last! }
        #expect(outcome.map(\.shape) == fill.expected)
        // Whatever the shapes: the file is exactly the reported-written
        // prefix of each write, in order, nothing more, and the position
        // stands right after it.
        let expected = zip(pieces, outcome).flatMap { piece, call in piece.prefix(piece.count - (call.data?.count ?? 0)) }
        for (piece, call) in zip(pieces, outcome) where call.data != nil {
            #expect(call.data == DataChunk(piece[(piece.count - call.data!.count)...]))
        }
        #expect(positionInBarrier(of: channel, fd) == Int64(expected.count))
        let onDisk = try readFile(dir.file("out"))
        #expect(onDisk.count == expected.count, "bytes reported unwritten are on disk")
        #expect(onDisk.prefix(expected.count) == expected[...])
        // The channel goes on where the reported bytes end.
        let tail = randomBytes(1000, seed: 50)
        let next = Recorder(queue: queue)
        channel.write(data: DataChunk(tail), queue: queue, handler: next.handler)
        #expect(next.wait())
        #expect(next.settledShapes() == [Shape(true, nil, nil)])
        channel.close()
        #expect(try readFile(dir.file("out")) == expected + tail)
    }

    /// Which of two full runs in flight fails at once with ENOSPC.
    enum FailingRun: Int, Sendable, CaseIterable, CustomStringConvertible {
        case first = 0, second = 1
        var description: String { self == .first ? "the first run fails" : "the second run fails" }
    }

    @Test("two full runs in flight, one fails at once: the file and the reports are those of writes run one after another",
          arguments: allBackends, FailingRun.allCases)
    func failureWithTwoRunsInFlight(backend: IOEngine.Backend, failing: FailingRun) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        // Writes of 512 KiB: two full runs, both sent at
        // once; the requests reach the fault rules in the order they went out.
        let count = 2 * EntryScheduler<ChannelOperation, FDEntry.Barrier, FDEntry.Cleanup, CoalescedWrite>
            .maxCoalescedBytes / (512 * KiB)
        engine.faults.add(.init(target: .writes, fault: .fail(ENOSPC), skip: failing.rawValue, times: 1))
        let queue = IOQueue(label: "coalesced-two-runs")
        let (recorders, pieces, channel, fd) = try Self.queueRun(engine, dir, queue: queue, count: count,
                                                                 piece: 512 * KiB)
        defer { try? fd.close() }
        for r in recorders { #expect(r.wait()) }
        for (i, r) in recorders.enumerated() { InjectedFaultTests.expectWellFormed(r, "write \(i)") }
        let half = count / 2
        let failed = [Shape(true, 512 * KiB, .noSpace)] + Array(repeating: Shape(true, 512 * KiB, .canceled),
                                                                count: half - 1)
        let whole = Array(repeating: Shape(true, nil, nil), count: half)
        let shapes = recorders.map { $0.calls.last!.shape }
        // The first run failing: the second, in flight beside it, wrote at
        // its own offset, past a gap; those bytes are cut off again once it
        // ends, and its writes report every byte unwritten (the first with
        // the error), as if they had started after the failure.
        #expect(shapes == (failing == .first ? failed + failed : whole + failed))
        let onDisk = try readFile(dir.file("out"))
        // Either way the file holds the first run's bytes or none, no gap.
        let expected: [UInt8] = failing == .first ? [] : pieces[..<half].flatMap { $0 }
        #expect(onDisk.count == expected.count)
        let same = onDisk == expected
        #expect(same, "the file holds exactly the bytes reported written, where they were written")
        #expect(positionInBarrier(of: channel, fd) == Int64(expected.count))
        let tail = randomBytes(1000, seed: 60)
        let next = Recorder(queue: queue)
        channel.write(data: DataChunk(tail), queue: queue, handler: next.handler)
        #expect(next.wait())
        #expect(next.settledShapes() == [Shape(true, nil, nil)])
        channel.close()
        let after = try readFile(dir.file("out")) == expected + tail
        #expect(after, "the next write goes right after the bytes reported written")
    }

    @Test("short writes in a run (no error): the run goes on from where each stopped, every write succeeds",
          arguments: allBackends)
    func shortWritesInRun(backend: IOEngine.Backend) throws {
        let engine = try makeEngine(backend)
        let dir = TemporaryDirectory()
        // Each request of the run moves at most 100 KiB: 800 KiB takes eight.
        engine.faults.add(.init(target: .writes, fault: .shortenWrite(to: 100 * KiB)))
        let queue = IOQueue(label: "coalesced-short")
        let (recorders, pieces, channel, fd) = try Self.queueRun(engine, dir, queue: queue)
        defer { try? fd.close() }
        for r in recorders { #expect(r.wait()) }
        for r in recorders { #expect(r.settledShapes() == [Shape(true, nil, nil)]) }
        #expect(engine.faults.injected >= 5)
        #expect(positionInBarrier(of: channel, fd) == Int64(8 * Self.piece))
        channel.close()
        #expect(try readFile(dir.file("out")) == pieces.flatMap { $0 })
    }
}
#endif
