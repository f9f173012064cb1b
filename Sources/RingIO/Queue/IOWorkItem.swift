import RingIOBase

/// A unit of work that can be cancelled before it starts, waited for, and
/// followed by other work.
///
/// An item runs at most once when a queue reaches it (`IOQueue.async(execute:)`,
/// `asyncAfter(deadline:execute:)`) or when ``perform()`` is called. An item
/// cancelled before it starts does not run its work; it still counts as
/// finished: its waits return and its notifications run. Cancelling a
/// running item does not interrupt it.
///
/// The corresponding libdispatch type is a block made by `dispatch_block_create`.
public final class IOWorkItem: Sendable {
    let work: @Sendable () -> Void
    /// Runs alone on a concurrent queue (`DISPATCH_BLOCK_BARRIER`).
    let barrier: Bool
    private let lock = ConditionLock()
    // Read and written only with `lock` held.
    private nonisolated(unsafe) var cancelled = false
    private nonisolated(unsafe) var finished = false
    private nonisolated(unsafe) var notifications: [(IOQueue, @Sendable () -> Void)] = []
    private nonisolated(unsafe) var waiters: [UnsafeContinuation<Void, Never>] = []

    /// Creates an item.
    ///
    /// - Parameters:
    ///   - barrier: Whether the item runs alone on a concurrent queue.
    ///   - work: The work.
    ///
    /// The corresponding libdispatch function is `dispatch_block_create`.
    public init(barrier: Bool = false, _ work: @escaping @Sendable () -> Void) {
        self.barrier = barrier
        self.work = work
    }

    /// Runs the item on the calling thread (unless it was cancelled), then
    /// wakes its waiters and submits its notifications.
    ///
    /// The corresponding libdispatch function is `dispatch_block_perform`.
    public func perform() {
        if !isCancelled { work() }
        let (ready, tasks) = lock.withLock { () -> ([(IOQueue, @Sendable () -> Void)], [UnsafeContinuation<Void, Never>]) in
            finished = true
            lock.broadcast()
            defer {
                notifications = []
                waiters = []
            }
            return (notifications, waiters)
        }
        for (queue, work) in ready { queue.async(work) }
        for task in tasks { task.resume() }
    }

    /// Keeps the item's work from running if it has not started.
    ///
    /// The corresponding libdispatch function is `dispatch_block_cancel`.
    public func cancel() {
        lock.withLock { cancelled = true }
    }

    /// Whether ``cancel()`` was called.
    ///
    /// The corresponding libdispatch function is `dispatch_block_testcancel`.
    public var isCancelled: Bool { lock.withLock { cancelled } }

    /// Blocks the calling thread until the item has finished (run, or been
    /// reached cancelled). An item never submitted is never finished.
    ///
    /// The corresponding libdispatch function is `dispatch_block_wait` with
    /// `DISPATCH_TIME_FOREVER`.
    public func wait() {
        lock.withLock {
            while !finished { lock.wait() }
        }
    }

    /// Waits until the item has finished, or `timeout` passes.
    ///
    /// - Parameter timeout: The longest wait.
    /// - Returns: `true` when the item finished, `false` on timeout.
    ///
    /// The corresponding libdispatch function is `dispatch_block_wait`.
    public func wait(timeout: Duration) -> Bool {
        let deadline = monotonicNanoseconds() &+ timeout.clampedNanoseconds
        return lock.withLock {
            while !finished {
                if !lock.wait(untilNanoseconds: deadline) { return finished }
            }
            return true
        }
    }

    /// Suspends the calling task, not its thread, until the item has finished.
    public func wait() async {
        await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
            let now = lock.withLock { () -> Bool in
                if finished { return true }
                waiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Runs `work` on `queue` once the item has finished: at once if it has.
    ///
    /// - Parameters:
    ///   - queue: Where `work` runs.
    ///   - work: The work.
    ///
    /// The corresponding libdispatch function is `dispatch_block_notify`.
    public func notify(queue: IOQueue, _ work: @escaping @Sendable () -> Void) {
        let now = lock.withLock { () -> Bool in
            if finished { return true }
            notifications.append((queue, work))
            return false
        }
        if now { queue.async(work) }
    }
}
