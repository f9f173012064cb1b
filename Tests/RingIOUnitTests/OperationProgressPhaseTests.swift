#if canImport(Glibc)
import Glibc
#endif
import SystemPackage
import Testing
import RingIOTestSupport
@testable import RingIO
@testable import RingIOChannel
@testable import RingIOData

/// A slot's buffer: zeros.
private struct ZeroSlot: ProgressPayload {
    func chunk(range: Range<Int>) -> DataChunk { DataChunk([UInt8](repeating: 0, count: range.count)) }
}

/// A file at position 0 whose slots are always granted.
private struct PlainHost: OperationProgressHost {
    func filePosition() -> Result<Int64, Errno> { .success(0) }
    func fileLength() -> Int64? { nil }
    func makeSlot(_ slot: NewSlot) -> ZeroSlot? { ZeroSlot() }
}

private typealias Progress = OperationProgress<ZeroSlot>

private func progress(_ direction: OperationDirection, stream: Bool = false, length: Int = 4096,
                      settings: ChannelSettings = ChannelSettings()) -> Progress {
    Progress(direction: direction, isStream: stream, settings: settings, options: OperationOptions(),
             offset: 0, length: length, data: DataChunk([UInt8](repeating: 1, count: direction == .write ? length : 0)))
}

/// Finishes the I/O and runs every handler call; returns how many ran.
private func finishAndDrain(_ p: inout Progress) -> Int {
    if p.finishIO(ranOnEntry: true) != nil { _ = p.queueFinalDeliveries(tellEntry: true) }
    var calls = 0
    while let delivery = p.nextDelivery() {
        calls += 1
        _ = p.handlerReturned(delivery, host: PlainHost())
    }
    return calls
}

@Suite("OperationProgress: the phase, the runner's hand-off and the invariants")
struct OperationProgressPhaseTests {
    @Test("a read goes pending → running → ending → finished, and the old flags follow the phase")
    func readLife() {
        var p = progress(.read, length: 8192)
        #expect(p.phase == .pending && !p.started && !p.ioDone && p.end == nil)
        let actions = p.start(.init(), host: PlainHost())
        #expect(p.phase == .running && p.started)
        #expect(actions.fresh == 0..<1, "one request of the (capped) request size")
        let done = p.completed(0, 8192, host: PlainHost())
        #expect(done.finish)
        #expect(p.phase == .ending(.complete), "the end is known; finishIO has not run")
        #expect(finishAndDrain(&p) == 1)
        #expect(p.phase == .finished(.complete) && p.ioDone)
        let late = p.stop()
        #expect(late == .none, "a stop after the end does nothing")
    }

    @Test("stop before start: pending (stopped) → withdrawn → ending(ECANCELED); a start that races the withdrawal ends the same way")
    func stopBeforeStart() {
        var p = progress(.read)
        let first = p.stop()
        #expect(first == .withdraw)
        #expect(p.phase == .pending && p.stopped)
        p.canceledBeforeStart()
        #expect(p.phase == .ending(.failed(.canceled)))
        #expect(finishAndDrain(&p) == 1)
        #expect(p.phase == .finished(.failed(.canceled)))

        // The entry started it before the withdrawal reached it.
        var raced = progress(.read)
        let withdraw = raced.stop()
        #expect(withdraw == .withdraw)
        let actions = raced.start(.init(), host: PlainHost())
        #expect(actions.finish && actions.fresh.isEmpty)
        #expect(raced.phase == .ending(.failed(.canceled)))
    }

    @Test("a stop while running is remembered to the end; nothing is issued after it")
    func stopWhileRunning() {
        var settings = ChannelSettings()
        settings.high = 4096
        var p = progress(.read, length: 8 * 4096, settings: settings)
        _ = p.start(.init(), host: PlainHost())
        #expect(p.inFlight == Progress.maxInFlight)
        let cancel = p.stop()
        #expect(cancel == .cancelInFlight)
        #expect(p.phase == .running && p.stopped)
        for id in 0..<Progress.maxInFlight { _ = p.completed(id, -ECANCELED, host: PlainHost()) }
        #expect(p.phase == .ending(.failed(.canceled)))
        #expect(p.inFlight == 0)
        _ = finishAndDrain(&p)
        #expect(p.phase == .finished(.failed(.canceled)) && p.stopped)
    }

