#if canImport(Glibc)
import Glibc
#endif
import Testing
@testable import RingIO
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
    func filePosition() -> Int64? { position }
    func needsExclusiveRun(_ operation: FakeOp, streamPosition: Int64?) -> Bool {
        exclusive.contains(operation.name)
    }
}

private typealias Scheduler = EntryScheduler<FakeOp, String, String>

/// Drives an `EntryScheduler` the way `FDEntry` does, recording what starts.
private struct Driver {
    var scheduler = Scheduler(channels: 1)
    var host = FakeHost()
    var started: [String] = []
    var startedOps: [FakeOp] = []
    var cleanups: [String] = []

    mutating func note(_ items: [Scheduler.Item]) {
        for item in items {
            switch item {
            case .operation(let op):
                started.append(op.name)
                startedOps.append(op)
            case .barrier(let name): started.append(name)
            }
        }
    }

    mutating func note(_ result: ([Scheduler.Item], [String]?)) {
        note(result.0)
        cleanups += result.1 ?? []
    }

    @discardableResult
    mutating func stream(_ name: String, lane: Int = 0, write: Bool = false, pipelinable: Bool = false,
                         length: Int = 4096) -> FakeOp {
        let op = FakeOp(name)
        note(scheduler.enqueue(op, stream: true, lane: lane, isWrite: write, pipelinable: pipelinable,
                               length: length, host: host))
        return op
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

    @Test("pipelined stream writes start together at consecutive offsets, at most maxPipelinedWrites at once")
    func pipelineOffsets() {
        var d = Driver()
        d.host.position = 1000
        let limit = Scheduler.maxPipelinedWrites
        var ops: [FakeOp] = []
        for i in 0..<(limit + 2) { ops.append(d.stream("w\(i)", write: true, pipelinable: true, length: 100)) }
        #expect(d.started.count == limit)
        for (i, op) in ops.prefix(limit).enumerated() {
            #expect(op.ticket.pipelineBase == 1000 + Int64(i * 100))
        }
        // The run is released in order: the second ending first releases nothing.
        let early = d.scheduler.pipelinedWriteEnded(ops[1], succeeded: true, endPosition: 1200)
        #expect(early.operations.isEmpty && early.position == nil)
        let both = d.scheduler.pipelinedWriteEnded(ops[0], succeeded: true, endPosition: 1100)
        #expect(both.operations.map { $0.0.name } == ["w0", "w1"])
        #expect(both.operations.allSatisfy { !$0.canceled })
        #expect(both.position == 1200)
        d.note(d.scheduler.operationFinishedIO(ops[0], host: d.host))
        d.note(d.scheduler.operationFinishedIO(ops[1], host: d.host))
        // Two released: two more join the run, where it will end.
        #expect(d.started.count == limit + 2)
        #expect(ops[limit].ticket.pipelineBase == 1000 + Int64(limit * 100))
    }

    @Test("a failed pipelined write cancels the later writes of its run; the position stays at its end")
    func pipelineFailure() {
        var d = Driver()
        let ops = (0..<4).map { d.stream("w\($0)", write: true, pipelinable: true, length: 100) }
        #expect(d.started.count == 4)
        _ = d.scheduler.pipelinedWriteEnded(ops[3], succeeded: true, endPosition: 400)
        _ = d.scheduler.pipelinedWriteEnded(ops[2], succeeded: true, endPosition: 300)
        let failed = d.scheduler.pipelinedWriteEnded(ops[1], succeeded: false, endPosition: 150)
        #expect(failed.operations.isEmpty)
        let release = d.scheduler.pipelinedWriteEnded(ops[0], succeeded: true, endPosition: 100)
        #expect(release.operations.map { $0.0.name } == ["w0", "w1", "w2", "w3"])
        #expect(release.operations.map { $0.canceled } == [false, false, true, true])
        #expect(release.position == 150)
    }

    @Test("a stream operation that is not a pipelinable write waits for the whole run, and the run for it")
    func pipelineAndOthers() {
        var d = Driver()
        let w0 = d.stream("w0", write: true, pipelinable: true)
        let r = d.stream("r")
        d.stream("w1", write: true, pipelinable: true)
        #expect(d.started == ["w0"])
        let release = d.scheduler.pipelinedWriteEnded(w0, succeeded: true, endPosition: 4096)
        #expect(release.operations.count == 1)
        d.finish(w0)
        #expect(d.started == ["w0", "r"])
        d.finish(r)
        #expect(d.started == ["w0", "r", "w1"])
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
    /// A started operation by name (tests keep few).
    fileprivate func op(named name: String) -> FakeOp {
        startedOps.first { $0.name == name }!
    }
}
