#if canImport(Glibc)
import Glibc
#endif
import Testing
import RingIOTestSupport
@testable import RingIO
@testable import RingIOChannel
@testable import RingIOFiles
@testable import RingIOBase

/// An operation as the scheduler sees it, with a name for the assertions.
private final class FakeOp: SchedulableOperation, CustomStringConvertible {
    let name: String
    var ticket = SchedulerTicket()
    init(_ name: String) { self.name = name }
    var description: String { name }
}

/// The file as the scheduler asks about it: a position, and in direct mode
/// the writes that must run alone.
private struct FakeHost: EntrySchedulerHost {
    var directMode = false
    var position: Int64? = 0
    var exclusive: Set<String> = []
    /// Direct mode by alignment: a write runs alone unless it starts and
    /// ends on a block boundary (a stream write whose start is not known
    /// runs alone).
    var block: Int64?
    var notCoalescable: Set<String> = []
    func filePosition() -> Int64? { position }
    func needsExclusiveRun(_ operation: FakeOp, streamPosition: Int64?) -> Bool {
        if let block, operation.ticket.isStream {
            guard let streamPosition else { return true }
            return streamPosition % block != 0 || (streamPosition + Int64(operation.ticket.length)) % block != 0
        }
        return exclusive.contains(operation.name)
    }
    func mayCoalesce(_ operation: FakeOp) -> Bool { !notCoalescable.contains(operation.name) }
}

/// Runs are named by their writes' names, joined with "+".
private typealias Scheduler = EntryScheduler<FakeOp, String, String, String>

/// Nothing to start (for `Driver.note` of a transition that returns cleanups only).
private enum FDEntryReadyEmpty {
    static var none: Scheduler.Ready { Scheduler.Ready() }
}

/// Drives an `EntryScheduler` the way `FDEntry` does, recording what starts.
private struct Driver {
    var scheduler = Scheduler(channels: 1)
    var host = FakeHost()
    var started: [String] = []
    var startedOps: [FakeOp] = []
    var cleanups: [String] = []
    /// The coalesced runs started: their writes and offset.
    var runs: [(names: [String], offset: Int64)] = []
    /// The runs released, in order, with the position each set (`nil`: left).
    var released: [(run: String, position: Int64?)] = []

    mutating func note(_ items: Scheduler.Ready) {
        for item in items {
            switch item {
            case .operation(let op):
                started.append(op.name)
                startedOps.append(op)
            case .barrier(let name): started.append(name)
            case .writes(let ops, let offset):
                started += ops.map(\.name)
                startedOps += ops
                runs.append((ops.map(\.name), offset))
            }
        }
    }

    mutating func note(_ result: (Scheduler.Ready, [String]?)) {
        note(result.0)
        cleanups += result.1 ?? []
    }

    @discardableResult
    mutating func stream(_ name: String, lane: Int = 0, write: Bool = false, pipelinable: Bool = false,
                         length: Int = 4096, regions: Int = 1) -> FakeOp {
        let op = FakeOp(name)
        note(scheduler.enqueue(op, stream: true, lane: lane, isWrite: write, pipelinable: pipelinable,
                               length: length, regions: regions, host: host))
        return op
    }

    /// The writes of a coalesced run end (`intact`: every byte written;
    /// `written`: default, all of them), then the last handler calls of the
    /// runs released return (the shell sets the position each says).
    mutating func finishRun(_ names: [String], intact: Bool = true, written: Int? = nil) {
        let ops = names.map { op(named: $0) }
        let bytes = written ?? ops.reduce(0) { $0 + $1.ticket.length }
        let released = scheduler.coalescedWritesEnded(names.joined(separator: "+"), operations: ops,
                                                      written: bytes, intact: intact)
        for run in released {
            self.released.append((run.run, run.position))
            if let position = run.position { host.position = position }
        }
        if !released.isEmpty { note(scheduler.runsReleased(host: host)) }
        for run in released {
            for _ in run.run.split(separator: "+") { cleanups += scheduler.handlersReturned() ?? [] }
        }
    }

    @discardableResult
    mutating func random(_ name: String, write: Bool = false) -> FakeOp {
        let op = FakeOp(name)
        note(scheduler.enqueue(op, stream: false, lane: 0, isWrite: write, pipelinable: false,
                               length: 4096, host: host))
        return op
    }

    mutating func barrier(_ name: String) {
        note(scheduler.enqueueBarrier(name, host: host))
    }

