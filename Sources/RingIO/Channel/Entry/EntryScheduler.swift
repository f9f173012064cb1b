import RingIOBase
import RingIOData
import RingIOQueue
@_spi(Engine) import RingIOEngine

/// The scheduling rules of the channels of one fd, as a value: which
/// operations and barriers may start, in what order, and when the cleanup
/// handlers may run. Each transition returns what the caller must do.
///
/// ```
///  incoming (in submission order)          lanes (stream ops, admitted)
///  ┌──────┬─────────┬──────┐  admit  ┌─ lane 0: op A ─ op C ─▶ one at a time
///  │ op A │ barrier │ op D │ ──────▶ └─ lane 1: op B ─────────▶ (or writes as one pwritev)
///  └──────┴─────────┴──────┘        random ops: start when admitted
/// ```
///
/// An item is admitted from `incoming` in order: a random operation starts,
/// a stream operation joins its lane's FIFO and starts once the lane is free.
/// Admission stops at a barrier (or at a direct write that must run alone)
/// until everything admitted before it has ended; then it runs alone, and
/// admission resumes once it is over. Every step costs O(1): each item is
/// admitted once, started once and ended once, whatever the queue length.
///
/// A regular file's stream writes that `pipelinable` marks and that are
/// queued one after the other when their lane frees go out together: one
/// `pwritev` at the file position (`Item.writes`), up to
/// `maxCoalescedRegions` iovecs and `maxCoalescedBytes`, and they end
/// together (`coalescedWritesEnded`). A lone one starts as any operation.
///
/// Up to `maxRunsInFlight` runs go out at once, each where the one before
/// ends (the kernel goes from one to the next without the ring thread), and
/// are released in that order, whatever order they end in:
///
/// ```
///   position ─▶ | run 1 (1 MiB) | run 2 (1 MiB) | run 3 ...    all in flight
///   run 2 ends first: held; run 1 ends: both released, each setting the position
/// ```
///
/// A further run goes out only when full (or closed by a write that cannot
/// join it, or a barrier): writes that trickle in wait for the next. A run
/// that stops short ends the pipelining until those in flight are released;
/// they report what they wrote at their own offsets (bytes that reached the
/// file are never reported unwritten), and one that wrote nothing leaves the
/// position where the short run left it. `Run`: the shell's run object.
struct EntryScheduler<Operation: SchedulableOperation, Barrier, Cleanup, Run> {
    enum Item {
        case operation(Operation)
        case barrier(Barrier)
        /// Stream writes to go out as one `pwritev` at `offset`, in order.
        case writes([Operation], offset: Int64)
    }
    /// What may start after a transition (one item inline: no allocation).
    typealias Ready = ReadyItems<Item>

    /// IOV_MAX: the most iovecs one `pwritev` takes.
    static var maxCoalescedRegions: Int { 1024 }
    /// The most bytes one coalesced `pwritev` carries (a lone write may be
    /// larger). Big enough that the per-request cost vanishes; small enough
    /// that the writes queued behind it wait little (measured on a 64 KiB
    /// log: runs of 1 MiB, eight in flight, beat 4 MiB, four in flight).
    static var maxCoalescedBytes: Int { 1 << 20 }
    /// The most runs of one lane in flight at once (8 MiB).
    static var maxRunsInFlight: Int { 8 }

    /// A run whose `pwritev` went out, until it is released.
    private struct RunInFlight {
        let operations: [Operation]
        let offset: Int64
        /// Once its `pwritev` ended: the shell's run, bytes written, all of them.
        var ended: (run: Run, written: Int, intact: Bool)?
    }

    /// A run released, in the order the runs went out, and where the file
    /// position goes (`nil`: leave it; it wrote nothing behind a short run).
    struct ReleasedRun {
        let run: Run
        let position: Int64?
    }

    /// What waits to be admitted, in submission order.
    // (Fields and methods without `private` are also the inline slot's:
    // EntryScheduler+Inline.swift.)
    enum Queued {
        case operation(Operation)
        case barrier(Barrier)
    }