    @Test("coalesced: a stop no longer reaches it; one stopped first is left out and reports all unwritten")
    func coalesced() {
        var p = progress(.write, stream: true)
        let included = p.beginCoalesced()
        #expect(included)
        #expect(p.phase == .coalesced && p.started)
        let stop = p.stop()
        #expect(stop == .none)
        let run = p.finishCoalesced(written: 4096, error: nil)
        #expect(run)
        #expect(p.phase == .finished(.complete) && p.transferred == 4096)

        var left = progress(.write, stream: true)
        let withdraw = left.stop()
        #expect(withdraw == .withdraw)
        let leftIncluded = left.beginCoalesced()
        #expect(!leftIncluded, "stopped first: left out of the run")
        #expect(left.phase == .coalesced)
        let leftRun = left.finishCoalesced(written: 0, error: .canceled)
        #expect(leftRun)
        #expect(left.phase == .finished(.failed(.canceled)))
        let last = left.nextDelivery()
        #expect(last?.done == true && last?.error == .canceled && last?.data?.count == 4096)
    }

    @Test("an operation that never reached an entry is finished at once, with its one call")
    func withoutIO() {
        var p = progress(.write)
        let runner = p.finishWithoutIO(.badFileDescriptor)
        #expect(runner == .schedule)
        #expect(p.phase == .finished(.failed(.badFileDescriptor)))
        let stop = p.stop()
        #expect(stop == .none)
        var empty = progress(.read, length: 0)
        _ = empty.finishWithoutIO(nil)
        #expect(empty.phase == .finished(.complete))
        let fresh = empty.issue(host: PlainHost())
        #expect(fresh.isEmpty, "nothing is issued once finished")
    }

    @Test("runner hand-off: settled → enqueuePending → entryNoticeDeferred → settled, and who tells the entry")
    func handshake() {
        var settings = ChannelSettings()
        settings.low = 1
        var p = progress(.read, stream: true, length: 100, settings: settings)
        _ = p.start(.init(positionalFile: false), host: PlainHost())
        #expect(p.handshake == .settled)
        let first = p.completed(0, 40, host: PlainHost())
        #expect(first.runner == .schedule)
        #expect(p.handshake == .enqueuePending(count: 1), "thread A has yet to put the runner on the queue")
        _ = p.completed(1, 0, host: PlainHost())
        _ = p.finishIO(ranOnEntry: true)
        let (_, tellEntry) = p.queueFinalDeliveries(tellEntry: true)
        #expect(!tellEntry)
        #expect(p.handshake == .entryNoticeDeferred(count: 1))
        let told = p.runnerQueued()
        #expect(told, "A tells the entry")
        #expect(p.handshake == .settled)
    }

    @Test("two runners scheduled by two threads, neither yet on the queue: the entry hears of the end after both are")
    func twoRunnersInFlight() {
        var settings = ChannelSettings()
        settings.low = 1
        var p = progress(.read, stream: true, length: 100, settings: settings)
        _ = p.start(.init(positionalFile: false), host: PlainHost())
        // Thread A: a completion schedules the runner; A has not queued it yet.
        let a = p.completed(0, 10, host: PlainHost())
        #expect(a.runner == .schedule)
        // The runner (queued by A just now) runs at once and drains everything.
        while let delivery = p.nextDelivery() { _ = p.handlerReturned(delivery, host: PlainHost()) }
        // Thread C: the next completion schedules a runner again; C has not queued it yet.
        let c = p.completed(1, 10, host: PlainHost())
        #expect(c.runner == .schedule)
        // A says its runner is queued: C's still is not.
        let toldByA = p.runnerQueued()
        #expect(!toldByA)
        // Thread D ends the operation.
        _ = p.completed(2, 0, host: PlainHost())
        _ = p.finishIO(ranOnEntry: true)
        let (_, tellEntry) = p.queueFinalDeliveries(tellEntry: true)
        #expect(!tellEntry, "C's runner is not on the queue yet: the next operation's calls could overtake it")
        let toldByC = p.runnerQueued()
        #expect(toldByC, "C tells the entry once its runner is queued")
    }

