import RingIOBase

/// Tracks a set of work items and waits for, or is notified of, their end.
///
/// The corresponding libdispatch type is `dispatch_group_t`.
public final class IOGroup: Sendable {
    private let lock = ConditionLock()
    // Read and written only under `lock`: the count of entered, unfinished items
    // and the notifications waiting for the count to reach zero.
    private nonisolated(unsafe) var count = 0
    private nonisolated(unsafe) var notifications: [(IOQueue, @Sendable () -> Void)] = []
    // Read and written only under `lock`: tasks suspended in `wait() async`.
    private nonisolated(unsafe) var waiters: [UnsafeContinuation<Void, Never>] = []

    /// An empty group.
    ///
    /// The corresponding libdispatch function is `dispatch_group_create`.
    public init() {}

    /// Marks the start of one item.
    ///
    /// The corresponding libdispatch function is `dispatch_group_enter`.
    public func enter() {
        lock.withLock { count += 1 }
    }

    /// Marks the end of one item; at zero, waiters wake and notifications run.
    ///
    /// - Precondition: every `leave()` matches an earlier `enter()`.
    ///
    /// The corresponding libdispatch function is `dispatch_group_leave`.
    public func leave() {
        let (ready, tasks) = lock.withLock { () -> ([(IOQueue, @Sendable () -> Void)], [UnsafeContinuation<Void, Never>]) in
            precondition(count > 0, "IOGroup.leave() without a matching enter()")
            count -= 1
            guard count == 0 else { return ([], []) }
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

    /// Blocks the calling thread until every entered item has left.
    ///
    /// Do not call it from a task (it would hold one of Swift's few
    /// cooperative threads): `await wait()` there.
    ///
    /// The corresponding libdispatch function is `dispatch_group_wait` with
    /// `DISPATCH_TIME_FOREVER`.
    public func wait() {
        lock.withLock {
            while count > 0 { lock.wait() }
        }
    }

    /// Suspends the calling task until every entered item has left, without
    /// blocking a thread: the way to wait for handlers from `async` code
    /// (a `main.swift`, a test, an actor).
    ///
    /// ```swift
    /// let group = IOGroup()
    /// group.enter()
    /// IO.read(from: .standardInput, length: 4096, queue: .global) { data, _ in
    ///     print(data.count, "bytes")
    ///     group.leave()
    /// }
    /// await group.wait()
    /// ```
    ///
    /// The task resumes on the thread that called the last `leave()` and
    /// continues on its own executor. Cancelling the task does not end the
    /// wait: leave the group to end it.
    public func wait() async {
        await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
            let now = lock.withLock { () -> Bool in
                if count == 0 { return true }
                waiters.append(continuation)
                return false
            }
            if now { continuation.resume() }
        }
    }

    /// Waits until every entered item has left, or `timeout` passes.
    ///
    /// - Returns: `true` when the group became empty, `false` on timeout.
    ///
    /// The corresponding libdispatch function is `dispatch_group_wait`.
    public func wait(timeout: Duration) -> Bool {
        let deadline = monotonicNanoseconds() &+ timeout.clampedNanoseconds
        return lock.withLock {
            while count > 0 {
                if !lock.wait(untilNanoseconds: deadline) { return count == 0 }
            }
            return true
        }
    }

    /// Runs `work` on `queue` once the group is empty: at once if it is empty
    /// now, otherwise when the last item leaves. Each notification runs once.
    ///
    /// The corresponding libdispatch function is `dispatch_group_notify`.
    public func notify(queue: IOQueue, _ work: @escaping @Sendable () -> Void) {
        let now = lock.withLock { () -> Bool in
            if count == 0 { return true }
            notifications.append((queue, work))
            return false
        }
        if now { queue.async(work) }
    }
}
