import RingIOBase
import RingIOQueue
import RingIOData
/// Something that waits for read-buffer bytes (a channel operation).
package protocol ReadBudgetWaiter: AnyObject, Sendable {
    /// `bytes` of the budget are now this waiter's: it must use them for
    /// the buffer it asked them for, or `give` them back. Called on the
    /// budget's queue, with no lock held.
    func readBudgetGranted(_ bytes: Int)
}

/// An engine's cap on the bytes of read buffers its channels hold: taken
/// before a read's buffer is allocated, given back when the read's bytes
/// are handed on (the buffer becomes a chunk of what the operation
/// delivers) or the buffer is freed unused (a cancelled read).
///
/// Without it every read that starts allocates its buffer at once, whether
/// the ring can take its request now or it waits in the engine's backlog
/// for thousands of others: 50,000 random reads queued at once held up to
/// 7,500 buffers and peaked at 400 MiB of RSS. With it, a read whose
/// buffer does not fit waits here, holding no buffer, in a FIFO (O(1) per
/// waiter; a stopped operation withdraws at once, letting go of itself, and
/// its place is skipped), and is granted its bytes in order as others give theirs
/// back. Reads never wait on a consumer: the bytes go back as soon as the
/// read completes in order, whether or not a handler has run, so no
/// handler, however slow, can hold the budget. Only reads that complete on
/// their own take from it (files, block devices): a pipe or socket read
/// may wait for its peer forever, and idle ones must not starve the rest
/// (each of those holds one buffer of up to 1 MiB, as before).
package final class ReadBudget: Sendable {
    /// The default cap per engine. A 1 MiB request in flight per 1 MiB:
    /// 32 reads of a 1 MiB chunk, or hundreds of small ones, are more than
    /// a device or the page cache needs to stay busy.
    package static let defaultLimit = 32 * 1024 * 1024

    package let limit: Int
    private let queue: IOQueue

    /// A place in the queue.
    // @unchecked: `waiter` is read and written only with the budget's lock held.
    package final class Ticket: @unchecked Sendable {
        fileprivate var waiter: (any ReadBudgetWaiter)?
        fileprivate let bytes: Int
        fileprivate init(waiter: any ReadBudgetWaiter, bytes: Int) {
            self.waiter = waiter
            self.bytes = bytes
        }
    }

    package enum Outcome {
        /// The bytes are the caller's.
        case taken
        /// The caller waits: `readBudgetGranted` comes later, unless it
        /// withdraws the ticket first.
        case queued(Ticket)
    }

    private struct State {
        var inUse = 0
        var waiters = RingBuffer<Ticket>(initialCapacity: 16)
        var drainScheduled = false
        /// The most bytes taken at once (for tests).
        var peak = 0
    }
    private let state = Locked(State())

    /// `queue`: where granted waiters are called (the engine's queue).
    init(limit: Int, queue: IOQueue) {
        self.limit = Swift.max(limit, 1)
        self.queue = queue
    }

    /// Takes `bytes` if they fit and nobody waits before; otherwise queues
    /// `waiter`, which `readBudgetGranted` calls once its turn comes and the
    /// bytes fit. A request larger than the cap fits when nothing else is taken.
    package func take(_ bytes: Int, orQueue waiter: any ReadBudgetWaiter) -> Outcome {
        let (outcome, schedule) = state.withLock { s -> (Outcome, Bool) in
            while let head = s.waiters.first, head.waiter == nil { _ = s.waiters.popFirst() }
            if s.waiters.isEmpty && Self.fits(bytes, inUse: s.inUse, limit: limit) {
                s.inUse += bytes
                s.peak = Swift.max(s.peak, s.inUse)
                return (.taken, false)
            }
            let ticket = Ticket(waiter: waiter, bytes: bytes)
            s.waiters.append(ticket)
            // Normally a read in flight gives bytes back later and that
            // grants the head; if nothing is taken, nothing will be given.
            guard !s.drainScheduled, let head = s.waiters.first,
                  Self.fits(head.bytes, inUse: s.inUse, limit: limit) else { return (.queued(ticket), false) }
            s.drainScheduled = true
            return (.queued(ticket), true)
        }
        if schedule { queue.async { [self] in drain() } }
        return outcome
    }

    /// The waiter no longer wants its bytes (it was stopped): it is let go
    /// of at once; its place is skipped. No effect once granted.
    package func withdraw(_ ticket: Ticket) {
        let waiter = state.withLock { _ -> (any ReadBudgetWaiter)? in
            defer { ticket.waiter = nil }
            return ticket.waiter
        }
        _ = waiter  // released here, outside the lock
    }

    /// Gives back bytes taken or granted. Never calls a waiter here (the
    /// caller may hold an operation's lock): grants go out on `queue`.
    package func give(_ bytes: Int) {
        guard bytes > 0 else { return }
        let schedule = state.withLock { s -> Bool in
            s.inUse -= bytes
            guard !s.drainScheduled, !s.waiters.isEmpty else { return false }
            s.drainScheduled = true
            return true
        }
        if schedule { queue.async { [self] in drain() } }
    }

    /// Grants the waiters at the head of the queue their bytes, in order,
    /// while they fit; skips the ones that are gone.
    private func drain() {
        while true {
            let next = state.withLock { s -> (any ReadBudgetWaiter, Int)? in
                while let head = s.waiters.first {
                    guard let waiter = head.waiter else {
                        _ = s.waiters.popFirst()
                        continue
                    }
                    guard Self.fits(head.bytes, inUse: s.inUse, limit: limit) else { break }
                    _ = s.waiters.popFirst()
                    head.waiter = nil
                    s.inUse += head.bytes
                    s.peak = Swift.max(s.peak, s.inUse)
                    return (waiter, head.bytes)
                }
                s.drainScheduled = false
                return nil
            }
            guard let (waiter, bytes) = next else { return }
            waiter.readBudgetGranted(bytes)
        }
    }

    private static func fits(_ bytes: Int, inUse: Int, limit: Int) -> Bool {
        inUse == 0 || inUse + bytes <= limit
    }

    /// Bytes taken now, the most taken at once, and waiters queued (tests).
    package var statistics: (inUse: Int, peak: Int, waiting: Int) {
        state.withLock { ($0.inUse, $0.peak, $0.waiters.count) }
    }
}
