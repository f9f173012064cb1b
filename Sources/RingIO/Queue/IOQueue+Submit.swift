import RingIOBase

extension IOQueue {
    // MARK: - groups and work items

    /// Schedules `work` on the queue as part of `group`: the group is
    /// entered now and left when `work` returns.
    ///
    /// - Parameters:
    ///   - group: The group that counts the item.
    ///   - work: The work.
    ///
    /// The corresponding libdispatch function is `dispatch_group_async`.
    public func async(group: IOGroup, _ work: @escaping @Sendable () -> Void) {
        group.enter()
        async {
            work()
            group.leave()
        }
    }

    /// Schedules a work item; a barrier item runs alone on a concurrent queue.
    ///
    /// An item cancelled before it starts does not run its work, and counts
    /// as finished when the queue reaches it.
    ///
    /// - Parameter item: The item.
    ///
    /// The corresponding libdispatch function is `dispatch_async` with a
    /// `dispatch_block_create`d block.
    public func async(execute item: IOWorkItem) {
        enqueue(.work({ item.perform() }, barrier: item.barrier && kind == .concurrent))
    }

    // MARK: - after a deadline

    /// Schedules `work` on the queue at `deadline`, never before.
    ///
    /// No thread waits for it: the items of every queue wait in one heap,
    /// and only the earliest deadline is armed on the library's timer
    /// service (the shared engine's ring when it runs on io_uring, otherwise
    /// one thread for every timer); a worker hands what is due to its queues. Items of one queue whose deadlines differ are queued in
    /// deadline order. A deadline already past queues `work` now, in its FIFO
    /// place before any later `async`.
    ///
    /// - Parameters:
    ///   - deadline: The earliest time to queue `work`.
    ///   - work: The work.
    ///
    /// The corresponding libdispatch function is `dispatch_after`.
    public func asyncAfter(deadline: ContinuousClock.Instant, _ work: @escaping @Sendable () -> Void) {
        let now = ContinuousClock.now
        if deadline <= now { return async(work) }
        AfterScheduler.shared.schedule(.work(work, barrier: false), on: self, at: deadline, now: now)
    }

    /// Schedules a work item on the queue at `deadline`, never before.
    ///
    /// As ``asyncAfter(deadline:_:)``; an item cancelled before then does not
    /// run its work.
    ///
    /// - Parameters:
    ///   - deadline: The earliest time to queue the item.
    ///   - item: The item.
    ///
    /// The corresponding libdispatch function is `dispatch_after` with a
    /// `dispatch_block_create`d block.
    public func asyncAfter(deadline: ContinuousClock.Instant, execute item: IOWorkItem) {
        let now = ContinuousClock.now
        if deadline <= now { return async(execute: item) }
        AfterScheduler.shared.schedule(.work({ item.perform() }, barrier: item.barrier && kind == .concurrent),
                                       on: self, at: deadline, now: now)
    }

    // MARK: - sync barrier

    /// Runs `work` on the queue alone and waits for it: on a concurrent
    /// queue it starts after every earlier item has finished, and no later
    /// item starts before it returns. On a serial queue it is `sync`.
    ///
    /// `work` runs on the calling thread, as with `sync`.
    ///
    /// - Parameter work: The work.
    /// - Returns: What `work` returns.
    /// - Throws: What `work` throws.
    ///
    /// The corresponding libdispatch function is `dispatch_barrier_sync`.
    public func syncBarrier<T>(_ work: () throws -> T) rethrows -> T {
        guard kind == .concurrent else { return try sync(work) }
        var waiter: SyncWaiter?
        state.withLock { s in
            if s.suspendCount == 0 && s.items.isEmpty && !s.barrierActive && s.running == 0 {
                s.running = 1
                s.barrierActive = true
            } else {
                let w = SyncWaiter()
                s.items.append(.sync(w, barrier: true))
                waiter = w
            }
        }
        _ = waiter?.wait()
        defer { finishConcurrent(barrier: true) }
        if let routeTarget { return try routeTarget.sync { try IOQueue.withCurrent(self, work) } }
        return try IOQueue.withCurrent(self, work)
    }
}
