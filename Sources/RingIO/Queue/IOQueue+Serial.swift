import RingIOBase

/// Ownership of a serial queue: who runs its items, and how it passes on.
///
/// A serial queue is owned by at most one thread at a time: a pool worker
/// draining it, or a `sync` caller running its block. When the owner is done,
/// ownership passes on without going through the pool where it can:
///
/// - to the `sync` caller at the head of the FIFO, directly (it runs on its
///   own thread, as in libdispatch);
/// - otherwise, when a `sync` caller waits behind async items, to that caller:
///   it runs the items ahead of it, in order, on its own thread, then its own
///   block (a "drainer");
/// - otherwise to a drain job on the pool.
///
/// And a `sync` caller that finds the queue owned by a drain job no worker has
/// started yet takes that job's place. So a thread blocked in `sync` on a serial
/// queue never waits for a pool worker to become free: however many workers
/// wait in `sync` (every one of them, say), the queues they wait on still move,
/// and the pool cannot deadlock on itself.
extension IOQueue {
    /// What an owner giving up a serial queue must do once the lock is released.
    enum SerialHandoff {
        case none
        case grant(SyncWaiter, drain: Bool)
        case submitDrain
    }

    /// Passes ownership of a serial queue on (the caller owns it). Under the lock.
    static func serialHandoff(_ s: inout State) -> SerialHandoff {
        if s.suspendCount > 0 || s.items.isEmpty {
            s.scheduled = false
            return .none
        }
        if case .sync(let waiter, _) = s.items.first! {
            _ = s.items.popFirst()
            s.syncWaiters -= 1
            return .grant(waiter, drain: false)
        }
        if s.drainersAllowed && s.syncWaiters > 0, let waiter = s.items.firstMap({ item -> SyncWaiter? in
            if case .sync(let w, _) = item { return w }
            return nil
        }) {
            return .grant(waiter, drain: true)
        }
        s.drainPending = true
        return .submitDrain
    }

    func perform(_ handoff: SerialHandoff) {
        switch handoff {
        case .none: break
        case .grant(let waiter, let drain): waiter.grant(drain: drain)
        case .submitDrain: submitDrain()
        }
    }

    /// Hands the drain job to the queue's runner (the ring thread of an
    /// engine's queue), or to the worker pool when it has none or it stopped.
    @inline(__always)
    func submitDrain() {
        if let runner, runner.scheduleDrain(self) { return }
        if let routeTarget {
            // One item of the target: the target's serial domain is ours.
            return routeTarget.enqueue(.work({ self.drainSerial() }, barrier: false))
        }
        WorkerPool.shared.submit(.drain(self))
    }

    /// Makes the calling thread the owner of this serial queue: at once when
    /// it is free, or after every earlier item (which this thread may run).
    func acquireSerialOwnership() {
        var waiter: SyncWaiter?
        var drain = false
        state.withLock { s in
            if !s.scheduled && s.suspendCount == 0 && s.items.isEmpty {
                s.scheduled = true
                return
            }
            let w = SyncWaiter()
            s.items.append(.sync(w, barrier: false))
            s.syncWaiters += 1
            waiter = w
            if s.suspendCount == 0 && s.drainPending && s.syncWaiters == 1 && s.drainersAllowed {
                // The owner is a drain job that no worker has started (perhaps
                // none can: every one may be blocked). Take its place.
                s.drainPending = false
                drain = true
            }
        }
        guard let waiter else { return }
        if !drain { drain = waiter.wait() }
        while drain {
            // Run the items ahead of ours, in order, on this thread.
            enum Step { case run(@Sendable () -> Void), job(UnownedJob, isolated: Bool), mine, wait, passTo(SyncWaiter) }
            let step = state.withLock { s -> Step in
                if s.suspendCount > 0 {
                    // Suspended mid-way: give the queue up; `resume` hands it back.
                    s.scheduled = false
                    waiter.reset()
                    return .wait
                }
                switch s.items.popFirst()! {
                case .work(let work, _):
                    return .run(work)
                case .job(let job, let isolated):
                    return .job(job, isolated: isolated)
                case .sync(let w, _):
                    s.syncWaiters -= 1
                    if w === waiter { return .mine }
                    // Not expected (the first waiter drains), but harmless:
                    // that caller runs first and hands the queue back to us.
                    waiter.reset()
                    return .passTo(w)
                }
            }
            switch step {
            case .run(let work):
                IOQueue.withCurrent(self, work)
            case .job(let job, let isolated):
                IOQueue.withCurrent(self) { runSerialJob(job, isolated: isolated) }
            case .mine:
                drain = false
            case .wait:
                drain = waiter.wait()
            case .passTo(let other):
                other.grant(drain: false)
                drain = waiter.wait()
            }
        }
    }

    /// Gives up ownership after a `sync` block.
    func releaseSerialOwnership() {
        perform(state.withLock { IOQueue.serialHandoff(&$0) })
    }

    /// Drains a serial queue on a pool worker.
    package func drainSerial() {
        let mine = state.withLock { s -> Bool in
            // A `sync` caller took this job's place.
            guard s.drainPending else { return false }
            s.drainPending = false
            return true
        }
        guard mine else { return }
        IOQueue.withCurrent(self) {
            var budget = IOQueue.serialDrainBudget
            while true {
                enum Next { case run(@Sendable () -> Void), job(UnownedJob, isolated: Bool), handoff(SerialHandoff) }
                let next = state.withLock { s -> Next in
                    if s.suspendCount > 0 || s.items.isEmpty || budget == 0 {
                        // Stop, or (fairness) let other queues' jobs run first.
                        return .handoff(IOQueue.serialHandoff(&s))
                    }
                    switch s.items.popFirst()! {
                    case .work(let work, _):
                        return .run(work)
                    case .job(let job, let isolated):
                        return .job(job, isolated: isolated)
                    case .sync(let waiter, _):
                        // Ownership passes to the `sync` caller, who releases it.
                        s.syncWaiters -= 1
                        return .handoff(.grant(waiter, drain: false))
                    }
                }
                switch next {
                case .run(let work):
                    work()
                    budget -= 1
                case .job(let job, let isolated):
                    runSerialJob(job, isolated: isolated)
                    budget -= 1
                case .handoff(let handoff):
                    perform(handoff)
                    return
                }
            }
        }
    }
}

/// A thread that runs serial queues' drain jobs itself: an engine's ring
/// thread runs those of `IOEngine.queue` between reaps.
package protocol QueueRunner: AnyObject, Sendable {
    /// Arranges for `queue.drainSerial()` to run soon on the runner's thread;
    /// `false` when the runner has stopped (the pool runs it instead).
    func scheduleDrain(_ queue: IOQueue) -> Bool
}

/// A `sync` caller waiting for its turn on a queue.
final class SyncWaiter: Sendable {
    private let lock = ConditionLock()
    // Read and written only under `lock` (`Mutex` has no condition to sleep on).
    private nonisolated(unsafe) var granted = false
    private nonisolated(unsafe) var drain = false

    /// Wakes the caller. `drain`: it owns a serial queue and runs the items
    /// ahead of its own first.
    func grant(drain: Bool = false) {
        lock.withLock {
            granted = true
            self.drain = drain
            lock.signal()
        }
    }

    /// Waits for `grant`; returns its `drain`.
    func wait() -> Bool {
        lock.withLock {
            while !granted { lock.wait() }
            return drain
        }
    }

    /// Makes the next `wait` wait for another `grant`.
    func reset() {
        lock.withLock { granted = false }
    }
}
