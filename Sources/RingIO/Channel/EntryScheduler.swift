import RingIOBase

/// What the scheduler of an fd entry keeps on each operation: fixed traits
/// taken when it is queued, and where it is in its life. Written only by the
/// `EntryScheduler` that queued the operation (under its entry's lock).
struct SchedulerTicket {
    enum State: Equatable {
        /// Queued, not started.
        case queued
        /// Withdrawn before it started (a stop): skipped when reached.
        case withdrawn
        /// Started; its I/O has not ended.
        case running
        /// Its I/O ended.
        case finished
    }

    var state = State.queued
    /// A stream operation (one at a time per lane, in order).
    var isStream = false
    /// Its lane: 0, or 1 for writes where the directions are independent.
    var lane = 0
    /// A write (asked whether it must run alone in direct-I/O mode).
    var isWrite = false
    /// A stream write that may join the running pipelined writes.
    var pipelinable = false
    /// Its length in bytes.
    var length = 0
    /// A pipelined write: the offset it was given (where the earlier writes
    /// of its run end).
    var pipelineBase: Int64?
    /// A pipelined write's I/O ended: whether it succeeded, and where it ended.
    var pipelineResult: (succeeded: Bool, endPosition: Int64)?
    /// It runs alone on its entry (a direct write's read-modify-write).
    var ranExclusive = false
}

/// An operation the scheduler can queue: it carries its own ticket.
protocol SchedulableOperation: AnyObject {
    /// Read and written only by the scheduler holding it, under its lock.
    var ticket: SchedulerTicket { get set }
}

/// What the scheduler asks of the file while it decides (the shell answers
/// with `lseek` and the direct-I/O alignment; tests answer from a model).
protocol EntrySchedulerHost<Operation> {
    associatedtype Operation
    /// The fd is in direct-I/O mode: writes may have to run alone.
    var directMode: Bool { get }
    /// The file position now (`lseek(fd, 0, SEEK_CUR)`), `nil` on error.
    func filePosition() -> Int64?
    /// In direct-I/O mode: whether the write `operation` must run alone,
    /// starting at `streamPosition` (`nil`: a stream write whose start is
    /// not known yet).
    func needsExclusiveRun(_ operation: Operation, streamPosition: Int64?) -> Bool
}

/// The scheduling rules of the channels of one fd, as a value: which
/// operations and barriers may start, in what order, and when the cleanup
/// handlers may run. Each transition returns what the caller must do.
///
/// ```
///  incoming (in submission order)          lanes (stream ops, admitted)
///  ┌──────┬─────────┬──────┐  admit  ┌─ lane 0: op A ─ op C ─▶ one at a time
///  │ op A │ barrier │ op D │ ──────▶ └─ lane 1: op B ─────────▶ (or a pipelined run)
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
/// A regular file's stream writes that `pipelinable` marks may start while
/// earlier ones of the run still run (up to `maxPipelinedWrites`), at the
/// offset where those will end; `pipelinedWriteEnded` releases them in order.
struct EntryScheduler<Operation: SchedulableOperation, Barrier, Cleanup> {
    enum Item {
        case operation(Operation)
        case barrier(Barrier)
    }

    /// How many stream writes of a regular file may run at once. (A log of
    /// 64 KiB records, all queued: 0.57 GiB/s with 4, 0.62 with 8, 0.83 with
    /// 16, 0.86 with 32; io_uring hands buffered ext4 writes to one io-wq
    /// worker per file, so deeper queues only hide per-request costs.)
    static var maxPipelinedWrites: Int { 16 }