    /// The operation's I/O ends and then its last handler call returns.
    mutating func finish(_ op: FakeOp) {
        note(scheduler.operationFinishedIO(op, host: host))
        cleanups += scheduler.handlersReturned() ?? []
    }

    mutating func barrierReturned() {
        note(scheduler.barrierReturned(host: host))
    }

    mutating func beginInline(stream: Bool, lane: Int, isWrite: Bool) -> Bool {
        scheduler.beginInline(stream: stream, lane: lane, isWrite: isWrite)
    }
}

@Suite("EntryScheduler: the fd entry's rules, without the kernel")
struct EntrySchedulerTests {
    @Test("stream operations of one lane start one at a time, in submission order")
    func streamLaneIsFIFO() {
        var d = Driver()
        let a = d.stream("a")
        let b = d.stream("b", write: true)
        let c = d.stream("c")
        #expect(d.started == ["a"])
        d.finish(a)
        #expect(d.started == ["a", "b"])
        d.finish(b)
        #expect(d.started == ["a", "b", "c"])
        d.finish(c)
        #expect(d.scheduler.running == 0 && d.scheduler.queued == 0)
    }

    @Test("on a pipe the read and write lanes are independent: a pending read does not hold back a write")
    func lanesAreIndependent() {
        var d = Driver()
        let r1 = d.stream("r1", lane: 0)
        d.stream("r2", lane: 0)
        let w1 = d.stream("w1", lane: 1, write: true)
        d.stream("w2", lane: 1, write: true)
        #expect(d.started == ["r1", "w1"])
        d.finish(w1)
        #expect(d.started == ["r1", "w1", "w2"])
        d.finish(r1)
        #expect(d.started == ["r1", "w1", "w2", "r2"])
    }

    @Test("random operations all start at once, even behind a busy stream lane")
    func randomStartAtOnce() {
        var d = Driver()
        d.stream("s1")
        d.stream("s2")
        d.random("x")
        d.random("y")
        #expect(d.started == ["s1", "x", "y"])
    }

    @Test("a barrier waits for every earlier operation, runs alone, and nothing later starts before it returns")
    func barrierOrdering() {
        var d = Driver()
        let s = d.stream("s")
        let x = d.random("x")
        d.barrier("B")
        d.random("y")
        d.stream("t")
        #expect(d.started == ["s", "x"])
        d.finish(x)
        #expect(d.started == ["s", "x"])
        d.finish(s)
        #expect(d.started == ["s", "x", "B"])
        #expect(d.scheduler.barrierRunning)
        d.barrierReturned()
        #expect(d.started == ["s", "x", "B", "y", "t"])
    }

    @Test("an inline operation begins only with nothing ahead of it, and holds back a barrier, its lane and the cleanup until it ends")
    func inlineOperation() {
        var d = Driver()
        // Idle: a stream read and a random write may begin at once.
        let began1 = d.beginInline(stream: true, lane: 0, isWrite: false)
        #expect(began1)
        let began2 = d.beginInline(stream: false, lane: 0, isWrite: true)
        #expect(began2)
        // Behind the inline stream read: a stream write waits in its lane,
        // a barrier waits for both inline operations, and a second inline
        // stream operation is refused (its lane is busy).
        let w = d.stream("w", write: true)
        d.barrier("B")
        #expect(d.started == [])
        let began3 = d.beginInline(stream: true, lane: 0, isWrite: false)
        #expect(!began3)
        // Behind the queued barrier, nothing may begin inline, random or not.
        let began4 = d.beginInline(stream: false, lane: 0, isWrite: false)
        #expect(!began4)
        d.note(d.scheduler.endInline(stream: true, lane: 0, isWrite: false, host: d.host))
        #expect(d.started == ["w"])
        d.finish(w)
        #expect(d.started == ["w"], "the barrier still waits for the inline random write")
        d.note(d.scheduler.endInline(stream: false, lane: 0, isWrite: true, host: d.host))
        #expect(d.started == ["w", "B"])
        // While the barrier runs, nothing begins inline.
        let began5 = d.beginInline(stream: false, lane: 0, isWrite: false)
        #expect(!began5)
        d.barrierReturned()
        // A stream read queued and running: the lane is busy; random ops may still begin.
        let r = d.stream("r")
        let began6 = d.beginInline(stream: true, lane: 0, isWrite: true)
        #expect(!began6)
        let began7 = d.beginInline(stream: false, lane: 0, isWrite: false)
        #expect(began7)
        d.finish(r)
        // The last channel closes while the inline read runs: the cleanup waits for it.
        d.note((FDEntryReadyEmpty.none, d.scheduler.channelClosed("cleanup")))
        #expect(d.cleanups == [])
        d.note(d.scheduler.endInline(stream: false, lane: 0, isWrite: false, host: d.host))
        #expect(d.cleanups == ["cleanup"])
        // Finished: nothing begins any more.
        let began8 = d.beginInline(stream: false, lane: 0, isWrite: false)
        #expect(!began8)
    }

