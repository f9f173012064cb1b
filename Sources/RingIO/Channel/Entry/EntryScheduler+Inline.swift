import RingIOBase
import RingIOData
import RingIOQueue
@_spi(Engine) import RingIOEngine

// The inline slot: an awaited read or write done on the caller's thread
// (ChannelCore+Inline.swift) counts as running in the scheduler, with no
// operation queued.
extension EntryScheduler {
    /// An inline operation: an awaited read or write carried out on the
    /// caller's thread, with no operation object, when it would start at
    /// once if queued (nothing waits in `incoming`, no barrier or
    /// exclusive write runs; a stream one also needs its lane empty and
    /// free). It then counts as running, so that what is queued behind it
    /// (a barrier, a stream operation of its lane) waits for
    /// `endInline`, and the entry's cleanup too. False: queue it instead.
    /// `handler`: a handler read, whose handler call counts as outstanding
    /// (as a queued operation's) until `handlersReturned`, or until
    /// `endInline` says it was never queued.
    mutating func beginInline(stream: Bool, lane: Int, isWrite: Bool, handler: Bool = false) -> Bool {
        guard !finished, !barrierRunning, !exclusiveRunning, incoming.isEmpty else { return false }
        if stream {
            guard occupied(lane) == 0, lane == 0 ? lane0.isEmpty : lane1.isEmpty else { return false }
            if lane == 0 { occupants.0 += 1 } else { occupants.1 += 1 }
            if !isWrite { streamReads += 1 }
        }
        running += 1
        if handler { handlersOutstanding += 1 }
        return true
    }

    /// The inline operation `beginInline` admitted ended: returns what may
    /// start now, and the cleanups to run if that was the last thing the
    /// entry waited for. `handlerDropped`: a handler read that `beginInline`
    /// counted queued no handler call after all (it goes the usual way).
    mutating func endInline(stream: Bool, lane: Int, isWrite: Bool, handlerDropped: Bool = false,
                            host: some EntrySchedulerHost<Operation>) -> (Ready, [Cleanup]?) {
        precondition(running > 0, "an inline operation ended that never began")
        running -= 1
        if handlerDropped { handlersOutstanding -= 1 }
        if stream {
            if lane == 0 { occupants.0 -= 1 } else { occupants.1 -= 1 }
            if occupants.0 == 0 && lane0.isEmpty { laneEnd = nil }
            if !isWrite { streamReads -= 1 }
        }
        // Nothing waits (the usual case of a read loop): nothing to pump.
        if incoming.isEmpty && lane0.isEmpty && lane1.isEmpty { return (Ready(), finishIfIdle()) }
        let ready = pump(host)
        return (ready, ready.isEmpty ? finishIfIdle() : nil)
    }
}
