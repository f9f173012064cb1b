import SystemPackage
import RingIOBase
import RingIOData
@_spi(Engine) import RingIOEngine

// An operation's life as one state: the phases, the runner's hand-off to the
// entry, the transitions between them (each checks that it can happen), and
// the invariants checked after every transition in debug builds.
//
//   pending ──start──▶ running ──conclude──▶ ending(end) ──finishIO──▶ finished(end)
//      │  └─start (stopped)/canceledBeforeStart──▶ ending(.failed(.canceled))
//      ├──beginCoalesced──▶ coalesced ──finishCoalesced──▶ finished(end)
//      └──finishWithoutIO──────────────────────────────────▶ finished(end)
//
// `stopped` is not a phase: a stop may come in any phase, and the phases
// that follow keep it (see `OperationProgress.stopped`).
extension OperationProgress {
    /// Where an operation is in its life.
    enum Phase: Equatable {
        /// Made and queued on its entry; not started. (Stopped too: `stop`
        /// then withdraws it, `canceledBeforeStart`.)
        case pending
        /// Started on its entry: requests are issued and complete.
        case running
        /// The entry took it into a coalesced `pwritev` (`beginCoalesced`),
        /// or left it out of one, stopped: the run reports its result
        /// (`finishCoalesced`); a stop no longer reaches it.
        case coalesced
        /// How it ends is known; requests past the end may still be in
        /// flight, and `finishIO` has not run.
        case ending(End)
        /// Its I/O is over (`finishIO`, `finishWithoutIO` or
        /// `finishCoalesced`): only handler calls are left.
        case finished(End)
    }

    /// The hand-off between a transition that asked its caller to put the
    /// handler runner on `queue` (`Runner.schedule`) and the entry's notice
    /// that the I/O is over: the entry must not hear of the end before that
    /// runner is on the queue, or the next operation's calls could overtake.
    ///
    /// More than one runner can be on its way: thread A's runner, queued but
    /// not yet confirmed, may already have run dry when thread C's
    /// completion schedules another; A's confirmation must not count for C's.
    enum RunnerHandshake: Equatable {
        /// No runner is on its way to `queue` unconfirmed.
        case settled
        /// `count` runners were scheduled by transitions whose callers have
        /// not yet said they are queued (`runnerQueued`).
        case enqueuePending(count: Int)
        /// As `enqueuePending`, and `queueFinalDeliveries` left the entry's
        /// notice to the caller of the last `runnerQueued`.
        case entryNoticeDeferred(count: Int)
    }

    // MARK: - the phase, as the rules ask it

    /// It left `pending`: started, taken into a coalesced run, or ended
    /// without I/O.
    var started: Bool {
        if case .pending = phase { return false }
        return true
    }

    /// Its I/O is over: only handler calls are left.
    var ioDone: Bool {
        if case .finished = phase { return true }
        return false
    }

    /// How it ends, once known.
    var end: End? {
        switch phase {
        case .pending, .running, .coalesced: return nil
        case .ending(let end), .finished(let end): return end
        }
    }

    // MARK: - transitions of the phase (the events are in the other files)

    /// A running operation's end is known (`running` → `ending`).
    mutating func conclude(_ end: End) {
        guard case .running = phase else { illegal("conclude(\(end))") }
        phase = .ending(end)
    }

    /// `finishIO`: `ending` → `finished`.
    mutating func enterFinished() {
        guard case .ending(let end) = phase else { illegal("finishIO") }
        phase = .finished(end)
    }

    /// `finishWithoutIO`: a `pending` operation that never reached an entry
    /// ends at once.
    mutating func enterFinishedWithoutIO(_ error: Errno?) {
        guard case .pending = phase else { illegal("finishWithoutIO") }
        phase = .finished(error.map { .failed($0) } ?? .complete)
    }

    /// `beginCoalesced`: `pending` → `coalesced`.
    mutating func enterCoalesced() {
        guard case .pending = phase else { illegal("beginCoalesced") }
        phase = .coalesced
    }