    @Test("a barrier on an idle entry starts at once; two barriers run one after the other")
    func idleBarrier() {
        var d = Driver()
        d.barrier("B1")
        d.barrier("B2")
        #expect(d.started == ["B1"])
        d.barrierReturned()
        #expect(d.started == ["B1", "B2"])
        d.barrierReturned()
        #expect(!d.scheduler.barrierRunning && d.scheduler.queued == 0)
    }

    @Test("a withdrawn operation never starts and does not hold its lane or a barrier; a started one cannot be withdrawn")
    func withdraw() {
        var d = Driver()
        let a = d.stream("a")
        let b = d.stream("b")
        d.barrier("B")
        let c = d.stream("c")
        let withdrawn = [d.scheduler.withdraw(a), d.scheduler.withdraw(b), d.scheduler.withdraw(c),
                         d.scheduler.withdraw(c)]
        #expect(withdrawn == [false, true, true, false])
        d.finish(a)
        #expect(d.started == ["a", "B"])
        d.barrierReturned()
        #expect(d.started == ["a", "B"])
        // Their handlers still run once each.
        _ = d.scheduler.handlersReturned()
        _ = d.scheduler.handlersReturned()
        #expect(d.scheduler.queued == 0 && d.scheduler.running == 0)
    }

    @Test("cleanups run once every channel closed, every handler returned and nothing is queued or running")
    func cleanupGating() {
        var d = Driver()
        let attached = d.scheduler.attachChannel()
        #expect(attached)
        let a = d.stream("a")
        d.stream("b")
        let first = d.scheduler.channelClosed("first"), second = d.scheduler.channelClosed("second")
        #expect(first == nil && second == nil)
        d.note(d.scheduler.operationFinishedIO(a, host: d.host))
        #expect(d.cleanups.isEmpty)
        _ = d.scheduler.handlersReturned()
        #expect(d.cleanups.isEmpty)  // b runs
        #expect(d.started == ["a", "b"])
        d.note(d.scheduler.operationFinishedIO(d.op(named: "b"), host: d.host))
        #expect(d.cleanups.isEmpty)  // b's handler has not returned
        d.cleanups += d.scheduler.handlersReturned() ?? []
        #expect(d.cleanups == ["first", "second"])
        #expect(d.scheduler.finished)
        let late = d.scheduler.attachChannel()
        #expect(!late)
    }

    @Test("a barrier holds cleanup until it returns")
    func barrierHoldsCleanup() {
        var d = Driver()
        d.barrier("B")
        let early = d.scheduler.channelClosed("c")
        #expect(early == nil)
        d.barrierReturned()
        #expect(d.cleanups == ["c"])
    }

    @Test("pipelinable stream writes queued behind a busy lane go out together, as one run at the file position")
    func coalescedRun() {
        var d = Driver()
        d.host.position = 1000
        let w0 = d.stream("w0", write: true, pipelinable: true, length: 100)
        for i in 1...5 { d.stream("w\(i)", write: true, pipelinable: true, length: 100) }
        // Alone on a free lane: it starts as any operation.
        #expect(d.started == ["w0"] && d.runs.isEmpty)
        d.host.position = 1100
        d.finish(w0)
        #expect(d.runNames == [["w1", "w2", "w3", "w4", "w5"]])
        #expect(d.runOffsets == [1100])
        #expect(d.scheduler.running == 5 && d.scheduler.queued == 0)
        // A write queued while the run is out waits for it.
        d.stream("w6", write: true, pipelinable: true, length: 100)
        #expect(d.started.count == 6)
        d.finishRun(["w1", "w2", "w3", "w4", "w5"])
        #expect(d.started.last == "w6" && d.runs.count == 1)
        d.finish(d.op(named: "w6"))
        #expect(d.scheduler.running == 0 && d.scheduler.queued == 0 && d.scheduler.handlersOutstanding == 0)
    }

