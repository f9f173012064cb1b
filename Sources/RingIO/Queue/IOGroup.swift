/// Tracks a set of work items and waits for, or is notified of, their end.
///
/// The corresponding libdispatch type is `dispatch_group_t`.
public final class IOGroup: Sendable {
    private let lock = ConditionLock()
    // Read and written only under `lock`: the count of entered, unfinished items
    // and the notifications waiting for the count to reach zero.
    private nonisolated(unsafe) var count = 0
    private nonisolated(unsafe) var notifications: [(IOQueue, @Sendable () -> Void)] = []

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
        let ready = lock.withLock { () -> [(IOQueue, @Sendable () -> Void)] in
            precondition(count > 0, "IOGroup.leave() without a matching enter()")
            count -= 1
            guard count == 0 else { return [] }
            lock.broadcast()
            defer { notifications = [] }
            return notifications
        }
        for (queue, work) in ready { queue.async(work) }
    }

    /// Waits until every entered item has left.
    ///
    /// The corresponding libdispatch function is `dispatch_group_wait` with
    /// `DISPATCH_TIME_FOREVER`.
    public func wait() {
        lock.withLock {
            while count > 0 { lock.wait() }
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