    var incoming = RingBuffer<Queued>(initialCapacity: 4)
    var lane0 = RingBuffer<Operation>(initialCapacity: 2)
    var lane1 = RingBuffer<Operation>(initialCapacity: 2)
    /// Stream operations of each lane started whose I/O has not ended.
    var occupants: (Int, Int) = (0, 0)
    /// Items queued and neither started nor withdrawn.
    private(set) var queued = 0
    /// Operations started whose I/O has not ended.
    var running = 0
    private(set) var barrierRunning = false
    private(set) var exclusiveRunning = false
    private(set) var channels = 0
    var handlersOutstanding = 0
    /// Stream reads queued or running (a write of lane 0 queued now waits
    /// for them).
    var streamReads = 0
    private(set) var finished = false
    private var cleanups: [Cleanup] = []
    /// Where lane 0's stream writes admitted so far will leave the file
    /// position, while that is known without asking (they are all
    /// pipelinable writes, behind a running `pwritev`): the start of the
    /// next one, for the direct-I/O alignment check. `nil`: ask the host
    /// once the lane is free.
    var laneEnd: Int64?
    /// The runs of lane 0 in flight, in the order they went out.
    private var runs = RingBuffer<RunInFlight>(initialCapacity: 4)
    /// Lane 0's running operations that are in those runs.
    private var runMembers = 0
    /// Where the last run in flight ends: the offset of the next.
    private var runEnd: Int64?
    /// A run in flight stopped short: start no run until all are released.
    private var runBroken = false
    /// A run released since the runs in flight were last empty stopped short.
    private var releasedBroken = false
    /// Bytes and iovecs of the pipelinable writes waiting in lane 0, and the
    /// other operations there (withdrawn ones included): whether a full run
    /// waits there, in O(1).
    private var lane0Bytes = 0
    private var lane0Regions = 0
    private var lane0Blockers = 0

    init(channels: Int = 0) {
        self.channels = channels
    }

    // MARK: - transitions

    /// One more channel; false once the entry has finished.
    mutating func attachChannel() -> Bool {
        if finished { return false }
        channels += 1
        return true
    }

    /// Queues an operation; returns what may start now.
    mutating func enqueue(_ operation: Operation, stream: Bool, lane: Int, isWrite: Bool,
                          pipelinable: Bool, length: Int, regions: Int = 1,
                          host: some EntrySchedulerHost<Operation>) -> Ready {
        operation.ticket = SchedulerTicket(state: .queued, isStream: stream, lane: lane, isWrite: isWrite,
                                           pipelinable: pipelinable, length: length, regions: regions)
        handlersOutstanding += 1
        queued += 1
        if stream && !isWrite { streamReads += 1 }
        incoming.append(.operation(operation))
        return pump(host)
    }

    /// Queues a barrier; returns what may start now.
    mutating func enqueueBarrier(_ barrier: Barrier, host: some EntrySchedulerHost<Operation>) -> Ready {
        queued += 1
        incoming.append(.barrier(barrier))
        return pump(host)
    }

    /// Withdraws an operation that has not started (its handler still runs
    /// once, and `handlersReturned` follows); false if it has started.
    mutating func withdraw(_ operation: Operation) -> Bool {
        guard operation.ticket.state == .queued else { return false }
        operation.ticket.state = .withdrawn
        queued -= 1
        if operation.ticket.isStream && !operation.ticket.isWrite { streamReads -= 1 }
        return true
    }

    /// An operation's I/O ended: returns what may start now, and the
    /// cleanups to run if that was the last thing the entry waited for.
    mutating func operationFinishedIO(_ operation: Operation,
                                      host: some EntrySchedulerHost<Operation>) -> (Ready, [Cleanup]?) {
        end(operation)
        let ready = pump(host)
        return (ready, ready.isEmpty ? finishIfIdle() : nil)
    }