    @Test("a run holds at most maxCoalescedRegions iovecs and maxCoalescedBytes; the rest follows in the next runs, at their ends")
    func coalescedLimits() {
        var d = Driver()
        let w0 = d.stream("w0", write: true, pipelinable: true)
        let regions = Scheduler.maxCoalescedRegions / 4
        for i in 1...6 { d.stream("r\(i)", write: true, pipelinable: true, length: 10, regions: regions) }
        let big = Scheduler.maxCoalescedBytes / 2
        for i in 1...3 { d.stream("b\(i)", write: true, pipelinable: true, length: big) }
        d.host.position = 4096
        d.finish(w0)
        // Full runs go out behind each other, each where the one before ends.
        #expect(d.runNames == [["r1", "r2", "r3", "r4"], ["r5", "r6", "b1"], ["b2", "b3"]])
        let offsets: [Int64] = [4096, 4136, 4156 + Int64(big)]
        #expect(d.runOffsets == offsets)
        d.finishRun(["r1", "r2", "r3", "r4"])
        d.finishRun(["r5", "r6", "b1"])
        d.finishRun(["b2", "b3"])
        let positions: [Int64?] = [4136, 4156 + Int64(big), 4156 + 3 * Int64(big)]
        #expect(d.released.map(\.position) == positions)
        #expect(d.scheduler.running == 0 && d.scheduler.queued == 0 && d.scheduler.handlersOutstanding == 0)
    }

    @Test("an operation that is not a pipelinable write, or may not be coalesced, splits the runs; withdrawn writes are left out")
    func coalescedSplits() {
        var d = Driver()
        d.host.notCoalescable = ["odd"]
        let w0 = d.stream("w0", write: true, pipelinable: true)
        d.stream("w1", write: true, pipelinable: true)
        let gone = d.stream("gone", write: true, pipelinable: true)
        d.stream("w2", write: true, pipelinable: true)
        d.stream("r")
        d.stream("w3", write: true, pipelinable: true)
        d.stream("odd", write: true, pipelinable: true)
        d.stream("w4", write: true, pipelinable: true)
        d.stream("w5", write: true, pipelinable: true)
        let withdrew = d.scheduler.withdraw(gone)
        #expect(withdrew)
        _ = d.scheduler.handlersReturned()
        d.finish(w0)
        #expect(d.runNames == [["w1", "w2"]])
        d.finishRun(["w1", "w2"])
        #expect(d.started.last == "r")
        d.finish(d.op(named: "r"))
        // w3 is followed by a write that may not join: it goes alone, and so does that one.
        #expect(d.started.last == "w3" && d.runs.count == 1)
        d.finish(d.op(named: "w3"))
        #expect(d.started.last == "odd" && d.runs.count == 1)
        d.finish(d.op(named: "odd"))
        #expect(d.runs.last?.names == ["w4", "w5"])
        d.finishRun(["w4", "w5"])
        #expect(d.scheduler.running == 0 && d.scheduler.queued == 0 && d.scheduler.handlersOutstanding == 0)
    }

    @Test("direct I/O: whole-block stream writes queued behind a running one are admitted where it will end, and coalesce")
    func coalescedDirect() {
        var d = Driver()
        d.host.directMode = true
        d.host.block = 4096
        let w0 = d.stream("w0", write: true, pipelinable: true, length: 4096)
        d.stream("w1", write: true, pipelinable: true, length: 4096)
        d.stream("w2", write: true, pipelinable: true, length: 8192)
        // A partial block: it must run alone, once everything before it ended.
        d.stream("part", write: true, pipelinable: false, length: 100)
        d.random("x")
        #expect(d.started == ["w0"])
        d.host.position = 4096
        d.finish(w0)
        #expect(d.runNames == [["w1", "w2"]] && d.runOffsets == [4096])
        #expect(!d.scheduler.exclusiveRunning)
        d.host.position = 16384
        d.finishRun(["w1", "w2"])
        #expect(d.started.suffix(1) == ["part"] && d.scheduler.exclusiveRunning)
        d.finish(d.op(named: "part"))
        #expect(d.started.last == "x")
    }

