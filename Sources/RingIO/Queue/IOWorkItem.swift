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
    private let completion = Completion()
    // Read and written only with `completion.lock` held.
    private nonisolated(unsafe) var cancelled = false
    private nonisolated(unsafe) var finished = false

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
        completion.lock.withLock { () -> Completion.Released in
            finished = true
            return completion.finishLocked()
        }.run()
    }

    /// Keeps the item's work from running if it has not started.
    ///
    /// The corresponding libdispatch function is `dispatch_block_cancel`.
    public func cancel() {
        completion.lock.withLock { cancelled = true }
    }

    /// Whether ``cancel()`` was called.
    ///
    /// The corresponding libdispatch function is `dispatch_block_testcancel`.
    public var isCancelled: Bool { completion.lock.withLock { cancelled } }

    /// Blocks the calling thread until the item has finished (run, or been
    /// reached cancelled). An item never submitted is never finished.
    ///
    /// The corresponding libdispatch function is `dispatch_block_wait` with
    /// `DISPATCH_TIME_FOREVER`.
    public func wait() {
        completion.wait { finished }
    }

    /// Waits until the item has finished, or `timeout` passes.
    ///
    /// - Parameter timeout: The longest wait.
    /// - Returns: `true` when the item finished, `false` on timeout.
    ///
    /// The corresponding libdispatch function is `dispatch_block_wait`.
    public func wait(timeout: Duration) -> Bool {
        completion.wait(until: { finished }, timeout: timeout)
    }

    /// Suspends the calling task, not its thread, until the item has finished.
    public func wait() async {
        await completion.wait { finished }
    }

    /// Runs `work` on `queue` once the item has finished: at once if it has.
    ///
    /// - Parameters:
    ///   - queue: Where `work` runs.
    ///   - work: The work.
    ///
    /// The corresponding libdispatch function is `dispatch_block_notify`.
    public func notify(queue: IOQueue, _ work: @escaping @Sendable () -> Void) {
        completion.notify(queue: queue, work) { finished }
    }
}