    /// The `pwritev` of the coalesced writes `operations` (an
    /// `Item.writes`, which the shell calls `run`) ended after `written`
    /// bytes; `intact`: it wrote every byte it carried (else the position is
    /// not where the writes admitted behind it expected). Returns the runs
    /// released, in the order they went out (none while an earlier run is
    /// still in flight). If any: the shell sets the file position each
    /// says, then calls `runsReleased` for what may start next.
    mutating func coalescedWritesEnded(_ run: Run, operations: [Operation], written: Int,
                                       intact: Bool) -> [ReleasedRun] {
        guard let first = operations.first,
              let index = (0..<runs.count).first(where: { runs[offset: $0].operations.first === first }),
              runs[offset: index].ended == nil else {
            preconditionFailure("a run ended that is not in flight")
        }
        runs[offset: index].ended = (run, written, intact)
        if !intact {
            runBroken = true
            runEnd = nil
            laneEnd = nil
        }
        var released: [ReleasedRun] = []
        while let head = runs.first, let ended = head.ended {
            _ = runs.popFirst()
            let moved = ended.intact || !releasedBroken || ended.written > 0
            if !ended.intact { releasedBroken = true }
            runMembers -= head.operations.count
            for operation in head.operations { end(operation) }
            released.append(ReleasedRun(run: ended.run, position: moved ? head.offset &+ Int64(ended.written) : nil))
        }
        if runs.isEmpty {
            runBroken = false
            releasedBroken = false
            runEnd = nil
        }
        return released
    }

    /// The shell set the positions of the runs `coalescedWritesEnded`
    /// released: returns what may start now, and the cleanups to run if
    /// that was the last thing the entry waited for.
    mutating func runsReleased(host: some EntrySchedulerHost<Operation>) -> (Ready, [Cleanup]?) {
        let ready = pump(host)
        return (ready, ready.isEmpty ? finishIfIdle() : nil)
    }

    /// Runs sent and not yet released (ended or not): for tests.
    var runsInFlight: Int { runs.count }

    private mutating func end(_ operation: Operation) {
        precondition(operation.ticket.state == .running, "an operation ended twice or never started")
        operation.ticket.state = .finished
        running -= 1
        if operation.ticket.ranExclusive { exclusiveRunning = false }
        if operation.ticket.isStream {
            if operation.ticket.lane == 0 { occupants.0 -= 1 } else { occupants.1 -= 1 }
            if occupants.0 == 0 && lane0.isEmpty { laneEnd = nil }
            if !operation.ticket.isWrite { streamReads -= 1 }
        }
    }

    /// Whether a stream write queued now on `lane` would wait for a stream
    /// read queued or running before it (reads go in lane 0).
    func streamReadAhead(lane: Int) -> Bool {
        lane == 0 && streamReads > 0
    }

    /// A barrier returned.
    mutating func barrierReturned(host: some EntrySchedulerHost<Operation>) -> (Ready, [Cleanup]?) {
        barrierRunning = false
        let ready = pump(host)
        return (ready, ready.isEmpty ? finishIfIdle() : nil)
    }

    /// An operation's last handler call returned.
    mutating func handlersReturned() -> [Cleanup]? {
        handlersOutstanding -= 1
        return finishIfIdle()
    }

    /// The entry's only channel lets go of it: if nothing is queued,
    /// running or left to return, the entry is finished (with no cleanup
    /// to run) and this returns true.
    mutating func releaseIfIdle() -> Bool {
        guard !finished, channels == 1, handlersOutstanding == 0, running == 0, queued == 0,
              !barrierRunning, cleanups.isEmpty else { return false }
        channels = 0
        finished = true
        return true
    }

    /// A channel closed; its cleanup waits for the others and every handler.
    mutating func channelClosed(_ cleanup: Cleanup) -> [Cleanup]? {
        channels -= 1
        cleanups.append(cleanup)
        return finishIfIdle()
    }

    // MARK: - the pump

    private var lanesEmpty: Bool { lane0.isEmpty && lane1.isEmpty }

    func occupied(_ lane: Int) -> Int { lane == 0 ? occupants.0 : occupants.1 }