    @Test("the request size: the high-water mark, at least a page, at most a chunk; one copy for start and coalescing")
    func requestSize() {
        var settings = ChannelSettings()
        #expect(settings.requestSize == IOChannel.chunkSize)
        settings.high = 100
        #expect(settings.requestSize == 4096)
        settings.high = 64 * 1024
        #expect(settings.requestSize == 64 * 1024)
        var p = progress(.write, stream: true, length: 64 * 1024, settings: settings)
        _ = p.start(.init(), host: PlainHost())
        #expect(p.requestSize == settings.requestSize)
        #expect(progress(.write, stream: true, length: 64 * 1024, settings: settings).isPipelinableWrite(.init()))
        #expect(!progress(.write, stream: true, length: 64 * 1024 + 1, settings: settings).isPipelinableWrite(.init()),
                "more than one request: not coalesced")
    }

    @Test("isPipelinableWrite: stream writes on regular files only (O_APPEND too, but not in direct mode), no interval, whole blocks in direct mode")
    func pipelinable() {
        let file = Progress.StartContext()
        #expect(progress(.write, stream: true).isPipelinableWrite(file))
        #expect(!progress(.read, stream: true).isPipelinableWrite(file))
        #expect(!progress(.write, stream: false).isPipelinableWrite(file), "a random write")
        #expect(!progress(.write, stream: true).isPipelinableWrite(.init(positionalFile: false)), "a pipe")
        #expect(progress(.write, stream: true).isPipelinableWrite(.init(appendMode: true)), "an O_APPEND log")
        var timed = ChannelSettings()
        timed.interval = .milliseconds(5)
        #expect(!progress(.write, stream: true, settings: timed).isPipelinableWrite(file))
        let direct = DirectAlignment(memory: 512, offset: 4096)
        #expect(progress(.write, stream: true, length: 4096).isPipelinableWrite(.init(directAlignment: direct)))
        #expect(!progress(.write, stream: true, length: 100).isPipelinableWrite(.init(directAlignment: direct)))
        #expect(!progress(.write, stream: true, length: 4096).isPipelinableWrite(.init(appendMode: true,
                                                                                      directAlignment: direct)),
                "appending in direct mode: the end of the file need not be aligned")
    }

    @Test("needsExclusiveRun: a direct write that may read-modify-write a block")
    func exclusive() {
        let a = DirectAlignment(memory: 512, offset: 4096)
        #expect(!progress(.read, length: 100).needsExclusiveRun(a, streamPosition: nil, channelBase: 0))
        #expect(!progress(.write, length: 4096).needsExclusiveRun(a, streamPosition: nil, channelBase: 8192))
        #expect(progress(.write, length: 4096).needsExclusiveRun(a, streamPosition: nil, channelBase: 100))
        #expect(progress(.write, length: 100).needsExclusiveRun(a, streamPosition: nil, channelBase: 0))
        #expect(progress(.write, stream: true, length: 4096).needsExclusiveRun(a, streamPosition: nil, channelBase: 0),
                "a stream write whose position is not known yet")
        #expect(!progress(.write, stream: true, length: 4096).needsExclusiveRun(a, streamPosition: 4096, channelBase: 0))
    }

    // MARK: - transitions that cannot happen stop the process

    @Test("starting an operation twice stops the process")
    func startTwice() async {
        await #expect(processExitsWith: .failure) {
            var p = progress(.read)
            _ = p.start(.init(), host: PlainHost())
            _ = p.start(.init(), host: PlainHost())
        }
    }

    @Test("a coalesced run's result for a write that runs on its own stops the process")
    func finishCoalescedWhileRunning() async {
        await #expect(processExitsWith: .failure) {
            var p = progress(.write, stream: true)
            _ = p.start(.init(), host: PlainHost())
            _ = p.finishCoalesced(written: 4096, error: nil)
        }
    }

    @Test("withdrawing an operation that was not stopped stops the process")
    func withdrawUnstopped() async {
        await #expect(processExitsWith: .failure) {
            var p = progress(.read)
            p.canceledBeforeStart()
        }
    }

    @Test("saying a runner is queued when none was asked for stops the process")
    func runnerQueuedUnasked() async {
        await #expect(processExitsWith: .failure) {
            var p = progress(.read)
            _ = p.runnerQueued()
        }
    }

    #if DEBUG
    @Test("debug builds: a broken invariant (more requests in flight than open slots) stops the process")
    func brokenInvariant() async {
        await #expect(processExitsWith: .failure) {
            var p = progress(.read, length: 8192)
            _ = p.start(.init(), host: PlainHost())
            p.inFlight += 1
            _ = p.tick()
        }
    }
    #endif
}
