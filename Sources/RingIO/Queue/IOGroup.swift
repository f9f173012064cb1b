import RingIOBase

/// Tracks a set of work items and waits for, or is notified of, their end.
///
/// The corresponding libdispatch type is `dispatch_group_t`.
public final class IOGroup: Sendable {
    private let completion = Completion()
    // Read and written only under `completion.lock`: the count of entered,
    // unfinished items.
    private nonisolated(unsafe) var count = 0

    /// An empty group.
    ///
    /// The corresponding libdispatch function is `dispatch_group_create`.
    public init() {}

    /// Marks the start of one item.
    ///
    /// The corresponding libdispatch function is `dispatch_group_enter`.
    public func enter() {
        completion.lock.withLock { count += 1 }
    }

    /// Marks the end of one item; at zero, waiters wake and notifications run.
    ///
    /// - Precondition: every `leave()` matches an earlier `enter()`.
    ///
    /// The corresponding libdispatch function is `dispatch_group_leave`.
    public func leave() {
        completion.lock.withLock { () -> Completion.Released in
            precondition(count > 0, "IOGroup.leave() without a matching enter()")
            count -= 1
            return count == 0 ? completion.finishLocked() : .none
        }.run()
    }

    /// Blocks the calling thread until every entered item has left.
    ///
    /// Do not call it from a task (it would hold one of Swift's few
    /// cooperative threads): `await wait()` there.
    ///
    /// The corresponding libdispatch function is `dispatch_group_wait` with
    /// `DISPATCH_TIME_FOREVER`.
    public func wait() {
        completion.wait { count == 0 }
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
        await completion.wait { count == 0 }
    }

    /// Waits until every entered item has left, or `timeout` passes.
    ///
    /// - Returns: `true` when the group became empty, `false` on timeout.
    ///
    /// The corresponding libdispatch function is `dispatch_group_wait`.
    public func wait(timeout: Duration) -> Bool {
        completion.wait(until: { count == 0 }, timeout: timeout)
    }

    /// Runs `work` on `queue` once the group is empty: at once if it is empty
    /// now, otherwise when the last item leaves. Each notification runs once.
    ///
    /// The corresponding libdispatch function is `dispatch_group_notify`.
    public func notify(queue: IOQueue, _ work: @escaping @Sendable () -> Void) {
        completion.notify(queue: queue, work) { count == 0 }
    }
}