    /// Admits and starts what the rules allow. Stream operations are all
    /// admitted to their lanes before the lanes start, so that writes queued
    /// together may go out together.
    mutating func pump(_ host: some EntrySchedulerHost<Operation>) -> Ready {
        var ready = Ready()
        if barrierRunning || exclusiveRunning { return ready }
        let admitted = admit(&ready, host)
        startLane(0, &ready, host)
        startLane(1, &ready, host)
        if admitted, let barrier = barrierReady(ready) { ready.append(barrier) }
        return ready
    }

    /// A barrier at the head of `incoming` that may start now (the caller
    /// started nothing, and nothing runs or waits in a lane).
    private mutating func barrierReady(_ ready: Ready) -> Item? {
        guard case .barrier(let barrier) = incoming.first, running == 0 && lanesEmpty && ready.isEmpty else {
            return nil
        }
        _ = incoming.popFirst()
        queued -= 1
        barrierRunning = true
        return .barrier(barrier)
    }

    /// Admits items from `incoming` in order: starts random operations and
    /// exclusive writes, queues stream operations in their lanes. Returns
    /// true when it stopped at a barrier (or nothing is left).
    private mutating func admit(_ ready: inout Ready, _ host: some EntrySchedulerHost<Operation>) -> Bool {
        while let item = incoming.first {
            switch item {
            case .barrier:
                return true
            case .operation(let operation):
                let ticket = operation.ticket
                if ticket.state == .withdrawn {
                    _ = incoming.popFirst()
                    continue
                }
                if ticket.isWrite && host.directMode
                    && host.needsExclusiveRun(operation, streamPosition: streamPosition(of: ticket, host)) {
                    guard running == 0 && lanesEmpty && ready.isEmpty else { return false }
                    _ = incoming.popFirst()
                    exclusiveRunning = true
                    operation.ticket.ranExclusive = true
                    begin(operation, &ready)
                    return false
                }
                _ = incoming.popFirst()
                if ticket.isStream {
                    if ticket.lane == 0 {
                        if !ticket.pipelinable {
                            laneEnd = nil
                        } else if let end = laneEnd {
                            laneEnd = end &+ Int64(ticket.length)
                        } else if host.directMode && lane0.isEmpty && occupants.0 == 0 {
                            // Where the writes admitted behind it will start.
                            laneEnd = host.filePosition().map { $0 &+ Int64(ticket.length) }
                        }
                        lane0.append(operation)
                        if ticket.pipelinable {  // (a read's length may be Int.max)
                            lane0Bytes += ticket.length
                            lane0Regions += ticket.regions
                        } else {
                            lane0Blockers += 1
                        }
                    } else {
                        lane1.append(operation)
                    }
                } else {
                    begin(operation, &ready)
                }
            }
        }
        return true
    }

    /// Where a direct stream write would start if admitted now (`nil`: not
    /// known, it waits behind its lane).
    private func streamPosition(of ticket: SchedulerTicket, _ host: some EntrySchedulerHost<Operation>) -> Int64? {
        guard ticket.isStream else { return nil }
        if ticket.lane == 0 && ticket.pipelinable, let laneEnd { return laneEnd }
        let waiting = ticket.lane == 0 ? lane0 : lane1
        guard waiting.isEmpty else { return nil }
        return occupied(ticket.lane) == 0 ? host.filePosition() : nil
    }

    private func head(_ lane: Int) -> Operation? { lane == 0 ? lane0.first : lane1.first }

    private mutating func popHead(_ lane: Int) {
        if lane == 0 {
            guard let operation = lane0.popFirst() else { return }
            if operation.ticket.pipelinable {
                lane0Bytes -= operation.ticket.length
                lane0Regions -= operation.ticket.regions
            } else {
                lane0Blockers -= 1
            }
        } else {
            _ = lane1.popFirst()
        }
    }