    /// `finishCoalesced`: `coalesced` → `finished`.
    mutating func enterFinishedCoalesced(_ end: End) {
        guard case .coalesced = phase else { illegal("finishCoalesced") }
        phase = .finished(end)
    }

    /// `enqueue` asked its caller to put a runner on `queue`.
    mutating func runnerScheduled() {
        switch handshake {
        case .settled: handshake = .enqueuePending(count: 1)
        case .enqueuePending(let count): handshake = .enqueuePending(count: count + 1)
        case .entryNoticeDeferred: illegal("a runner scheduled after the last handler call was queued")
        }
    }

    /// A runner asked for is on `queue`: returns whether the entry's notice,
    /// deferred until then, is now due.
    mutating func runnerOnQueue() -> Bool {
        switch handshake {
        case .settled:
            illegal("runnerQueued with no runner scheduled")
        case .enqueuePending(let count):
            handshake = count == 1 ? .settled : .enqueuePending(count: count - 1)
            return false
        case .entryNoticeDeferred(let count):
            handshake = count == 1 ? .settled : .entryNoticeDeferred(count: count - 1)
            return count == 1
        }
    }

    /// `queueFinalDeliveries`: the entry must hear of the end only once
    /// every runner asked for is on `queue`. Returns whether it must wait.
    mutating func deferEntryNotice() -> Bool {
        guard ioDone else { illegal("defer the entry's notice") }
        guard case .enqueuePending(let count) = handshake else { return false }
        handshake = .entryNoticeDeferred(count: count)
        return true
    }

    /// A transition that cannot happen in this phase: a bug in the shell or
    /// the entry, never bad input. Stops the process, in release builds too
    /// (going on would deliver wrong handler calls or lose a completion).
    func illegal(_ event: String, file: StaticString = #fileID, line: UInt = #line) -> Never {
        fatalError("OperationProgress: \(event) in phase \(phase) (stopped: \(stopped))", file: file, line: line)
    }

    // MARK: - invariants

    /// Checks what must hold between transitions; called after each one.
    /// Debug builds only: a release build compiles it to nothing.
    @inline(__always)
    func _invariantCheck() {
        #if DEBUG
        _checkInvariants()
        #endif
    }

    #if DEBUG
    func _checkInvariants() {
        precondition(inFlight >= 0, "requests in flight: \(inFlight)")
        precondition(transferred >= 0 && transferred <= length, "transferred \(transferred) of \(length)")
        precondition(issued >= 0 && nextSlotID >= slots.count, "issued \(issued), slot ids \(nextSlotID), open \(slots.count)")
        precondition(queuedBytes >= 0 && handledBytes >= 0, "queued \(queuedBytes), handled \(handledBytes)")
        precondition(runnerActive || deliveries.isEmpty, "deliveries queued with no runner")
        switch handshake {
        case .settled: break
        case .enqueuePending(let count): precondition(count > 0, "\(count) runners pending")
        case .entryNoticeDeferred(let count): precondition(count > 0 && ioDone, "notice deferred, \(count) runners pending")
        }
        switch phase {
        case .pending:
            precondition(slots.isEmpty && inFlight == 0 && issued == 0 && transferred == 0, "a pending operation did I/O")
        case .running:
            precondition(slots.count <= inFlightLimit, "\(slots.count) slots open, limit \(inFlightLimit)")
            precondition(requestSize > 0 && direct.map { requestSize % $0.offset == 0 } ?? true,
                         "request size \(requestSize) with alignment \(String(describing: direct))")
            // Each open slot not yet complete has exactly one request (or
            // poll) in flight; a complete one waits for its turn with none.
            var waiting = 0
            for i in 0..<slots.count where !slots[offset: i].complete { waiting += 1 }
            precondition(inFlight == waiting, "\(inFlight) requests in flight for \(waiting) open slots")
        case .coalesced:
            precondition(slots.isEmpty && inFlight == 0, "a coalesced write has requests of its own")
        case .ending:
            precondition(slots.isEmpty, "slots still open past the end")
        case .finished:
            precondition(slots.isEmpty && inFlight == 0, "finished with \(inFlight) requests in flight")
        }
    }
    #endif
}