    @Test("a run that stopped short forgets where the writes behind it would start (direct I/O asks the file again)")
    func coalescedShortRun() {
        var d = Driver()
        d.host.directMode = true
        d.host.block = 4096
        let w0 = d.stream("w0", write: true, pipelinable: true, length: 4096)
        d.stream("w1", write: true, pipelinable: true, length: 4096)
        d.stream("w2", write: true, pipelinable: true, length: 4096)
        d.host.position = 4096
        d.finish(w0)
        #expect(d.runNames == [["w1", "w2"]])
        // Admitted while the run is out, at its projected end.
        d.stream("w3", write: true, pipelinable: true, length: 4096)
        #expect(!d.scheduler.exclusiveRunning)
        // The run stopped after 100 bytes: w4's start is unknown, it waits to run alone.
        d.finishRun(["w1", "w2"], intact: false, written: 100)
        #expect(d.host.position == 4196)
        #expect(d.started.last == "w3")
        d.stream("w4", write: true, pipelinable: true, length: 4096)
        #expect(d.started.last == "w3")
        d.finish(d.op(named: "w3"))
        #expect(d.started.last == "w4" && d.scheduler.exclusiveRunning)
    }

    /// Queues `w0` (alone on the free lane) and `count` writes of half a
    /// full run each behind it, then ends `w0` with the position at `start`.
    private static func pipelined(_ count: Int, start: Int64 = 100) -> Driver {
        var d = Driver()
        let w0 = d.stream("w0", write: true, pipelinable: true, length: 100)
        for i in 1...count { d.stream("a\(i)", write: true, pipelinable: true, length: Scheduler.maxCoalescedBytes / 2) }
        d.host.position = start
        d.finish(w0)
        return d
    }

    @Test("full runs go out behind each other, up to maxRunsInFlight, and are released in order whatever order they end in")
    func runsInFlightReleasedInOrder() {
        let half = Int64(Scheduler.maxCoalescedBytes / 2)
        let n = Scheduler.maxRunsInFlight
        #expect(n >= 2)
        var d = Self.pipelined(2 * n + 4)
        let names = (0..<(n + 2)).map { ["a\(2 * $0 + 1)", "a\(2 * $0 + 2)"] }
        let offsets = (0..<(n + 2)).map { 100 + 2 * half * Int64($0) }
        #expect(d.runNames == Array(names.prefix(n)))
        #expect(d.runOffsets == Array(offsets.prefix(n)))
        #expect(d.scheduler.runsInFlight == n)
        // The second ends first: it is held, nothing is released or starts.
        d.finishRun(names[1])
        #expect(d.released.isEmpty && d.runs.count == n)
        #expect(d.op(named: "a3").ticket.state == .running)
        // The first ends: both are released, in order, and two more runs go out.
        d.finishRun(names[0])
        #expect(d.released.map(\.run) == ["a1+a2", "a3+a4"])
        let positions: [Int64?] = [offsets[1], offsets[2]]
        #expect(d.released.map(\.position) == positions)
        #expect(d.runNames == names)
        #expect(d.runOffsets == offsets)
        for run in names[2...] { d.finishRun(run) }
        let end: Int64 = 100 + 2 * half * Int64(n + 2)
        #expect(d.released.last?.position == end)
        #expect(d.scheduler.running == 0 && d.scheduler.queued == 0 && d.scheduler.handlersOutstanding == 0)
        #expect(d.scheduler.runsInFlight == 0)
    }

    @Test("reads to the end of the file (length Int.max) wait in the lane beside writes without overflowing its counts")
    func endlessReadsInLane() {
        var d = Driver()
        let r1 = d.stream("r1", length: Int.max)
        d.stream("r2", length: Int.max)
        d.stream("w1", write: true, pipelinable: true, length: 100)
        d.stream("r3", length: Int.max)
        #expect(d.started == ["r1"])
        d.finish(r1)
        d.finish(d.op(named: "r2"))
        d.finish(d.op(named: "w1"))
        d.finish(d.op(named: "r3"))
        #expect(d.started == ["r1", "r2", "w1", "r3"])
        #expect(d.scheduler.running == 0 && d.scheduler.queued == 0 && d.scheduler.handlersOutstanding == 0)
    }

    @Test("behind a run in flight, writes that trickle in wait to fill a run; a barrier closes it and it goes out")
    func trickleWaitsForFullRun() {
        var d = Driver()
        let w0 = d.stream("w0", write: true, pipelinable: true, length: 100)
        for i in 1...3 { d.stream("s\(i)", write: true, pipelinable: true, length: 100) }
        d.host.position = 100
        d.finish(w0)
        #expect(d.runNames == [["s1", "s2", "s3"]])
        d.stream("s4", write: true, pipelinable: true, length: 100)
        d.stream("s5", write: true, pipelinable: true, length: 100)
        #expect(d.runs.count == 1 && d.started.count == 4)
        d.barrier("sync")
        #expect(d.runNames.last == ["s4", "s5"] && d.runOffsets.last == 400)
        #expect(!d.started.contains("sync"))
        d.finishRun(["s1", "s2", "s3"])
        #expect(!d.started.contains("sync"))
        d.finishRun(["s4", "s5"])
        #expect(d.started.last == "sync" && d.host.position == 600)
    }

