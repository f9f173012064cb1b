import SystemPackage
import RingIOBase
import RingIOData
import RingIOQueue
@_spi(Engine) import RingIOEngine

// The end of the I/O, the last handler calls, and the handler runner.
extension OperationProgress {
    // MARK: - the end of the I/O

    /// An operation that never reached an entry (closed or failed channel,
    /// empty range): its one and only handler call.
    mutating func finishWithoutIO(_ error: Errno?) -> Runner {
        defer { _invariantCheck() }
        enterFinishedWithoutIO(error)
        switch direction {
        case .read:
            return enqueue(Delivery(done: true, data: error == nil ? .empty : nil, error: error, bytes: 0))
        case .write:
            return enqueue(Delivery(done: true, data: error == nil ? nil : data, error: error, bytes: 0))
        }
    }

    /// The I/O is over (`Actions.finish`): what to do to the file before the
    /// last handler calls are queued (`queueFinalDeliveries`); `nil` if it
    /// was already finished. `ranOnEntry`: the operation started on its
    /// entry (a stream operation then moves the file position).
    mutating func finishIO(ranOnEntry: Bool) -> FinishStep? {
        defer { _invariantCheck() }
        guard !ioDone, let end else { return nil }
        enterFinished()
        let succeeded = end == .complete
        let endPosition = fileBase + Int64(ioHead) + Int64(transferred)
        // The position first: the last handler call may read it, or hand
        // the fd on (SEMANTICS.md, "Kinds").
        return FinishStep(truncate: succeeded ? restoreLength : nil,
                          position: isStream && positional && ranOnEntry && positionTaken ? endPosition : nil)
    }

    /// Queues the last handler calls. Returns how to run them, and whether
    /// the caller must now tell the entry that the I/O is over (after it ran
    /// or scheduled the runner): not while another thread is still putting
    /// this operation's runner on its queue (`runnerQueued` tells it then).
    /// `deferRunner`: the caller puts the runner on `queue` itself, in an
    /// order it keeps (`finishCoalesced`).
    mutating func queueFinalDeliveries(tellEntry: Bool, deferRunner: Bool = false) -> (Runner, tellEntry: Bool) {
        defer { _invariantCheck() }
        guard ioDone, let end else { illegal("queueFinalDeliveries") }
        var runner = Runner.none
        switch direction {
        case .read:
            let high = settings.deliverySize(positional: positional)
            var pieces = 0
            while !undelivered.isEmpty {
                let n = Swift.min(high, undelivered.count)
                let piece = undelivered.subrange(0..<n)
                undelivered = undelivered.subrange(n..<undelivered.count)
                pieces += 1
                let last = end == .complete && undelivered.isEmpty
                runner = runner.or(enqueue(Delivery(done: last, data: piece, error: nil, bytes: n), deferRunner: deferRunner))
            }
            switch end {
            case .complete:
                if pieces == 0 {
                    runner = runner.or(enqueue(Delivery(done: true, data: .empty, error: nil, bytes: 0),
                                               deferRunner: deferRunner))
                }
            case .endOfFile:
                runner = runner.or(enqueue(Delivery(done: true, data: .empty, error: nil, bytes: 0), deferRunner: deferRunner))
            case .failed(let error):
                runner = runner.or(enqueue(Delivery(done: true, data: nil, error: error, bytes: 0), deferRunner: deferRunner))
            }
        case .write:
            switch end {
            case .complete, .endOfFile:
                runner = enqueue(Delivery(done: true, data: nil, error: nil, bytes: 0), deferRunner: deferRunner)
            case .failed(let error):
                runner = enqueue(Delivery(done: true, data: data.subrange(transferred..<length), error: error, bytes: 0),
                                 deferRunner: deferRunner)
            }
        }
        // This caller schedules the runner it was handed before it tells the
        // entry: no other thread's notice is needed for that one.
        if runner == .schedule { _ = runnerOnQueue() }
        guard tellEntry else { return (runner, false) }
        return (runner, !deferEntryNotice())
    }

    /// The runner a transition asked for (`Runner.schedule`) is on the
    /// queue: returns whether the caller must now tell the entry the I/O is
    /// over (a `finishIO` on another thread left that to it).
    mutating func runnerQueued() -> Bool {
        defer { _invariantCheck() }
        return runnerOnQueue()
    }

    // MARK: - coalesced writes

    /// The entry put this write in a coalesced `pwritev`: false if it was
    /// stopped first (it is left out, and reports all its bytes unwritten).
    mutating func beginCoalesced() -> Bool {
        defer { _invariantCheck() }
        enterCoalesced()
        positional = true
        return !stopped
    }

    /// This write's share of its coalesced `pwritev` (`written` bytes, then
    /// `error` if it stopped short): ends its I/O and queues its last handler
    /// call. Returns whether the caller must run it (the caller puts it on
    /// `queue`, or runs it, in the order of the run).
    mutating func finishCoalesced(written: Int, error: Errno?) -> Bool {
        defer { _invariantCheck() }
        enterFinishedCoalesced(error.map { .failed($0) } ?? .complete)
        transferred = written
        return queueFinalDeliveries(tellEntry: false, deferRunner: true).0 != .none
    }

    // MARK: - the handler runner: on `queue`, one call at a time, in order

    /// Adds a delivery; says how the runner must be started, if it must.
    ///
    /// A runner that must go on `queue` is put there by the caller of the
    /// transition as soon as it releases the lock, and before anything the
    /// delivery lets happen (the entry hearing that the I/O is over, and
    /// starting the next operation whose runner goes on the same queue).
    mutating func enqueue(_ delivery: Delivery, deferRunner: Bool = false) -> Runner {
        deliveries.append(delivery)
        queuedBytes += delivery.bytes
        if runnerActive { return .none }
        runnerActive = true
        if options.inline || deferRunner { return .runHere }
        runnerScheduled()
        return .schedule
    }

    /// The runner's next handler call; `nil`: none left, the runner stops.
    mutating func nextDelivery() -> Delivery? {
        defer { _invariantCheck() }
        guard let delivery = deliveries.popFirst() else {
            runnerActive = false
            return nil
        }
        return delivery
    }

    /// A handler call returned: its bytes are handled (unless the consumer
    /// releases them itself), and reading may go on. Returns the slots opened.
    mutating func handlerReturned(_ delivery: Delivery, host: some OperationProgressHost<Payload>) -> Range<Int> {
        defer { _invariantCheck() }
        if !options.manualCredit {
            queuedBytes -= delivery.bytes
            handledBytes += delivery.bytes
        }
        return delivery.done ? nextSlotID..<nextSlotID : issue(host: host)
    }

    /// The consumer took `bytes` of what was delivered (`manualCredit`):
    /// reading may go on. Returns the slots opened.
    mutating func release(_ bytes: Int, host: some OperationProgressHost<Payload>) -> Range<Int> {
        defer { _invariantCheck() }
        queuedBytes -= bytes
        handledBytes += bytes
        return issue(host: host)
    }
}
