/// Swift concurrency on RingIO's queues.
///
/// A serial `IOQueue` is a `SerialExecutor`: an actor that returns
/// `queue.asUnownedSerialExecutor()` from `unownedExecutor` runs its methods on
/// that queue, so channel handlers delivered on the same queue touch the
/// actor's state without a hop:
///
/// ```swift
/// actor Counter {
///     let queue = IOQueue(label: "counter")
///     nonisolated var unownedExecutor: UnownedSerialExecutor { queue.asUnownedSerialExecutor() }
///     var bytes = 0
/// }
/// ```
///
/// Any `IOQueue` is a `TaskExecutor` (`Task(executorPreference: queue)`).
extension IOQueue: SerialExecutor, TaskExecutor {
    /// Runs `job` (a task's next part, or an actor's) as one work item of
    /// this queue: on a serial queue isolated to it, in order with the
    /// queue's other work; on a concurrent queue, as the task's executor.
    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        switch kind {
        case .serial:
            // The job itself is the item (no closure around it). On the ring
            // queue, from the ring thread (a task resumed by a completion
            // during a reap), it joins the reap's batch and runs on the ring
            // thread right after the reap, with no wake-up.
            enqueue(.job(job))
        case .concurrent:
            async { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
        }
    }

    /// Runs a job item of this serial queue (its drain's thread, which owns it).
    @inline(__always)
    func runSerialJob(_ job: UnownedJob) {
        job.runSynchronously(isolatedTo: asUnownedSerialExecutor(), taskExecutor: asUnownedTaskExecutor())
    }

    /// - Precondition: the queue is serial; a concurrent queue cannot isolate an actor.
    public func asUnownedSerialExecutor() -> UnownedSerialExecutor {
        precondition(
            kind == .serial,
            "IOQueue '\(label)' is concurrent: only a serial IOQueue can be an actor's SerialExecutor"
        )
        return UnownedSerialExecutor(ordinary: self)
    }

    /// This queue as a task executor: `Task(executorPreference: queue)` or
    /// `withTaskExecutorPreference(queue)` runs a task's nonisolated code,
    /// the code after each `await` included, on the queue.
    public func asUnownedTaskExecutor() -> UnownedTaskExecutor {
        UnownedTaskExecutor(ordinary: self)
    }

    public func checkIsolated() {
        precondition(
            IOQueue.isCurrentThreadRunning(self),
            "expected to run on IOQueue '\(label)', but the current thread is not running it"
        )
    }

    public func isIsolatingCurrentContext() -> Bool? {
        IOQueue.isCurrentThreadRunning(self)
    }
}