    @Test("a run that stops short ends the pipelining; the runs behind it report what they wrote, where they wrote it")
    func shortRunInPipeline() {
        let half = Int64(Scheduler.maxCoalescedBytes / 2)
        let n = Scheduler.maxRunsInFlight
        #expect(n >= 4)
        var d = Self.pipelined(2 * n + 2)
        let names = (0...n).map { ["a\(2 * $0 + 1)", "a\(2 * $0 + 2)"] }
        let ends = (0...n).map { 100 + 2 * half * Int64($0 + 1) }
        #expect(d.runs.count == n)
        // The first stops inside its second write: released at once, the
        // position where its bytes end; no further run goes out.
        d.finishRun(names[0], intact: false, written: Int(half) + 10)
        let cut: Int64 = 100 + half + 10
        #expect(d.released.map(\.position) == [cut])
        #expect(d.runs.count == n && d.scheduler.runsInFlight == n - 1)
        // The others end last first: the last wrote nothing, the ones
        // between all they carried, the second nothing.
        d.finishRun(names[n - 1], intact: false, written: 0)
        for k in stride(from: n - 2, through: 2, by: -1) { d.finishRun(names[k]) }
        #expect(d.released.count == 1)
        d.finishRun(names[1], intact: false, written: 0)
        // The second wrote nothing: the position stays; those that wrote
        // move it where their bytes end; the last wrote nothing: it stays.
        #expect(d.released.map(\.run) == names.prefix(n).map { $0.joined(separator: "+") })
        let positions: [Int64?] = [cut, nil] + ends[2..<(n - 1)].map { $0 } + [nil]
        #expect(d.released.map(\.position) == positions)
        // All released: the rest goes out from the file position again.
        #expect(d.runNames.last == names[n] && d.runOffsets.last == ends[n - 2])
        d.finishRun(names[n])
        #expect(d.scheduler.running == 0 && d.scheduler.queued == 0 && d.scheduler.handlersOutstanding == 0)
    }

    @Test("in direct-I/O mode a write that needs a read-modify-write runs alone, like a barrier")
    func directExclusive() {
        var d = Driver()
        d.host.directMode = true
        d.host.exclusive = ["rmw"]
        let x = d.random("x")
        let rmw = d.random("rmw", write: true)
        d.random("y")
        #expect(d.started == ["x"])
        d.finish(x)
        #expect(d.started == ["x", "rmw"])
        #expect(rmw.ticket.ranExclusive && d.scheduler.exclusiveRunning)
        d.finish(rmw)
        #expect(d.started == ["x", "rmw", "y"])
    }

    @Test("scheduling cost is flat: 200,000 queued stream operations take about 10 times as long as 20,000")
    func linearCost() {
        func run(_ n: Int) -> UInt64 {
            let t0 = monotonicNanoseconds()
            var scheduler = Scheduler(channels: 1)
            let host = FakeHost()
            var ops: [FakeOp] = []
            ops.reserveCapacity(n)
            for i in 0..<n {
                let op = FakeOp("")
                ops.append(op)
                let ready = scheduler.enqueue(op, stream: true, lane: 0, isWrite: i % 2 == 0,
                                              pipelinable: false, length: 1, host: host)
                precondition(i == 0 ? ready.count == 1 : ready.isEmpty)
            }
            for op in ops {
                precondition(op.ticket.state == .running)
                _ = scheduler.operationFinishedIO(op, host: host)
                _ = scheduler.handlersReturned()
            }
            precondition(scheduler.queued == 0 && scheduler.running == 0)
            return monotonicNanoseconds() - t0
        }
        _ = run(1000)  // warm up
        let small = run(20_000)
        let large = run(200_000)
        // Linear: ~10x. The quadratic scheduler it replaces: ~100x.
        #expect(Double(large) / Double(max(small, 1)) < 35, "20k: \(small) ns, 200k: \(large) ns")
    }
}

extension Driver {
    var runNames: [[String]] { runs.map { $0.names } }
    var runOffsets: [Int64] { runs.map { $0.offset } }

    /// A started operation by name (tests keep few).
    fileprivate func op(named name: String) -> FakeOp {
        startedOps.first { $0.name == name }!
    }
}