    /// Starts the head of `lane` once the lane is free: alone, or with the
    /// pipelinable writes queued right behind it as one `pwritev`; behind
    /// runs in flight, the next full run at where they end.
    private mutating func startLane(_ lane: Int, _ ready: inout Ready, _ host: some EntrySchedulerHost<Operation>) {
        while let operation = head(lane) {
            if operation.ticket.state == .withdrawn {
                popHead(lane)
                continue
            }
            if occupied(lane) > 0 {
                guard lane == 0, let end = runEnd, mayFollowRuns(operation, host) else { return }
                popHead(lane)
                startRun(operation, at: end, lane, &ready, host)
                continue
            }
            popHead(lane)
            guard operation.ticket.pipelinable, host.mayCoalesce(operation),
                  let next = nextCoalescable(lane, host),
                  operation.ticket.regions + next.ticket.regions <= Self.maxCoalescedRegions,
                  operation.ticket.length + next.ticket.length <= Self.maxCoalescedBytes,
                  let position = host.filePosition() else {
                begin(operation, &ready)
                continue
            }
            startRun(operation, at: position, lane, &ready, host)
        }
    }

    /// Whether lane 0's head `operation` may go out in a run behind the runs
    /// in flight: nothing else occupies the lane, none of them stopped
    /// short, there is room for one more, and the run it would head is full
    /// or closed (by an operation that cannot join it, or a barrier).
    private func mayFollowRuns(_ operation: Operation, _ host: some EntrySchedulerHost<Operation>) -> Bool {
        guard !runs.isEmpty, !runBroken, runs.count < (host.appendMode ? 1 : Self.maxRunsInFlight),
              occupants.0 == runMembers,
              operation.ticket.pipelinable, host.mayCoalesce(operation) else { return false }
        if lane0Bytes >= Self.maxCoalescedBytes || lane0Regions >= Self.maxCoalescedRegions || lane0Blockers > 0 {
            return true
        }
        if case .barrier = incoming.first { return true }
        return false
    }

    /// Starts `operation` (popped from `lane`) and the pipelinable writes
    /// right behind it that fit as one run at `position`.
    private mutating func startRun(_ operation: Operation, at position: Int64, _ lane: Int, _ ready: inout Ready,
                                   _ host: some EntrySchedulerHost<Operation>) {
        var batch = [operation]
        var bytes = operation.ticket.length
        var regions = operation.ticket.regions
        while let more = nextCoalescable(lane, host),
              regions + more.ticket.regions <= Self.maxCoalescedRegions,
              bytes + more.ticket.length <= Self.maxCoalescedBytes {
            popHead(lane)
            batch.append(more)
            bytes += more.ticket.length
            regions += more.ticket.regions
        }
        for write in batch { begin(write, nil) }
        if lane == 0 {
            runMembers += batch.count
            runEnd = position &+ Int64(bytes)
            if laneEnd == nil && lane0.isEmpty { laneEnd = runEnd }
        }
        runs.append(RunInFlight(operations: batch, offset: position))
        ready.append(.writes(batch, offset: position))
    }

    /// The head of `lane` (withdrawn operations dropped) if it may join a
    /// coalesced `pwritev`.
    private mutating func nextCoalescable(_ lane: Int, _ host: some EntrySchedulerHost<Operation>) -> Operation? {
        while let operation = head(lane), operation.ticket.state == .withdrawn { popHead(lane) }
        guard let operation = head(lane), operation.ticket.pipelinable, host.mayCoalesce(operation) else { return nil }
        return operation
    }

    private mutating func begin(_ operation: Operation, _ ready: inout Ready) {
        begin(operation, nil)
        ready.append(.operation(operation))
    }

    private mutating func begin(_ operation: Operation, _: Void?) {
        operation.ticket.state = .running
        queued -= 1
        running += 1
        if operation.ticket.isStream {
            if operation.ticket.lane == 0 { occupants.0 += 1 } else { occupants.1 += 1 }
        }
    }

    /// If no channel is open and nothing is left to run or return: the
    /// entry is finished, and these cleanups run.
    mutating func finishIfIdle() -> [Cleanup]? {
        guard !finished, channels == 0, handlersOutstanding == 0, running == 0,
              queued == 0, !barrierRunning else { return nil }
        finished = true
        defer { cleanups = [] }
        return cleanups
    }
}