    private var incoming = RingBuffer<Item>(initialCapacity: 4)
    private var lane0 = RingBuffer<Operation>(initialCapacity: 2)
    private var lane1 = RingBuffer<Operation>(initialCapacity: 2)
    /// Stream operations of each lane started whose I/O has not ended.
    private var occupants: (Int, Int) = (0, 0)
    /// Items queued and neither started nor withdrawn.
    private(set) var queued = 0
    /// Operations started whose I/O has not ended.
    private(set) var running = 0
    private(set) var barrierRunning = false
    private(set) var exclusiveRunning = false
    private(set) var channels = 0
    private(set) var handlersOutstanding = 0
    private(set) var finished = false
    private var cleanups: [Cleanup] = []
    /// The pipelined writes not yet released, in order; where the last will
    /// end; whether one failed; where the file position goes after them.
    private var run = RingBuffer<Operation>(initialCapacity: 2)
    private var runPosition: Int64 = 0
    private var runBroken = false
    private var positionAfterRun: Int64 = 0

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
                          pipelinable: Bool, length: Int, host: some EntrySchedulerHost<Operation>) -> [Item] {
        operation.ticket = SchedulerTicket(state: .queued, isStream: stream, lane: lane, isWrite: isWrite,
                                           pipelinable: pipelinable, length: length)
        handlersOutstanding += 1
        queued += 1
        incoming.append(.operation(operation))
        return pump(host)
    }

    /// Queues a barrier; returns what may start now.
    mutating func enqueueBarrier(_ barrier: Barrier, host: some EntrySchedulerHost<Operation>) -> [Item] {
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
        return true
    }

    /// An operation's I/O ended: returns what may start now, and the
    /// cleanups to run if that was the last thing the entry waited for.
    mutating func operationFinishedIO(_ operation: Operation,
                                      host: some EntrySchedulerHost<Operation>) -> ([Item], [Cleanup]?) {
        precondition(operation.ticket.state == .running, "an operation ended twice or never started")
        operation.ticket.state = .finished
        running -= 1
        if operation.ticket.ranExclusive { exclusiveRunning = false }
        if operation.ticket.isStream {
            if operation.ticket.lane == 0 { occupants.0 -= 1 } else { occupants.1 -= 1 }
        }
        let ready = pump(host)
        return (ready, ready.isEmpty ? finishIfIdle() : nil)
    }

    /// A barrier returned.
    mutating func barrierReturned(host: some EntrySchedulerHost<Operation>) -> ([Item], [Cleanup]?) {
        barrierRunning = false
        let ready = pump(host)
        return (ready, ready.isEmpty ? finishIfIdle() : nil)
    }

    /// An operation's last handler call returned.
    mutating func handlersReturned() -> [Cleanup]? {
        handlersOutstanding -= 1
        return finishIfIdle()
    }

    /// A channel closed; its cleanup waits for the others and every handler.
    mutating func channelClosed(_ cleanup: Cleanup) -> [Cleanup]? {
        channels -= 1
        cleanups.append(cleanup)
        return finishIfIdle()
    }

    /// The writes of a pipelined run that may report now, in order.
    struct Release {
        /// Each write, and whether it reports `.canceled` (an earlier write of
        /// its run failed) instead of its own result.
        var operations: [(Operation, canceled: Bool)] = []
        /// Where the file position must be before their last calls run.
        var position: Int64?
    }

    /// A pipelined write's I/O ended (it stays running until
    /// `operationFinishedIO`): the writes of the run whose predecessors have
    /// all ended are released in submission order.
    mutating func pipelinedWriteEnded(_ operation: Operation, succeeded: Bool, endPosition: Int64) -> Release {
        operation.ticket.pipelineResult = (succeeded, endPosition)
        var release = Release()
        while let head = run.first, let result = head.ticket.pipelineResult {
            _ = run.popFirst()
            if runBroken {
                release.operations.append((head, true))
            } else {
                release.operations.append((head, false))
                positionAfterRun = result.endPosition
                if !result.succeeded { runBroken = true }
            }
        }
        if !release.operations.isEmpty { release.position = positionAfterRun }
        if run.isEmpty { runBroken = false }
        return release
    }

    // MARK: - the pump

    private var lanesEmpty: Bool { lane0.isEmpty && lane1.isEmpty }

    private func occupied(_ lane: Int) -> Int { lane == 0 ? occupants.0 : occupants.1 }

    /// Admits and starts what the rules allow.
    private mutating func pump(_ host: some EntrySchedulerHost<Operation>) -> [Item] {
        var ready: [Item] = []
        if barrierRunning || exclusiveRunning { return ready }
        startLane(0, &ready, host)
        startLane(1, &ready, host)
        while let item = incoming.first {
            switch item {
            case .barrier:
                guard running == 0 && lanesEmpty && ready.isEmpty else { return ready }
                _ = incoming.popFirst()
                queued -= 1
                barrierRunning = true
                ready.append(item)
                return ready
            case .operation(let operation):
                let ticket = operation.ticket
                if ticket.state == .withdrawn {
                    _ = incoming.popFirst()
                    continue
                }
                if ticket.isWrite && host.directMode
                    && host.needsExclusiveRun(operation, streamPosition: streamPosition(of: ticket, host)) {
                    guard running == 0 && lanesEmpty && ready.isEmpty else { return ready }
                    _ = incoming.popFirst()
                    exclusiveRunning = true
                    operation.ticket.ranExclusive = true
                    begin(operation, &ready)
                    return ready
                }
                _ = incoming.popFirst()
                if ticket.isStream {
                    if ticket.lane == 0 { lane0.append(operation) } else { lane1.append(operation) }
                    startLane(ticket.lane, &ready, host)
                } else {
                    begin(operation, &ready)
                }
            }
        }
        return ready
    }

    /// Where a direct stream write would start if admitted now (`nil`: not
    /// known, it waits behind its lane).
    private func streamPosition(of ticket: SchedulerTicket, _ host: some EntrySchedulerHost<Operation>) -> Int64? {
        guard ticket.isStream else { return nil }
        let waiting = ticket.lane == 0 ? lane0 : lane1
        guard waiting.isEmpty else { return nil }
        if !run.isEmpty {
            return ticket.pipelinable && run.count < Self.maxPipelinedWrites ? runPosition : nil
        }
        return occupied(ticket.lane) == 0 ? host.filePosition() : nil
    }

    /// Starts the head of `lane` while it may: alone on a free lane, or
    /// joining the running pipelined writes.
    private mutating func startLane(_ lane: Int, _ ready: inout [Item], _ host: some EntrySchedulerHost<Operation>) {
        while let operation = lane == 0 ? lane0.first : lane1.first {
            let ticket = operation.ticket
            if ticket.state != .withdrawn {
                if !run.isEmpty && ticket.pipelinable && run.count < Self.maxPipelinedWrites {
                    // Join the running writes: start where they will end.
                    operation.ticket.pipelineBase = runPosition
                    runPosition &+= Int64(ticket.length)
                    run.append(operation)
                } else if occupied(lane) == 0 {
                    if ticket.pipelinable, let position = host.filePosition() {
                        operation.ticket.pipelineBase = position
                        runPosition = position &+ Int64(ticket.length)
                        positionAfterRun = position
                        run.append(operation)
                    }
                } else {
                    return
                }
            }
            if lane == 0 { _ = lane0.popFirst() } else { _ = lane1.popFirst() }
            if ticket.state != .withdrawn { begin(operation, &ready) }
        }
    }

    private mutating func begin(_ operation: Operation, _ ready: inout [Item]) {
        operation.ticket.state = .running
        queued -= 1
        running += 1
        if operation.ticket.isStream {
            if operation.ticket.lane == 0 { occupants.0 += 1 } else { occupants.1 += 1 }
        }
        ready.append(.operation(operation))
    }

    /// If no channel is open and nothing is left to run or return: the
    /// entry is finished, and these cleanups run.
    private mutating func finishIfIdle() -> [Cleanup]? {
        guard !finished, channels == 0, handlersOutstanding == 0, running == 0,
              queued == 0, !barrierRunning else { return nil }
        finished = true
        defer { cleanups = [] }
        return cleanups
    }
}
